"""Refusals that help: a misspelt name gets "did you mean ...?", a missing model folder is
called missing (never taken for a hub id)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cdd_cli.cli.app import app
from cdd_cli.errors import InputError
from cdd_cli.models.registry import resolve_directory
from cdd_cli.suggest import closest, did_you_mean

runner = CliRunner()


def test_the_suggestion_is_the_close_name_or_nothing():
    assert closest("toxicty", ["sa", "toxicity", "qed"]) == "toxicity"
    assert closest("TOXICITY", ["toxicity"]) == "toxicity"  # case aside
    assert closest("zzz", ["sa", "toxicity"]) is None
    assert did_you_mean("rejct", ["cdd", "reject"]) == "; did you mean 'reject'?"
    assert did_you_mean("zzz", ["cdd", "reject"]) == ""
    assert did_you_mean("stepz", ["n", "steps"], prefix="sampling.") == (
        "; did you mean 'sampling.steps'?"
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["molecules", "--method", "rejct"],
            "--method must be one of cdd, paper, unconstrained, reject, exact, got 'rejct'; "
            "did you mean 'reject'?",
        ),
        (
            ["generate", "--sampler", "confidnce"],
            "--sampler must be one of ancestral, confidence, margin, entropy, got 'confidnce'; "
            "did you mean 'confidence'?",
        ),
        (
            ["molecules", "--decode", "plian"],
            "--decode must be one of well-formed, plain, got 'plian'; did you mean 'plain'?",
        ),
        (
            ["molecules", "-c", "toxicty", "--tau", "0.5"],
            "--constraint toxicty: unknown constraint type 'toxicty'; did you mean 'toxicity'? "
            "(`cdd constraints ls` lists them all)",
        ),
    ],
)
def test_a_misspelt_flag_value_gets_the_name_it_misspells(args: list[str], expected: str):
    result = runner.invoke(app, [*args, "-n", "1"])
    assert result.exit_code == 2
    assert result.stderr == f"cdd: error: {expected}\n"


def test_a_training_setting_misspelt_gets_its_choice(tmp_path: Path):
    result = runner.invoke(
        app, ["train", "molecules", "--out", str(tmp_path / "run"), "--noise", "uniformm"]
    )
    assert result.exit_code == 2
    assert "got 'uniformm'; did you mean 'uniform'?" in result.stderr
    assert not (tmp_path / "run").exists()  # refused before anything is written


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "constraints:\n  - type: toxicty\n    tau: 0.5\n",
            ":2: unknown constraint type 'toxicty'; did you mean 'toxicity'?",
        ),
        ("modle: default-molecules\n", ":1: unknown key 'modle'; did you mean 'model'?"),
        (
            "constraints:\n  - type: sa\n    tua: 3\n",
            ":3: unknown key 'tua' for constraint 'sa'; did you mean 'tau'?",
        ),
        ("sampling:\n  decode: plian\n", "got 'plian'; did you mean 'plain'?"),
    ],
)
def test_a_misspelt_spec_name_gets_the_name_it_misspells(tmp_path: Path, text: str, expected: str):
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    result = runner.invoke(app, ["validate", str(spec)])
    assert result.exit_code == 2
    assert expected in result.stderr and len(result.stderr.splitlines()) == 1


def test_a_name_close_to_none_lists_what_there_is():
    result = runner.invoke(app, ["molecules", "-c", "zzzz", "--tau", "1", "-n", "1"])
    assert result.exit_code == 2
    assert "unknown constraint type 'zzzz' (available: sa, " in result.stderr
    assert "did you mean" not in result.stderr


def test_a_missing_model_folder_is_called_missing_not_a_hub_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError) as refused:
        resolve_directory("./mdlm-owt")
    message = refused.value.cli  # as the command line says it (the API: model './mdlm-owt')
    assert message.startswith("--model ./mdlm-owt: no such directory, and not a shipped model")
    assert message.endswith("; for a model on the Hugging Face hub, write hf://org/name")
    assert "hf://./" not in message
    # A name shaped like a hub id is shown as one; a shipped name misspelt is suggested.
    with pytest.raises(InputError, match=r"write hf://org-x/model_1\.5$"):
        resolve_directory("org-x/model_1.5")
    with pytest.raises(InputError, match=r"; did you mean 'default-molecules'\?$"):
        resolve_directory("default-molecule")
    for path in ("../mdlm-owt", "~/mdlm-owt", "/abs/mdlm-owt"):
        with pytest.raises(InputError, match=r"hf://org/name$"):
            resolve_directory(path)
