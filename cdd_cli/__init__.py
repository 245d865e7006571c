"""cdd: constrained discrete diffusion for text and molecules.

    import cdd_cli as cdd
    generator = cdd.Generator("default-molecules", [cdd.SA(tau=3.5)])
    records = generator.molecules(n=16, seed=0)      # or: cdd.molecules(n=16, ...)

The same records as `cdd molecules` / `cdd generate` write (see `cdd_cli.api`).
"""

from cdd_cli.api import (
    SA,
    Count,
    Exclude,
    Generator,
    Include,
    JsonSchema,
    Model,
    Novelty,
    Regex,
    SentenceCount,
    Toxicity,
    WordAt,
    WordCount,
    check_spec,
    constraint,
    generate,
    load_model,
    load_spec,
    molecules,
)
from cdd_cli.errors import InputError
from cdd_cli.reporting import Reporter
from cdd_cli.version import __version__

__all__ = [
    "SA",
    "Count",
    "Exclude",
    "Generator",
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
    "__version__",
    "check_spec",
    "constraint",
    "generate",
    "load_model",
    "load_spec",
    "molecules",
]
