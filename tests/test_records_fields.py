"""What a record's fields say, read by any JSON reader: bounds with their side, seeds as
strings, and `novel` judged against the set a novelty constraint calls known (named)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cdd_cli.constraints.properties import property_bounds
from cdd_cli.constraints.sa import SAConstraint
from cdd_cli.diffusion.sampler import sample_seed
from cdd_cli.evaluate.reference import write_smiles
from cdd_cli.models import registry
from cdd_cli.run.domains import DOMAINS
from cdd_cli.run.drawing import Draw, Prompt
from cdd_cli.run.record import record
from cdd_cli.spec.model import Spec


@pytest.fixture(scope="module")
def loaded(uniform_model_dir: Path):
    return registry.load(str(uniform_model_dir), "molecules", "cpu", weights=False)


def judged_record(loaded, constraints: list, text: str = "CCO", attempts: int = 1) -> dict:
    draw = Draw(
        index=3,
        text=text,
        attempts=attempts,
        values={c.name: v for c in constraints for v in c.judge([text])},
        surrogates={c.name: None for c in constraints},
        satisfied=True,
    )
    return record(draw, constraints, Spec(), loaded, Prompt(1))


def test_a_bound_is_written_as_min_or_max_never_a_bare_tau(loaded):
    upper = SAConstraint(tau=3.5, net=None)
    lower, high = property_bounds("qed", {"min": 0.2, "max": 0.9}, None)
    (mw,) = property_bounds("mw", {"max": 120}, None)
    constraints = {name: report for name, report in judged_record(
        loaded, [upper, lower, high, mw])["constraints"].items()}  # fmt: skip
    assert constraints["sa"]["max"] == 3.5 and "min" not in constraints["sa"]
    assert constraints["qed.min"]["min"] == 0.2 and "max" not in constraints["qed.min"]
    assert constraints["qed.max"]["max"] == 0.9
    assert constraints["mw"]["max"] == 120
    assert all("tau" not in report for report in constraints.values())


def test_sample_seed_is_a_decimal_string_that_survives_a_double(loaded):
    row = judged_record(loaded, [], attempts=3)
    seed = sample_seed(0, 1, 3, 2)
    assert seed > 2**53  # a double cannot hold it: jq would print another seed
    assert row["sample_seed"] == str(seed)
    # Read as JavaScript reads JSON (numbers as doubles), the seed is still the seed.
    assert int(json.loads(json.dumps(row), parse_int=float)["sample_seed"]) == seed


def test_novel_is_judged_against_what_novelty_calls_known_and_says_which(
    tmp_path: Path, uniform_model_dir: Path
):
    model = tmp_path / "model"
    shutil.copytree(uniform_model_dir, model)
    fields_of = lambda: DOMAINS["molecules"].record_fields(  # noqa: E731
        registry.load(str(model), "molecules", "cpu", weights=False), "well-formed"
    )
    alone = fields_of()(Draw(0, text="CCCC"))
    assert alone["novel"] is True and alone["novel_against"] == "training"
    write_smiles(model / "heldout.smi.gz", ["CCCC"], "tests")  # held out, so known to --novel
    held = fields_of()(Draw(0, text="CCCC"))
    assert held["novel"] is False and held["novel_against"] == "training + held-out"
    assert fields_of()(Draw(0, text="CCCCO"))["novel"] is True
