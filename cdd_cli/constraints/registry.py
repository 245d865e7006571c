"""Building constraints from validated spec entries, through the type table (`table.py`)."""

from __future__ import annotations

from dataclasses import replace

from cdd_cli.constraints import table
from cdd_cli.constraints.base import Constraint
from cdd_cli.constraints.descriptor import ConstraintSpec
from cdd_cli.constraints.surrogates import (
    SHIPPED_SURROGATES,  # noqa: F401 (`cdd eval` reads it)
    one_build,
)
from cdd_cli.errors import InputError
from cdd_cli.models.registry import LoadedModel
from cdd_cli.models.tokenizers import TextTokenizer


def build_constraints(
    specs: list[ConstraintSpec], model: LoadedModel, device: str, words: str = "plain"
) -> list[Constraint]:
    """The constraints of `specs` for `model`; lexical ones judged and laid out under the word
    rules `words` (a spec's `words:`)."""
    built: list[Constraint] = []
    text_model = isinstance(model.tokenizer, TextTokenizer)
    with one_build():  # entries that share a surrogate folder load it once
        for spec in specs:
            described = table.descriptor_of(spec.type)
            if described is None:  # spec validation admits only types the table has
                raise InputError(f"{spec.where}: constraint type '{spec.type}' is not available")
            if not described.applies_to(text_model):
                needs = "a text model (`cdd generate`)" if not text_model else "molecules"
                raise InputError(
                    f"{spec.where}: '{spec.type}' applies to {needs}; {model.name} is "
                    + ("a text model" if text_model else "a molecule model")
                )
            filled = replace(spec, options={**described.defaults, **spec.options})
            built += described.build(filled, model, device, words)
    return unique_names(built)


def unique_names(constraints: list[Constraint]) -> list[Constraint]:
    """Records key constraints by name: a second `word_at` becomes `word_at#2`."""
    seen: dict[str, int] = {}
    out = []
    for c in constraints:
        seen[c.name] = seen.get(c.name, 0) + 1
        out.append(c if seen[c.name] == 1 else replace(c, name=f"{c.name}#{seen[c.name]}"))
    return out
