"""The Python API: the CLI's records from a function call, constraints as validated values."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

import cdd_cli as cdd
from cdd_cli.cli.app import app
from cdd_cli.spec.entries import check_lookahead
from cdd_cli.spec.model import Spec

runner = CliRunner()


def without_timing(record: dict) -> dict:
    out = {k: v for k, v in record.items() if k not in ("seconds", "created")}
    if out.get("projection"):
        out["projection"] = {k: v for k, v in out["projection"].items() if k != "seconds"}
    return out


def cli_records(args: list[str]) -> list[dict]:
    result = runner.invoke(app, [*args, "--quiet"])
    assert result.exit_code in (0, 3), result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.mark.slow
def test_molecule_records_equal_the_clis():
    api = cdd.molecules(n=6, constraints=[cdd.SA(tau=3.0), cdd.Novelty()], seed=4, batch_size=4)
    flags = ["-n", "6", "-c", "sa", "--tau", "3.0", "--novel", "--seed", "4", "--batch-size"]
    cli = cli_records(["molecules", *flags, "4"])
    api = list(api)
    assert len(api) == 6
    assert [without_timing(r) for r in api] == [without_timing(r) for r in cli]
    assert all(r["method"] == "cdd" and r["projection"] is not None for r in api)


@pytest.mark.slow
def test_text_records_equal_the_clis():
    api = cdd.generate(
        ["The whale", {"prompt": "Call me", "id": "q2"}],
        n=2,
        constraints=[cdd.Toxicity(tau=0.5)],
        length=10,
        seed=1,
    )
    prompts = "\n".join(
        json.dumps(p) for p in [{"prompt": "The whale"}, {"prompt": "Call me", "id": "q2"}]
    )
    args = ["generate", "--prompts", "-", "-n", "2", "-c", "toxicity", "--tau", "0.5"]
    result = runner.invoke(app, [*args, "--length", "10", "--seed", "1", "-q"], input=prompts)
    assert result.exit_code in (0, 3), result.stderr
    cli = [json.loads(line) for line in result.stdout.splitlines()]
    api = list(api)
    assert [r["prompt_id"] for r in api] == [None, None, "q2", "q2"]
    assert [without_timing(r) for r in api] == [without_timing(r) for r in cli]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: cdd.SA(tau=12), "'tau': 12 is outside [1, 10] for 'sa'"),
        (lambda: cdd.Toxicity(tau=0.5, scope="all"), "'scope' must be one of"),
        (lambda: cdd.WordAt(position=0, word="whale"), "1-based"),
        (lambda: cdd.WordCount(), "word_count needs min, max or equals"),
        (lambda: cdd.constraint("sa", tau=3, colour="red"), "unknown option 'colour'"),
        (lambda: cdd.constraint("qed2", tau=0.5), "unknown constraint type 'qed2'"),
        (lambda: cdd.molecules(constraints=["sa"]), "expected values such as cdd.SA"),
        (lambda: cdd.molecules(n=0), "n must be positive"),
        (lambda: cdd.molecules(method="best"), "method must be one of"),
        (lambda: cdd.generate("  "), "prompts[0]: the prompt is empty"),
        (lambda: cdd.generate([]), "prompts: none given"),
        (lambda: cdd.molecules(model="default-text"), "is a text model"),
        (lambda: cdd.Include("whale"), "give a list of words, e.g. ['whale']"),
        (lambda: cdd.SA(tau="3"), "option 'tau': expected number, got '3'"),
        (lambda: cdd.SA(tau=True), "option 'tau': expected number, got True"),
        (lambda: cdd.WordCount(equals=3.7), "option 'equals': expected int"),
        (lambda: cdd.molecules(n=1, device="gpu"), "unknown device 'gpu'"),
        (lambda: cdd.SentenceCount(), "sentence_count needs min, max or equals"),
        (lambda: cdd.generate("Hi", words="nltk"), "words must be one of plain, collie"),
        # A Python caller's wrong types: the same one line, never another exception.
        (lambda: cdd.molecules(n="4"), "n must be an integer, got '4'"),
        (lambda: cdd.molecules(n=2, seed=1.5), "seed must be an integer, got 1.5"),
        (lambda: cdd.molecules(n=2, seed=True), "seed must be an integer, got True"),
        (lambda: cdd.generate("Hi", length="8"), "length must be an integer, got '8'"),
        (lambda: cdd.generate(5), "prompts: expected a text or a list of them, got 5"),
        (lambda: cdd.generate("Hi", top_p="a"), "top_p must be a number, got 'a'"),
        (lambda: cdd.Generator(5), "model must be a name or a folder, got 5"),
        (lambda: cdd.Generator(spec=5), "spec: expected a Spec or a YAML file's path, got 5"),
        (lambda: cdd.molecules(n=1, reporter="x"), "reporter: expected a cdd.Reporter"),
        (lambda: cdd.Generator("default-text", chat="yes"), "chat must be True or False"),
    ],
)
def test_bad_input_raises_the_clis_one_line_error(make, message: str):
    with pytest.raises(cdd.InputError) as err:
        make()
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.slow
def test_a_spec_is_read_and_left_as_it_was(tmp_path: Path):
    path = tmp_path / "spec.yaml"
    path.write_text("constraints:\n  - type: sa\n    tau: 4.0\nsampling: {n: 3, seed: 2}\n")
    spec = cdd.load_spec(path)
    assert isinstance(spec, Spec) and spec.constraints[0].tau == 4.0
    from_path = [without_timing(r) for r in cdd.molecules(spec=path)]
    from_spec = [without_timing(r) for r in cdd.molecules(spec=spec)]
    assert from_path == from_spec and len(from_spec) == 3
    assert spec.projection.inner_iters is None  # the model's defaults filled a copy
    # A constraint passed in replaces the spec's entry of its type.
    tighter = list(cdd.molecules(spec=spec, constraints=[cdd.SA(tau=3.0)]))
    assert {r["constraints"]["sa"]["max"] for r in tighter} == {3.0}


def test_a_reporter_hears_records_and_steps():
    heard: list[tuple] = []

    class Listener(cdd.Reporter):
        def run_started(self, label: str, total: int, batch_size: int) -> None:
            heard.append(("start", label, total))

        def records_done(self, done: int, info: str) -> None:
            heard.append(("done", done))

        def step(self, info) -> None:
            heard.append(("step", info.index))

    records = cdd.molecules(n=3, seed=1, batch_size=2, steps=4, reporter=Listener())
    assert heard == []  # nothing sampled before the records are read
    assert len(list(records)) == 3
    assert heard[0] == ("start", "molecules", 3)
    assert [h for h in heard if h[0] == "done"] == [("done", 1), ("done", 2), ("done", 3)]
    assert [h[1] for h in heard if h[0] == "step"] == [0, 1, 2, 3] * 2


@pytest.mark.slow
def test_the_readme_python_example_runs(monkeypatch, capsys):
    root = Path(__file__).resolve().parent.parent
    section = (root / "docs" / "python-api.md").read_text(encoding="utf-8")
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(root)  # it reads constraints.example.yaml
    namespace: dict = {}
    exec(compile(code, "docs/python-api.md", "exec"), namespace)
    printed = capsys.readouterr().out
    assert printed.count("True") + printed.count("False") == 8  # one line per molecule
    assert "step 0 of" in printed
    assert len(namespace["records"]) == 4
    assert namespace["logits"].shape == (1, 3, len(namespace["model"].tokenizer))


def test_one_constraint_need_not_be_in_a_list():
    one = [without_timing(r) for r in cdd.molecules(n=2, steps=4, constraints=cdd.SA(tau=4.5))]
    listed = cdd.molecules(n=2, steps=4, constraints=[cdd.SA(tau=4.5)])
    assert one == [without_timing(r) for r in listed]


@pytest.mark.slow
def test_generate_takes_the_word_rules():
    rows = list(
        cdd.generate(
            n=2, length=24, steps=8, words="collie",
            constraints=[cdd.SentenceCount(equals=2), cdd.WordAt(position=1, word="the")],
        )
    )  # fmt: skip
    for row in rows:
        assert row["satisfied"] and row["constraints"]["word_at"]["judge"] == "collie-words"
        assert row["text"].split()[0].lower() == "the"  # COLLIE compares words lower-cased


def test_a_generator_loads_once_and_each_call_is_a_run_of_its_own(monkeypatch):
    from cdd_cli.models import registry

    loads: list[str | None] = []
    load = registry.load
    monkeypatch.setattr(
        registry, "load", lambda name, *a, **k: loads.append(name) or load(name, *a, **k)
    )
    generator = cdd.Generator("default-molecules", [cdd.SA(tau=4.0), cdd.Novelty()], steps=4)
    first = [without_timing(r) for r in generator.molecules(n=4, seed=3)]
    again = [without_timing(r) for r in generator.molecules(n=4, seed=3)]
    # Novelty remembers each run's own outputs only: the same seed, the same records.
    assert first == again and len(first) == 4
    other = [r["sample_seed"] for r in generator.molecules(n=2, seed=4)]
    assert other != [r["sample_seed"] for r in first[:2]]
    assert loads == ["default-molecules"]  # one load for three runs
    # The convenience is the same run.
    once = cdd.molecules(n=4, constraints=[cdd.SA(tau=4.0), cdd.Novelty()], steps=4, seed=3)
    assert [without_timing(r) for r in once] == first
    assert generator.spec.projection.inner_iters == 3  # filled for the model, once


@pytest.mark.slow
def test_a_generator_takes_a_loaded_model_and_its_domain_from_its_tokenizer():
    model = cdd.load_model("default-text", device="cpu")
    generator = cdd.Generator(model, cdd.Toxicity(tau=0.5), steps=4)
    rows = list(generator.generate("The sea was", n=2, length=8, seed=1))
    assert [r["id"] for r in rows] == ["0-0", "0-1"] and rows[0]["prompt"] == "The sea was"
    same = cdd.generate("The sea was", n=2, length=8, seed=1, steps=4,
                        constraints=[cdd.Toxicity(tau=0.5)], device="cpu")  # fmt: skip
    assert [without_timing(r) for r in same] == [without_timing(r) for r in rows]
    with pytest.raises(cdd.InputError, match="is not a text model"):
        cdd.Generator(cdd.load_model("default-molecules", device="cpu"), domain="text")
    with pytest.raises(cdd.InputError, match="give a model, or domain='molecules' or 'text'"):
        cdd.Generator()
    with pytest.raises(cdd.InputError, match=r"^length must be positive, got 0$"):
        generator.generate("The sea was", length=0)
    with pytest.raises(cdd.InputError, match=r"^molecules\(\): model default-text is a text model"):
        generator.molecules(2)
    # One {"prompt", "id"} object is one prompt (not its keys).
    one = list(generator.generate({"prompt": "Call me", "id": "q"}, n=1, length=4, seed=1))
    assert [(r["prompt"], r["prompt_id"]) for r in one] == [("Call me", "q")]


@pytest.mark.slow
def test_check_spec_fills_every_setting_without_loading_weights(tmp_path: Path):
    path = tmp_path / "words.yaml"
    path.write_text("model: default-text\nconstraints:\n  - {type: word_count, max: 8}\n")
    spec, checked = cdd.check_spec(path)
    assert checked == "1 constraint(s), model default-text, layout fits 64 tokens (--length 64)"
    assert spec.projection.support == 256 and spec.sampling.decode == "plain"
    with pytest.raises(cdd.InputError, match=r"^length 9999 exceeds model default-text's"):
        cdd.check_spec(path, 9999)
    # Nothing to project against: the method a run records, as a Generator compiles it.
    bare = tmp_path / "bare.yaml"
    bare.write_text("method: cdd\n")
    assert cdd.check_spec(bare)[0].method == "unconstrained"
    assert cdd.Generator(spec=bare, domain="molecules").spec.method == "unconstrained"


def test_a_run_fills_its_defaults_once(monkeypatch, tmp_path: Path):
    import cdd_cli.run.runner as runner_module

    filled: list[str] = []
    fill = runner_module.fill_defaults
    monkeypatch.setattr(
        runner_module,
        "fill_defaults",
        lambda spec, loaded: filled.append(spec.method) or fill(spec, loaded),
    )
    out = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["molecules", "-n", "2", "--steps", "4", "-c", "sa", "--tau", "4",
                                 "-q", "-o", str(out)])  # fmt: skip
    assert result.exit_code in (0, 3), result.stderr
    assert filled == ["cdd"] and len(out.read_text().splitlines()) == 2


def test_an_interrupted_write_says_how_to_finish_in_the_callers_words(tmp_path: Path):
    """Ctrl-C during `Generator.write` names the API call that finishes the run (not a `cdd`
    command made of the script's own arguments); a caller that passes its own hint (the CLI:
    its command line with --resume) has it said instead."""
    from cdd_cli.errors import Interrupted
    from cdd_cli.reporting import Display
    from cdd_cli.run.runner import Output

    class StopAfterOne(Display):
        def records_done(self, done: int, info: str) -> None:
            raise KeyboardInterrupt

    generator = cdd.Generator("default-molecules", steps=4, batch_size=2)
    out = str(tmp_path / "out.jsonl")
    with pytest.raises(Interrupted) as caught:
        generator.write(out, n=3, display=StopAfterOne())
    assert str(caught.value) == (
        f"interrupted: 1 of 3 records kept in {out}, each a complete line; finish it with: "
        f"the same Generator.write() call with Output({out!r}, resume=True) (Output: "
        "cdd_cli.run.runner)"
    )
    told = Output(out, resume=True, resume_hint="cdd molecules -n 3 -o out.jsonl --resume")
    with pytest.raises(Interrupted) as caught:
        generator.write(told, n=3, display=StopAfterOne())
    assert str(caught.value).endswith("; finish it with: cdd molecules -n 3 -o out.jsonl --resume")


def test_a_write_into_a_runs_records_says_how_to_resume_in_the_apis_words(tmp_path: Path):
    """`Generator.write` into a file that holds records of the run (an earlier call's): the
    refusal names the output and `Output(..., resume=True)`, never `-o` or `--resume` (the
    command line's words, which `.cli` keeps); resumed as it says, the run is finished."""
    from cdd_cli.run.runner import Output

    generator = cdd.Generator("default-molecules", steps=4, batch_size=2)
    out = str(tmp_path / "out.jsonl")
    heard: list[str] = []
    generator.write(out, n=2, seed=1, say=heard.append)
    with pytest.raises(cdd.InputError) as caught:
        generator.write(out, n=3, seed=1, say=heard.append)
    message = str(caught.value)
    assert message == (
        f"output {out!r}: already holds 2 of this run's 3 records (seed 1); resume "
        "(Output(..., resume=True)) to write only the missing ones, or choose another file"
    )
    assert "-o" not in message.replace(out, "") and "--resume" not in message
    assert caught.value.cli == (
        f"-o {out}: already holds 2 of this run's 3 records (seed 1); add --resume to write "
        "only the missing ones, or choose another file"
    )
    assert heard == []
    generator.write(Output(out, resume=True), n=3, seed=1, say=heard.append)
    assert len(Path(out).read_text().splitlines()) == 3


def test_the_apis_errors_name_no_flag(tmp_path: Path):
    """An API caller never wrote --model or --dtype: the API says model '...', dtype '...'."""
    with pytest.raises(cdd.InputError) as missing:
        cdd.load_model("nope", device="cpu")
    assert str(missing.value).startswith("model 'nope': no such directory, and not a shipped")
    assert "--" not in str(missing.value).split(";")[0]
    with pytest.raises(cdd.InputError, match=r"^model 'hf://x': a hub model is hf://owner/name$"):
        cdd.Generator("hf://x")
    with pytest.raises(cdd.InputError, match=r"^dtype 'bfloat16': only published families"):
        cdd.Generator("default-molecules", dtype="bfloat16", device="cpu")


@pytest.mark.slow
def test_the_cli_names_its_flags_where_the_api_names_its_arguments(tmp_path: Path, monkeypatch):
    """One problem, two wordings: the API's argument (length, steps, chat), the command
    line's flag (--length, --steps, --chat)."""
    words = tmp_path / "words.yaml"
    words.write_text("model: default-text\nconstraints:\n  - {type: word_count, max: 8}\n")
    text = ["generate", "--prompt", "Hi", "-n", "1", "-q"]
    blocks = ["--steps", "1", "--sampler", "confidence", "--block-length", "2", "--length", "8"]
    cases = [
        (["validate", str(words), "--length", "9999"], "--length 9999 exceeds model default-text"),
        ([*text, "--length", "0"], "--length must be positive, got 0"),
        ([*text, *blocks], "give --steps >= 4 or a longer --block-length"),
        ([*text, "--chat", "--length", "4"], "--chat: "),
    ]
    for args, flagged in cases:
        result = runner.invoke(app, args)
        assert result.exit_code == 2 and flagged in result.stderr, (args, result.stderr)
    with pytest.raises(cdd.InputError, match=r"^length 9999 exceeds"):
        cdd.check_spec(words, 9999)
    generator = cdd.Generator("default-text", device="cpu")
    with pytest.raises(cdd.InputError, match=r"give steps >= 4 or a longer block_length$"):
        cdd.Generator("default-text", steps=1, sampler="confidence", block_length=2).generate(
            "Hi", length=8
        )
    with pytest.raises(cdd.InputError, match=r"^chat: .* has no chat template"):
        cdd.Generator("default-text", chat=True).generate("Hi")
    # A batch past this machine's memory: batch_size to the API, --batch-size to the CLI.
    monkeypatch.setattr(os, "sysconf", lambda name: 4096)  # 4096 pages of 4 KiB: 16 MiB
    with pytest.raises(cdd.InputError, match=r"^batch_size 2: its \[batch, "):
        generator.generate("Hi", n=2, length=4)
    batch = ["--prompt", "Hi", "-n", "2", "--length", "4", "--batch-size", "2", "-q"]
    result = runner.invoke(app, ["generate", *batch])
    assert result.exit_code == 2 and "--batch-size 2: its [batch, " in result.stderr


@pytest.mark.slow
def test_lookahead_is_refused_wherever_it_would_be_ignored(tmp_path: Path):
    """`projection.lookahead` acts only under cdd with a regex or json_schema constraint: a
    spec that sets it elsewhere is refused by `cdd validate` and by a run, before any model
    is loaded (the API's cases: tests/test_api_inputs.py)."""
    regex = "  - {type: regex, pattern: '[a-z ]+'}\n"
    specs = {
        "reject": (f"method: reject\nconstraints:\n{regex}", "method reject does not use it"),
        "paper": ("method: paper\n", "method paper does not use it"),
        "unconstrained": ("method: unconstrained\n", "method unconstrained does not use it"),
        "nothing": ("method: cdd\n", "this spec has none"),
        "sa": ("constraints:\n  - {type: sa, tau: 3.5}\n", "this spec has none"),
    }
    for name, (body, why) in specs.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(f"{body}projection: {{lookahead: 4}}\n")
        runs = [["molecules", "--spec", str(path), "-n", "1"]] if name == "reject" else []
        for args in (["validate", str(path)], *runs):
            result = runner.invoke(app, args)
            line = result.stderr
            assert result.exit_code == 2, (args, result.output)
            assert line.startswith(f"cdd: error: {path}: projection.lookahead serves"), line
            assert why in line and line.count("\n") == 1, line
    kept = tmp_path / "kept.yaml"
    kept.write_text(f"model: default-text\nconstraints:\n{regex}projection: {{lookahead: 4}}\n")
    spec = cdd.load_spec(kept)  # where it acts, it stays (compiling the regex takes seconds)
    check_lookahead(spec.projection.lookahead, spec.method, spec.constraints, spec.source)
    assert spec.projection.lookahead == 4
