"""The record schema: what one sample's JSONL line says (the output layer, `output/`, writes
and reads these lines as plain data)."""

from __future__ import annotations

import time

from cdd_cli.constraints.base import Constraint
from cdd_cli.diffusion.sampler import sample_seed
from cdd_cli.methods import METHODS
from cdd_cli.models.registry import LoadedModel
from cdd_cli.run.drawing import Draw, Prompt
from cdd_cli.run.templated import OnBlank
from cdd_cli.spec.model import Spec
from cdd_cli.version import __version__


def bound_key(constraint: Constraint) -> str:
    """How a record names a constraint's threshold: "max" for an upper bound (value <= it),
    "min" for a lower one, so that no reader has to know which side a type's tau is on (a
    property's two bounds are two constraints, NAME.min and NAME.max)."""
    return "max" if constraint.upper_bound else "min"


def record(
    draw: Draw,
    constraints: list[Constraint],
    spec: Spec,
    loaded: LoadedModel,
    prompt: Prompt,
    extra: dict | None = None,
) -> dict:
    """A sample's record: what it is, what the judges say, how it was made and by what
    (`model_revision`: the first 12 hex digits of the weights file's SHA-256)."""
    return {
        "id": f"{prompt.index}-{draw.index}",
        "prompt_id": prompt.id,  # the prompts file's `id` (null without one): a fixed schema
        "prompt": prompt.shown if prompt.layout is None else None,
        "text": draw.text,
        **template_fields(prompt, draw),
        "seed": spec.sampling.seed,
        # The kept draw's own stream: what made this sample, whatever the batch or shard. A
        # decimal string: the seed has 63 bits, and a JSON reader that holds numbers as
        # doubles (jq, JavaScript) would round it to another seed past 2**53.
        "sample_seed": str(
            sample_seed(spec.sampling.seed, prompt.index, draw.index, max(draw.attempts - 1, 0))
        ),
        "model": loaded.name,
        "model_revision": loaded.revision,
        "method": spec.method,
        # null without constraints: nothing was asked, so nothing was satisfied or violated.
        "satisfied": draw.satisfied if constraints else None,
        "constraints": {
            c.name: {
                "value": draw.values[c.name],
                bound_key(c): c.tau,
                "satisfied": c.satisfied(draw.values[c.name]),
                "surrogate": draw.surrogates[c.name],
                "judge": c.judge_name,
                **({"blank": c.blank} if isinstance(c, OnBlank) else {}),
                **({"detail": d} if (d := c.explain(draw.text)) is not None else {}),
            }
            for c in constraints
        },
        "projection": {
            k: v if isinstance(v, str) or v is None else round(v, 4)
            for k, v in draw.projection.items()
        }
        if METHODS[spec.method].projects and constraints
        else None,
        "attempts": draw.attempts,
        **({"exact": exact_fields(draw)} if draw.accepted is not None else {}),
        **(extra or {}),
        "seconds": round(draw.seconds, 4),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cdd_version": __version__,
    }


def exact_fields(draw: Draw) -> dict:
    """The exact method's account of a sample: its kept draw's log-weight log p/q, whether it
    was kept by weight (False: the attempts ran out first), and every draw's importance
    weight w 1[satisfied] (their mean estimates P(constraints) under the model)."""
    return {
        "log_weight": round(draw.log_weight, 6) + 0.0,  # never -0.0
        "accepted": draw.accepted,
        "weights": [float(f"{w:.6g}") for w in draw.weights],
        "above_bound": float(f"{draw.above_bound:.6g}"),
    }


def template_fields(prompt: Prompt, draw: Draw) -> dict:
    """A template run's: the template, and each blank's fill (the decoding of its own token
    positions; the `fixed_text` verdict says whether the text holds the fixed parts)."""
    if prompt.layout is None:
        return {}
    return {"template": prompt.layout.template.source, "blanks": prompt.layout.fills(draw.text)}
