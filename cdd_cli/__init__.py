"""cdd: constrained discrete diffusion for text and molecules.

    import cdd_cli as cdd
    records = cdd.molecules(n=16, constraints=[cdd.SA(tau=3.5)], seed=0)

The same records as `cdd molecules` / `cdd generate` write (see `cdd_cli.api`).
"""

__version__ = "0.1.0"

from cdd_cli.api import (
    SA,
    Count,
    Exclude,
    Include,
    JsonSchema,
    Model,
    Novelty,
    Regex,
    SentenceCount,
    Toxicity,
    WordAt,
    WordCount,
    constraint,
    generate,
    load_model,
    load_spec,
    molecules,
)
from cdd_cli.errors import InputError
from cdd_cli.reporting import Reporter

__all__ = [
    "SA",
    "Count",
    "Exclude",
    "Include",
    "InputError",
    "JsonSchema",
    "Model",
    "Novelty",
    "Regex",
    "Reporter",
    "SentenceCount",
    "Toxicity",
    "WordAt",
    "WordCount",
    "constraint",
    "generate",
    "load_model",
    "load_spec",
    "molecules",
]
