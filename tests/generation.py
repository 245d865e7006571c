"""A `BatchDrawer` as a run makes one, for tests that drive it directly."""

from __future__ import annotations

from cdd_cli.constraints.base import Constraint
from cdd_cli.models.registry import LoadedModel
from cdd_cli.run.defaults import fill_defaults
from cdd_cli.run.drawing import BatchDrawer
from cdd_cli.spec.model import Spec


def generation(
    spec: Spec, loaded: LoadedModel, constraints: list[Constraint], steps: int
) -> BatchDrawer:
    """The spec's settings filled for the model (as a run fills them, once), then drawn with
    `steps` denoising steps."""
    spec.sampling.steps = steps
    fill_defaults(spec, loaded)
    return BatchDrawer(spec, loaded, constraints)
