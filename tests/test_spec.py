"""YAML specs and constraint flags: clear one-line errors (file, line, key) and exit 2."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from cdd_cli.cli.app import app
from cdd_cli.errors import InputError
from cdd_cli.settings import ALMSettings
from cdd_cli.spec.reader import load_spec

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent


def fake_plugin(monkeypatch: pytest.MonkeyPatch, **fields: Any) -> None:
    """Install a plugin of type 'mine' (package mine-pkg) as the entry points would."""
    from cdd_cli import plugins

    plugin = plugins.ConstraintPlugin(
        name="mine",
        domain=fields.pop("domain", "text"),
        judge=lambda texts, options: [0.0] * len(texts),
        **fields,
    )
    installed = plugins.Installed("mine", "mine-pkg", plugin)

    def find(name: str, builtin: frozenset) -> plugins.Installed | None:
        from cdd_cli.constraints import table

        assert builtin == table.BUILTIN  # a plugin may not take a built-in's name
        return installed if name == "mine" else None

    monkeypatch.setattr(plugins, "find", find)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


def test_example_spec_is_valid():
    spec = load_spec(ROOT / "constraints.example.yaml")
    assert spec.model == "default-molecules"
    assert [c.type for c in spec.constraints] == ["sa"]
    assert spec.projection.inner_iters is None and spec.projection.eta is None  # left to the model
    assert spec.resolved()["projection"] == asdict(ALMSettings())  # documents the defaults


def test_full_spec_round_trips_through_resolved(tmp_path: Path):
    path = write(
        tmp_path,
        """
model: default-molecules
method: reject
constraints:
  - type: sa
    tau: 3.5
    margin: 0.1
projection: {eta: 0.5, inner_iters: 10, max_outer_iters: 50, temperature: 0.7, mu_init: 2.5,
  support: null}
repair: {max_redraws: 1}
reject: {max_attempts: 4}
sampling: {steps: 16, batch_size: 8, seed: 3, n: 10}
""",
    )
    spec = load_spec(path)
    resolved = spec.resolved()
    assert resolved["method"] == "reject"
    assert resolved["constraints"] == [{"type": "sa", "tau": 3.5, "margin": 0.1}]
    # What the spec leaves out stays None: the method and model fill it in (run/defaults.py).
    assert resolved["projection"]["eta"] == 0.5 and resolved["projection"]["mu_max"] is None
    # A None-able float takes a number; null leaves a setting to the model.
    assert resolved["projection"]["mu_init"] == 2.5 and resolved["projection"]["support"] is None
    assert resolved["sampling"] == {
        "n": 10,
        "steps": 16,
        "batch_size": 8,
        "seed": 3,
        "decode": None,
        "sampler": None,
        "block_length": None,
        "dtype": None,
        "chat": False,
        "temperature": 1.0,
        "top_p": None,  # the model's kind decides: a nucleus for text, the full mass for SMILES
    }
    again = write(tmp_path, yaml.safe_dump(resolved))
    assert load_spec(again).resolved() == resolved


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "constraints:\n  - type: sa\n    tau: 12\n",
            r"spec.yaml:2: key 'tau': 12 is outside \[1, 10\]",
        ),
        ("constraints:\n  - type: sa\n    tau: 0.5\n", "outside"),
        ("constraints:\n  - type: sa\n", "spec.yaml:2: constraint 'sa' needs 'tau'"),
        (
            "constraints:\n  - type: bogus\n    tau: 1\n",
            "spec.yaml:2: unknown constraint type 'bogus'",
        ),
        (
            "constraints:\n  - type: word_at\n    position: 0\n    word: cat\n",
            "position': 1-based",
        ),
        ("constraints:\n  - type: word_at\n    position: 2\n    word: ' '\n", "'word' is empty"),
        ("constraints:\n  - type: include\n    words: []\n", "list of non-empty words"),
        ("constraints:\n  - type: word_count\n    min: 5\n    max: 3\n", "min 5 > max 3"),
        ("constraints:\n  - type: word_count\n    equals: 5\n    min: 3\n", "'equals' alone"),
        ("constraints:\n  - type: word_count\n", "needs min, max or equals"),
        ("constraints:\n  - type: count\n    letter: rr\n    word: x\n", "one character"),
        (
            "constraints:\n  - type: include\n    words: [cat]\n  - type: exclude\n"
            "    words: [dog, cat]\n",
            "'cat' is required here but excluded",
        ),
        (
            "constraints:\n  - type: word_at\n    position: 2\n    word: cat\n"
            "  - type: word_at\n    position: 2\n    word: dog\n",
            "word 2 cannot be 'dog'",
        ),
        ("constraints:\n  - type: toxicity\n    tau: 1.5\n", r"outside \[0, 1\]"),
        (
            "constraints:\n  - type: toxicity\n    tau: 0.5\n    scope: prompt\n",
            "'scope' must be one of continuation, full",
        ),
        (
            "constraints:\n  - type: sa\n    tau: 3\n    colour: red\n",
            "spec.yaml:4: unknown key 'colour' for constraint 'sa'",
        ),
        ("constraints:\n  - type: sa\n    tau: high\n", "spec.yaml:3: key 'tau': expected number"),
        ("constraints:\n  - tau: 3\n", "needs a 'type'"),
        ("constraints: sa\n", "key 'constraints' must be a list"),
        ("model: 3\n", "spec.yaml:1: key 'model': expected str"),
        ("modle: x\n", "spec.yaml:1: unknown key 'modle'"),
        ("projection:\n  eta: fast\n", "spec.yaml:2: key 'projection.eta': expected number"),
        ("projection:\n  etaa: 1\n", "spec.yaml:2: unknown key 'projection.etaa'"),
        ("projection:\n  inner_iters: 2.5\n", "key 'projection.inner_iters': expected int"),
        ("projection:\n  mu_init: big\n", "key 'projection.mu_init': expected number"),
        ("projection:\n  mu_max: 100\n  mu_init: 200\n", "needs 0 < mu_init <= mu_max"),
        ("projection:\n  support: 1\n", "support must be 0 \\(the whole vocabulary\\) or >= 2"),
        ("projection:\n  eta: -1\n", "projection.eta must be > 0"),
        ("sampling:\n  steps: 0\n", r"sampling.steps must be in \[1, 100,000\]"),
        ("method: magic\n", "'magic' is not one of"),
        (
            "constraints:\n  - type: sa\n    tau: [3\n",
            r"spec.yaml:\d+: YAML syntax error: expected",
        ),
        ("a: 1\na: 2\n", "given twice"),
        ("- 1\n- 2\n", "the spec must be a mapping"),
        # Non-finite numbers passed every range check and sampled garbage.
        ("projection:\n  eta: .nan\n", "spec.yaml:2: key 'projection.eta'"),
        ("projection:\n  delta: 0.1\n", "spec.yaml:2: unknown key 'projection.delta'"),
        ("projection:\n  eta: .inf\n", "must be a finite number, got inf"),
        ("constraints:\n  - type: sa\n    tau: 3.5\n    margin: .inf\n", "key 'margin'"),
        # Tags and merge keys used to end in a traceback.
        ("constraints:\n  - type: sa\n    tau: !foo 3.5\n", "spec.yaml:3: cannot read"),
        ("projection:\n  <<: {eta: 2.0}\n", "spec.yaml:2: cannot read this value"),
        ("projection:\n  mu_max: 1e3\n", r"write 1.0e\+3"),
        ("constraints:\n  - type: sa\n    tau: '3.5'\n", r"got '3.5' \(a quoted string"),
        ("model: ''\n", "spec.yaml:1: key 'model' is empty"),
        ("constraints:\n  - type: sa\n    tau: 3\n    surrogate: ''\n", "'surrogate' is empty"),
        ("constraints:\n  - type: novelty\n    tau: 3\n", r"\(known: type, reference\)"),
    ],
)
def test_bad_specs_name_file_line_and_key(tmp_path: Path, text: str, expected: str):
    path = write(tmp_path, text)
    with pytest.raises(InputError, match=expected) as err:
        load_spec(path)
    assert "\n" not in str(err.value)
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cdd: error: ")


def test_missing_and_binary_spec_files(tmp_path: Path):
    result = runner.invoke(app, ["molecules", "--spec", str(tmp_path / "none.yaml")])
    assert result.exit_code == 2 and "no such spec file" in result.stderr
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00bad")
    result = runner.invoke(app, ["validate", str(binary)])
    assert result.exit_code == 2 and "cannot read spec" in result.stderr


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--constraint", "sa"], "give one --tau per --constraint"),
        (["--tau", "3"], "--tau given without --constraint"),
        (["--constraint", "sa", "--tau", "11"], "outside [1, 10]"),
        (["--constraint", "nope", "--tau", "1"], "unknown constraint type 'nope'"),
        (["--method", "magic"], "--method must be one of"),
        (["--constraint", "word_at"], "its options (position, word) are given in a spec file"),
    ],
)
def test_bad_constraint_flags(args: list[str], expected: str):
    result = runner.invoke(app, ["molecules", "-n", "1", *args])
    assert result.exit_code == 2
    assert expected in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_validate_prints_the_resolved_spec():
    result = runner.invoke(app, ["validate", str(ROOT / "constraints.example.yaml")])
    assert result.exit_code == 0, result.stderr
    resolved = yaml.safe_load(result.stdout)
    assert resolved["constraints"][0]["type"] == "sa"
    # Settings left to the model are printed as the model fills them in, not as null.
    assert resolved["projection"]["support"] == 4 and resolved["sampling"]["steps"] == 32
    assert "ok" in result.stderr


def test_constraints_ls():
    result = runner.invoke(app, ["constraints", "ls"])
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0] == "type\tdomain\tkeys\ttau\tsource\tdescription"
    assert lines[1].startswith("sa\tmolecules\ttau, surrogate?, margin?\t[1, 10]\tbuilt-in\tRDKit")
    assert "\ntoxicity\ttext\t" in result.stdout and "\nword_at\ttext\t" in result.stdout
    listed = json.loads(runner.invoke(app, ["constraints", "ls", "--json"]).stdout)
    sa = next(row for row in listed if row["type"] == "sa")
    assert sa["tau_range"] == [1.0, 10.0] and sa["keys"]["tau"] == {"required": True}
    assert all(row["description"] for row in listed if row["source"] == "built-in")


def test_resolved_constraints_show_the_options_left_to_their_defaults(tmp_path: Path):
    spec = load_spec(write(tmp_path, "constraints:\n  - {type: toxicity, tau: 0.4}\n"))
    (tox,) = spec.resolved()["constraints"]
    assert tox == {"type": "toxicity", "tau": 0.4, "margin": 0.0, "scope": "continuation"}
    chosen = load_spec(
        write(tmp_path, "constraints:\n  - {type: toxicity, tau: 0.4, scope: full}\n")
    )
    assert chosen.resolved()["constraints"][0]["scope"] == "full"


def test_which_constraint_flags_need_a_tau(monkeypatch: pytest.MonkeyPatch):
    from cdd_cli.spec import entries as spec_module

    takes_tau = spec_module.takes_tau
    needs = ["sa", "qed", "toxicity", "max_heavy_atoms"]  # the last a plugin with no default
    free = ["novelty", "pains", "regex", "word_count"]
    assert [takes_tau(n) for n in needs + free] == [True] * 4 + [False] * 4
    # A plugin with a default tau needs none (and resolves with it); the plugin's word decides,
    # not the built-ins' fallback; a type no one knows asks for a tau like most do (its
    # validation then names it unknown).
    fake_plugin(monkeypatch, tau_default=0.5)
    assert not takes_tau("mine") and takes_tau("unheard_of")
    assert spec_module.option_defaults("mine") == {"tau": 0.5, "margin": 0.0}
    fake_plugin(monkeypatch, tau_default=None)
    assert takes_tau("mine") and spec_module.option_defaults("mine") == {"margin": 0.0}


def test_constraint_flags_become_the_options_a_spec_would_give():
    from cdd_cli.spec.entries import constraint_from_flags

    sa = constraint_from_flags("sa", 3.5)
    assert (sa.type, sa.options, sa.where) == ("sa", {"tau": 3.5}, "--constraint sa")
    assert constraint_from_flags("novelty", None).options == {}
    # --tau of a property is its natural bound: qed is at least tau, mw at most.
    assert constraint_from_flags("qed", 0.6).options == {"min": 0.6}
    assert constraint_from_flags("mw", 300.0).options == {"max": 300.0}
    with pytest.raises(InputError, match=r"^--constraint qed: 'qed' needs min$"):
        constraint_from_flags("qed", None)
    with pytest.raises(InputError) as refused:
        constraint_from_flags("word_count", None)
    assert str(refused.value) == (
        "--constraint word_count: its options (min, max, equals) are given in a spec file: "
        "use --spec FILE (`cdd constraints ls` lists the keys)"
    )


def test_a_settings_section_must_be_a_mapping_or_empty(tmp_path: Path):
    from cdd_cli.spec.reader import load_spec

    assert load_spec(write(tmp_path, "projection:\nsearch:\n")).projection == ALMSettings()
    with pytest.raises(InputError, match=r"^.*spec.yaml:1: projection must be a mapping$"):
        load_spec(write(tmp_path, "projection: 5\n"))
    with pytest.raises(InputError) as refused:
        load_spec(write(tmp_path, "search:\n  topk: 3\n"))
    assert str(refused.value).endswith(
        "spec.yaml:2: unknown key 'search.topk'; did you mean 'search.top_k'? "
        "(known: top_k, max_nodes, project_from)"
    )


def test_overlay_names_problems_as_keys_or_as_flags():
    from cdd_cli.spec.model import Spec
    from cdd_cli.spec.overlay import overlay

    with pytest.raises(
        InputError,
        match=r"^method must be one of cdd, paper, unconstrained, reject, exact, got 'bogus'$",
    ):
        overlay(Spec(), [], method="bogus")
    with pytest.raises(InputError, match=r"^--method must be one of"):
        overlay(Spec(), [], method="bogus", flags=True)
    with pytest.raises(InputError, match=r"^batch_size must be positive, got 0$"):
        overlay(Spec(), [], sampling={"batch_size": 0})
    with pytest.raises(InputError, match=r"^--batch-size must be positive, got 0$"):
        overlay(Spec(), [], sampling={"batch_size": 0}, flags=True)


def test_overlay_lays_command_line_values_over_a_spec(tmp_path: Path):
    from cdd_cli.constraints.descriptor import ConstraintSpec
    from cdd_cli.spec.model import Spec
    from cdd_cli.spec.overlay import overlay
    from cdd_cli.spec.reader import load_spec

    path = write(
        tmp_path,
        "model: default-molecules\nconstraints:\n  - type: sa\n    tau: 4\n"
        "  - type: novelty\nsampling: {n: 8, steps: 16}\n",
    )
    spec = load_spec(path)
    sa = ConstraintSpec("sa", {"tau": 3.0}, "--constraint sa")
    qed = ConstraintSpec("qed", {"min": 0.5}, "--constraint qed")
    out = overlay(spec, [sa, qed], sampling={"n": 4, "steps": None}, words="collie", top_p=0.9)
    # A constraint type given replaces the spec's entries of it; the others stay, in order.
    assert [(c.type, c.options) for c in out.constraints] == [
        ("novelty", {}),
        ("sa", {"tau": 3.0}),
        ("qed", {"min": 0.5}),
    ]
    assert (out.sampling.n, out.sampling.steps, out.sampling.top_p) == (4, 16, 0.9)
    assert (out.words, out.model, out.method) == ("collie", "default-molecules", "cdd")
    kept = overlay(load_spec(path), [], model=None, words=None, decode=None)
    assert (kept.model, kept.words, kept.sampling.decode, len(kept.constraints)) == (
        "default-molecules",
        "plain",
        None,
        2,
    )
    assert overlay(Spec(), [], model="x-model", method="reject").model == "x-model"
    assert overlay(Spec(), [], method="reject").method == "reject"
    with pytest.raises(InputError, match=r"^model is empty$"):
        overlay(Spec(), [], model="  ")
    with pytest.raises(InputError, match=r"^--model is empty$"):
        overlay(Spec(), [], model="", flags=True)
    # Validated as a whole: a value laid over must fit with the spec's others.
    with pytest.raises(InputError, match="top_p"):
        overlay(Spec(), [], top_p=1.5)


@pytest.mark.parametrize(
    ("name", "value", "flag", "message"),
    [
        ("n", 0, "-n", "-n must be positive, got 0"),
        ("steps", 0, "--steps", "--steps must be in [1, 100,000], got 0"),
        ("steps", 100_001, "--steps", "--steps must be in [1, 100,000], got 100001"),
        ("block_length", -1, "--block-length", "--block-length must be in [0, 100,000], got -1"),
        ("seed", -1, "--seed", "--seed must be in [0, 9,223,372,036,854,775,807], got -1"),
    ],
)
def test_sampling_values_out_of_range_are_named_as_flags_or_keys(
    name: str, value: int, flag: str, message: str
):
    from cdd_cli.spec.model import Spec
    from cdd_cli.spec.overlay import overlay

    with pytest.raises(InputError) as refused:
        overlay(Spec(), [], sampling={name: value}, flags=True)
    assert str(refused.value) == message
    with pytest.raises(InputError) as refused:
        overlay(Spec(), [], sampling={name: value})
    assert str(refused.value) == message.replace(flag, name)
    # The ends of each range are values, not errors.
    low = {"n": 1, "steps": 1, "block_length": 0, "seed": 0}[name]
    assert getattr(overlay(Spec(), [], sampling={name: low}).sampling, name) == low
    assert overlay(Spec(), [], sampling={"steps": 100_000}).sampling.steps == 100_000


def test_switching_method_over_a_written_projection_is_refused(tmp_path: Path):
    from cdd_cli.spec.overlay import overlay
    from cdd_cli.spec.reader import load_spec

    four = "projection: {eta: 1, mu_max: 10, alpha: 2, patience: 3}\n"
    with pytest.raises(InputError) as refused:
        overlay(load_spec(write(tmp_path, "method: cdd\n" + four)), [], method="paper", flags=True)
    assert str(refused.value) == (
        f"--method paper: {tmp_path / 'spec.yaml'} is a 'cdd' spec that sets eta, mu_max, "
        "alpha...; change its method: there, or remove those settings to take the method's own"
    )
    three = "method: paper\nprojection: {eta: 1}\nsearch: {project_from: 0.5}\n"
    with pytest.raises(InputError, match=r"^method cdd: .* a 'paper' spec that sets eta, "):
        overlay(load_spec(write(tmp_path, three)), [], method="cdd")
    with pytest.raises(InputError, match=r"sets search.project_from; change"):
        overlay(
            load_spec(write(tmp_path, "method: cdd\nsearch: {project_from: 0.5}\n")),
            [],
            method="paper",
        )
    exactly_three = "method: cdd\nprojection: {eta: 1, mu_max: 10, alpha: 2}\n"
    with pytest.raises(InputError) as refused:
        overlay(load_spec(write(tmp_path, exactly_three)), [], method="paper")
    assert "sets eta, mu_max, alpha; change" in str(refused.value)  # all named: no "..."
    # The same method, a method that reads no projection, or nothing written: allowed.
    assert (
        overlay(load_spec(write(tmp_path, "method: cdd\n" + four)), [], method="cdd").method
        == "cdd"
    )
    assert (
        overlay(load_spec(write(tmp_path, "method: cdd\n" + four)), [], method="reject").method
        == "reject"
    )
    assert (
        overlay(load_spec(write(tmp_path, "method: cdd\n")), [], method="paper").method == "paper"
    )


def test_resolved_paths_are_absolute_and_names_stay_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from cdd_cli.constraints.descriptor import ConstraintSpec
    from cdd_cli.spec.model import Spec, dump

    monkeypatch.chdir(tmp_path)
    (tmp_path / "surrogate").mkdir()
    (tmp_path / "model").mkdir()
    spec = Spec(model="model")
    spec.constraints = [
        ConstraintSpec("sa", {"tau": 3.0, "surrogate": "surrogate"}, "x"),
        ConstraintSpec("novelty", {"reference": "refs.smi"}, "x"),
        ConstraintSpec("novelty", {"reference": "training"}, "x"),
        ConstraintSpec("novelty", {"reference": "all"}, "x"),
        ConstraintSpec("json_schema", {"schema": "s.json"}, "x"),
        ConstraintSpec("json_schema", {"schema": {"type": "string"}}, "x"),
    ]
    resolved = spec.resolved()
    sa, file_ref, named_ref, all_ref, schema_file, schema_inline = resolved["constraints"]
    assert all_ref["reference"] == "all"
    assert resolved["model"] == str(tmp_path / "model")
    assert sa["surrogate"] == str(tmp_path / "surrogate") and sa["margin"] == 0.0
    assert file_ref["reference"] == str(tmp_path / "refs.smi")
    assert named_ref["reference"] == "training"
    assert schema_file["schema"] == str(tmp_path / "s.json")
    assert schema_inline["schema"] == {"type": "string"}
    assert Spec(model="default-molecules").resolved()["model"] == "default-molecules"
    assert Spec(model="hf://owner/name").resolved()["model"] == "hf://owner/name"
    # Dumped in the order a reader expects (model first), not sorted.
    assert dump(resolved).splitlines()[0] == f"model: {tmp_path / 'model'}"


def test_lexical_constraints_that_contradict_each_other_are_refused(tmp_path: Path):
    from cdd_cli.constraints.descriptor import ConstraintSpec
    from cdd_cli.constraints.lexical import check_lexical_together

    def at(position: int, word: str, where: str) -> ConstraintSpec:
        return ConstraintSpec("word_at", {"position": position, "word": word}, where)

    with pytest.raises(InputError) as refused:
        check_lexical_together([at(2, "whale", "a:1"), at(2, "ship", "a:2")])
    assert str(refused.value) == "a:2: word 2 cannot be 'ship': a:1 makes it 'whale'"
    # One slot given one word twice, or (under COLLIE's rules, which compare lower-cased) the
    # same word in two cases, is no contradiction; under plain rules the cases differ.
    check_lexical_together([at(2, "whale", "a:1"), at(2, "whale", "a:2"), at(3, "sea", "a:3")])
    check_lexical_together([at(1, "The", "a:1"), at(1, "the", "a:2")], "collie")
    with pytest.raises(InputError, match="word 1 cannot be 'the': a:1 makes it 'The'"):
        check_lexical_together([at(1, "The", "a:1"), at(1, "the", "a:2")])
    excluded = ConstraintSpec("exclude", {"words": ["Whale"]}, "a:9")
    with pytest.raises(InputError) as refused:
        check_lexical_together([at(2, "whale", "a:1"), excluded], "collie")
    assert str(refused.value) == "a:1: 'whale' is required here but excluded at a:9"


SETTING_LIMITS = [  # (setting, refused values, accepted edge values, the message's words)
    ("projection.eta", [0.0, -1.0], [1e-9], "projection.eta must be > 0"),
    ("projection.inner_iters", [0], [1], "projection.inner_iters must be >= 1"),
    ("projection.max_outer_iters", [0], [1], "projection.max_outer_iters must be >= 1"),
    ("projection.mu_max", [0.0], [1e-9], "projection.mu_max must be > 0"),
    ("projection.mu_init", [0.0, -1.0], [1e-9, 1e9], "projection needs 0 < mu_init <= mu_max"),
    ("projection.alpha", [0.99, 0.0], [1.0], "projection.alpha must be >= 1"),
    ("projection.patience", [0], [1], "projection.patience must be >= 1"),
    ("projection.temperature", [0.0], [1e-9], "projection.temperature must be > 0"),
    ("projection.project_from", [-0.1, 1.1], [0.0, 1.0], "projection.project_from must be in"),
    ("projection.support", [1, -1], [0, 2], "projection.support must be 0"),
    ("search.top_k", [0], [1], "search.top_k must be >= 1"),
    ("search.max_nodes", [0], [1], "search.max_nodes must be >= 1"),
    ("search.project_from", [-0.1, 1.1], [0.0, 1.0], "search.project_from must be in [0, 1]"),
    ("repair.max_redraws", [-1], [0], "repair.max_redraws must be >= 0"),
    ("repair.margin_step", [-0.1], [0.0], "repair.margin_step must be >= 0"),
    ("reject.max_attempts", [0], [1], "reject.max_attempts must be >= 1"),
    ("sampling.batch_size", [0], [1], "sampling.batch_size must be >= 1"),
    ("sampling.steps", [0, 100_001], [1, 100_000], "sampling.steps must be in [1, 100,000]"),
    ("sampling.seed", [-1, 2**63], [0, 2**63 - 1], "sampling.seed must be in [0, "),
    ("sampling.n", [0], [1], "sampling.n must be >= 1"),
    ("sampling.decode", ["greedy"], ["well-formed", "plain"], "sampling.decode must be one of"),
    ("sampling.sampler", ["fast"], ["ancestral", "entropy"], "sampling.sampler must be one of"),
    ("sampling.block_length", [-1], [0], "sampling.block_length must be >= 0 (0: one block)"),
    (
        "sampling.temperature",
        [0.0, 100.5, float("nan"), float("inf")],
        [100.0, 1e-9],
        "sampling.temperature must be in (0, 100]",
    ),
    ("sampling.top_p", [0.0, 1.01], [1.0, 1e-9], "sampling.top_p must be in (0, 1]"),
    ("sampling.dtype", ["float8"], ["bfloat16"], "sampling.dtype must be one of"),
    ("words", ["nltk"], ["collie"], "words must be one of plain, collie, got 'nltk'"),
]


@pytest.mark.parametrize(("setting", "refused", "accepted", "message"), SETTING_LIMITS)
def test_each_setting_is_refused_past_its_limit_and_accepted_at_it(
    setting: str, refused: list, accepted: list, message: str
):
    from cdd_cli.spec.model import Spec, check_settings

    def with_value(value: object) -> Spec:
        spec = Spec()
        *section, name = setting.split(".")
        setattr(getattr(spec, section[0]) if section else spec, name, value)
        return spec

    for value in refused:
        with pytest.raises(InputError) as caught:
            check_settings(with_value(value), "s.yaml")
        assert str(caught.value).startswith(f"s.yaml: {message}"), value
    for value in accepted:
        check_settings(with_value(value), "s.yaml")


def test_the_same_constraint_twice_is_refused_naming_both_places():
    from cdd_cli.constraints.descriptor import ConstraintSpec
    from cdd_cli.spec.model import Spec, check_settings

    spec = Spec()
    spec.constraints = [
        ConstraintSpec("sa", {"tau": 3.0}, "s.yaml:2"),
        ConstraintSpec("sa", {"tau": 3.5}, "s.yaml:4"),
        ConstraintSpec("sa", {"tau": 3.0}, "s.yaml:6"),
    ]
    with pytest.raises(InputError) as caught:
        check_settings(spec, "s.yaml")
    assert str(caught.value) == "s.yaml:6: repeats the constraint at s.yaml:2"


@pytest.mark.parametrize(
    ("kind", "options", "message"),
    [
        ("qed", {}, "'qed' needs min"),
        ("logp", {"weight": "average"}, "'logp' needs min or max"),
        ("qed", {"min": 1.5}, "key 'min': 1.5 is outside [0, 1] for 'qed'"),
        ("qed", {"min": -0.1}, "key 'min': -0.1 is outside [0, 1] for 'qed'"),
        ("mw", {"max": -1.0}, "key 'max': -1 is outside >= 0 for 'mw'"),
        ("tpsa", {"min": 50.0, "max": 40.0}, "min 50 > max 40"),
        ("mw", {"max": 300.0, "weight": "median"}, "key 'weight' must be one of average, exact"),
        ("substructure", {"smarts": "[C"}, "key 'smarts': RDKit cannot read '[C' as SMARTS"),
        ("lipinski", {"max_violations": 4}, "key 'max_violations' must be in [0, 3]"),
        ("lipinski", {"max_violations": -1}, "key 'max_violations' must be in [0, 3]"),
        (
            "novelty",
            {"reference": "nowhere.smi"},
            "key 'reference': 'nowhere.smi' is neither training, all nor a file",
        ),
    ],
)
def test_molecule_options_are_checked_against_their_domains(kind: str, options: dict, message: str):
    from cdd_cli.constraints.descriptor import ConstraintSpec
    from cdd_cli.spec.entries import check_constraint

    with pytest.raises(InputError) as caught:
        check_constraint(ConstraintSpec(kind, options, "s.yaml:3"))
    assert str(caught.value).startswith(f"s.yaml:3: {message}")


def test_molecule_options_at_their_edges_are_accepted(tmp_path: Path):
    from cdd_cli.constraints.descriptor import ConstraintSpec
    from cdd_cli.spec.entries import check_constraint

    reference = tmp_path / "refs.smi"
    reference.write_text("CCO\n")
    for kind, options in [
        ("qed", {"min": 0.0}),
        ("qed", {"min": 1.0, "weight": "exact"}),
        ("logp", {"min": -5.0, "max": -5.0}),
        ("mw", {"max": 0.0}),
        ("substructure", {"smarts": "c1ccccc1"}),
        ("lipinski", {"max_violations": 0}),
        ("lipinski", {"max_violations": 3}),
        ("lipinski", {}),
        ("novelty", {"reference": "training"}),
        ("novelty", {"reference": "all"}),
        ("novelty", {"reference": str(reference)}),
        ("novelty", {}),
    ]:
        check_constraint(ConstraintSpec(kind, options, "s.yaml:3"))


def test_structured_options_are_checked_where_they_are_given(tmp_path: Path):
    from cdd_cli.constraints.descriptor import ConstraintSpec
    from cdd_cli.spec.entries import check_constraint

    def problem(kind: str, options: dict) -> str:
        with pytest.raises(InputError) as caught:
            check_constraint(ConstraintSpec(kind, options, "s.yaml:5"))
        return str(caught.value)

    assert problem("regex", {"pattern": "a("}).startswith(
        "s.yaml:5: key 'pattern': not a regular expression (missing ), unterminated subpattern"
    )
    assert problem("regex", {"pattern": ""}) == "s.yaml:5: key 'pattern' is empty"
    assert problem("json_schema", {"schema": str(tmp_path / "none.json")}).startswith("s.yaml:5:")
    check_constraint(ConstraintSpec("regex", {"pattern": "[0-9]{3}"}, "s.yaml:5"))
    check_constraint(ConstraintSpec("json_schema", {"schema": {"type": "string"}}, "x"))
    check_constraint(ConstraintSpec("sa", {"tau": 3.0}, "x"))  # not theirs to check


def test_a_plugins_own_option_check_speaks_in_one_line(monkeypatch: pytest.MonkeyPatch):
    from cdd_cli import plugins
    from cdd_cli.constraints.descriptor import ConstraintSpec
    from cdd_cli.plugins import Option
    from cdd_cli.spec import entries as spec_module
    from cdd_cli.spec.entries import check_constraint

    seen = []

    def check(options: dict) -> None:
        seen.append(options)
        if options.get("size", 0) < 0:
            raise ValueError("size must be\n  >= 0")
        if options.get("size") == 13:
            raise KeyError("unlucky")

    options = {"size": Option(int)}
    fake_plugin(monkeypatch, check=check, tau_default=1.0, options=options)
    check_constraint(ConstraintSpec("mine", {"size": 3}, "s.yaml:7"))
    assert seen == [{"size": 3}]
    check_constraint(ConstraintSpec("sa", {"tau": 3.0}, "s.yaml:7"))  # no plugin: nothing
    with pytest.raises(InputError) as caught:
        check_constraint(ConstraintSpec("mine", {"size": -1}, "s.yaml:7"))
    # One line: the plugin's line break written as an escape (`errors.one_line`).
    assert str(caught.value) == "s.yaml:7: constraint 'mine': size must be\\n  >= 0"
    with pytest.raises(plugins.PluginError) as caught:
        check_constraint(ConstraintSpec("mine", {"size": 13}, "s.yaml:7"))
    assert str(caught.value) == (
        "s.yaml:7: plugin 'mine' (mine-pkg) failed checking its options (KeyError: 'unlucky')"
    )
    assert spec_module.domain_of("mine") == "text" and spec_module.domain_of("sa") == "molecules"
    fake_plugin(monkeypatch, tau_default=1.0, options=options)  # no check of its own
    check_constraint(ConstraintSpec("mine", {"size": -1}, "s.yaml:7"))


@pytest.mark.parametrize(
    ("kind", "options", "message"),
    [
        ("word_count", {"min": -1}, "word counts must be >= 0"),
        ("sentence_count", {"max": -1}, "sentence counts must be >= 0"),
        ("word_count", {"min": 3, "max": 2}, "min 3 > max 2"),
        ("sentence_count", {"equals": 2, "max": 3}, "give 'equals' alone, or 'min'/'max'"),
        ("count", {"letter": "r"}, "give both 'letter' and 'word', or neither (prompt)"),
        ("count", {"word": "strawberry"}, "give both 'letter' and 'word', or neither (prompt)"),
        ("count", {"letter": "r", "word": "  "}, "key 'word' is empty"),
        ("exclude", {"words": ["ok", 3]}, "key 'words' must be a list of non-empty words"),
        ("include", {"words": ["ok", " "]}, "key 'words' must be a list of non-empty words"),
    ],
)
def test_lexical_options_that_mean_nothing_are_refused(kind: str, options: dict, message: str):
    from cdd_cli.constraints.descriptor import ConstraintSpec
    from cdd_cli.spec.entries import check_constraint

    with pytest.raises(InputError) as caught:
        check_constraint(ConstraintSpec(kind, options, "s.yaml:4"))
    assert str(caught.value) == f"s.yaml:4: {message}"


def test_lexical_options_at_their_edges_are_accepted():
    from cdd_cli.constraints.descriptor import ConstraintSpec
    from cdd_cli.spec.entries import check_constraint

    for kind, options in [
        ("word_count", {"min": 0}),
        ("word_count", {"min": 3, "max": 3}),
        ("word_count", {"max": 0}),
        ("sentence_count", {"equals": 0}),
        ("sentence_count", {"min": 2}),
        ("count", {}),  # the question comes from the prompt
        ("count", {"letter": "r", "word": "strawberry"}),
        ("include", {"words": ["whale"]}),
    ]:
        check_constraint(ConstraintSpec(kind, options, "s.yaml:4"))


def test_a_constraints_tau_range_and_margin_are_checked_at_their_edges(
    monkeypatch: pytest.MonkeyPatch,
):
    from cdd_cli.constraints.descriptor import ConstraintSpec
    from cdd_cli.spec import entries as spec_module
    from cdd_cli.spec.entries import check_constraint

    for tau in (1.0, 10.0):  # SA's whole range, ends included
        check_constraint(ConstraintSpec("sa", {"tau": tau, "margin": 0.0}, "x"))
    with pytest.raises(InputError, match=r"^x: key 'margin' must be >= 0$"):
        check_constraint(ConstraintSpec("sa", {"tau": 3.0, "margin": -0.1}, "x"))
    check_constraint(ConstraintSpec("novelty", {}, "x"))  # no tau, no range to check
    # A plugin's keys and range are its own: tau in its range, margin and a surrogate besides.
    fake_plugin(monkeypatch, tau_range=(0.0, 5.0))
    assert spec_module.tau_range("mine") == (0.0, 5.0) and spec_module.tau_range("sa") == (1, 10)
    assert spec_module.keys_of("mine", "x") == {
        "tau": ((int, float), True),
        "margin": ((int, float), False),
        "surrogate": ((str,), False),
    }
    with pytest.raises(InputError, match=r"^x: key 'tau': 5.5 is outside \[0, 5\] for 'mine'$"):
        check_constraint(ConstraintSpec("mine", {"tau": 5.5}, "x"))
    fake_plugin(monkeypatch, tau_range=(0.0, 5.0), tau_default=1.0)
    assert spec_module.keys_of("mine", "x")["tau"] == ((int, float), False)
    check_constraint(ConstraintSpec("mine", {}, "x"))  # no tau written: the default's in range


def test_an_optional_key_left_empty_is_as_if_not_written(tmp_path: Path):
    spec = load_spec(write(tmp_path, "constraints:\n  - type: sa\n    margin:\n    tau: 3.5\n"))
    assert spec.constraints[0].options == {"tau": 3.5}
    with pytest.raises(InputError, match=r"spec.yaml:3: surrogate folder nowhere not found$"):
        load_spec(
            write(tmp_path, "constraints:\n  - type: sa\n    surrogate: nowhere\n    tau: 3\n")
        )
    (tmp_path / "here").mkdir()
    found = load_spec(
        write(tmp_path, f"constraints:\n  - {{type: sa, tau: 3, surrogate: {tmp_path / 'here'}}}\n")
    )
    assert found.constraints[0].options["surrogate"] == str(tmp_path / "here")


def test_mu_init_may_equal_mu_max_but_not_pass_it():
    from cdd_cli.spec.model import Spec, check_settings

    spec = Spec()
    spec.projection.mu_init, spec.projection.mu_max = 8.0, 8.0
    check_settings(spec, "s.yaml")
    spec.projection.mu_init = 8.5
    with pytest.raises(InputError, match=r"^s.yaml: projection needs 0 < mu_init <= mu_max$"):
        check_settings(spec, "s.yaml")


@pytest.mark.parametrize(
    "text, message",
    [
        # The line is the line of what is wrong, counted from 1.
        (
            "model: x\nmethod: a: b\n",
            "spec.yaml:2: YAML syntax error: mapping values are not allowed here",
        ),
        ("model: x\n\nmodel: y\n", "spec.yaml:3: key 'model' given twice"),
        ("projection:\n  eta: 1\n  eta: 2\n", "spec.yaml:3: key 'projection.eta' given twice"),
        (
            "constraints:\n  - type: sa\n    tau: 3\n  - type: sa\n    tau: 4\n    tau: 5\n",
            "spec.yaml:6: key 'constraints[1].tau' given twice",
        ),
        (
            "constraints:\n  - type: sa\n    tau: 3\n  - tau: 4\n",
            "spec.yaml:4: constraints[1] needs a 'type'",
        ),
        ("projection:\n  3: x\n", "spec.yaml:2: keys must be names, got 3"),
        ("? [1, 2]\n: x\n", "spec.yaml:1: keys must be names, got [1, 2]"),
        # Types: named as a number, or by their names; a hint only where a number was quoted
        # (with either quote) or written as YAML 1.1 does not read numbers.
        ("sampling:\n  decode: 3\n", "spec.yaml:2: key 'sampling.decode': expected str, got 3"),
        ("sampling:\n  chat: 1\n", "spec.yaml:2: key 'sampling.chat': expected bool, got 1"),
        ("method: 3\n", "spec.yaml:1: key 'method': expected str, got 3"),
        ("words: 3\n", "spec.yaml:1: key 'words': expected str, got 3"),
        (
            "projection:\n  eta: fast\n",
            "spec.yaml:2: key 'projection.eta': expected number, got 'fast'",
        ),
        (
            "projection:\n  eta: [1]\n",
            "spec.yaml:2: key 'projection.eta': expected number, got [1]",
        ),
        (
            "projection:\n  inner_iters: '3'\n",
            "spec.yaml:2: key 'projection.inner_iters': expected int, got '3'",
        ),
        (
            'projection:\n  mu_init: "2.5"\n',
            "spec.yaml:2: key 'projection.mu_init': expected number, got '2.5' "
            "(a quoted string: remove the quotes)",
        ),
        (
            "projection:\n  mu_max: 1e3\n",
            "spec.yaml:2: key 'projection.mu_max': expected number, got '1e3' "
            "(YAML reads 1e3 as text: write 1.0e+3)",
        ),
        (
            "projection:\n  mu_max: 3.5e+38\n",
            "spec.yaml:2: key 'projection.mu_max': 3.5e+38 is beyond float32's range",
        ),
        # Choices and unknown keys list what is known, in order; a close name is suggested.
        (
            "method: magic\n",
            "spec.yaml:1: key 'method': 'magic' is not one of cdd, paper, unconstrained, reject, "
            "exact",
        ),
        (
            "method: rejct\n",
            "spec.yaml:1: key 'method': 'rejct' is not one of cdd, paper, unconstrained, reject, "
            "exact; did you mean 'reject'?",
        ),
        ("words: magic\n", "spec.yaml:1: key 'words': 'magic' is not one of plain, collie"),
        (
            "modle: x\n",
            "spec.yaml:1: unknown key 'modle'; did you mean 'model'? (known: model, method, "
            "words, constraints, "
            "projection, search, repair, reject, sampling)",
        ),
        (
            "repair:\n  redraws: 1\n",
            "spec.yaml:2: unknown key 'repair.redraws'; did you mean 'repair.max_redraws'? "
            "(known: max_redraws, margin_step, surrogates_from, own_draws)",
        ),
        (
            "reject:\n  attempts: 1\n",
            "spec.yaml:2: unknown key 'reject.attempts'; did you mean 'reject.max_attempts'? "
            "(known: max_attempts)",
        ),
        (
            "sampling:\n  stepz: 1\n",
            "spec.yaml:2: unknown key 'sampling.stepz'; did you mean 'sampling.steps'? (known: n, "
            "steps, batch_size, seed, decode, sampler, block_length, dtype, chat, temperature, "
            "top_p)",
        ),
        ("repair: 3\n", "spec.yaml:1: repair must be a mapping"),
        ("reject: 3\n", "spec.yaml:1: reject must be a mapping"),
        ("sampling: 3\n", "spec.yaml:1: sampling must be a mapping"),
        # Settings checked together name the file (no one line is to blame).
        ("projection:\n  eta: -1\n", "spec.yaml: projection.eta must be > 0"),
        (
            "sampling:\n  decode: fancy\n",
            "spec.yaml: sampling.decode must be one of well-formed, plain, got 'fancy'",
        ),
        (
            "sampling:\n  sampler: fancy\n",
            "spec.yaml: sampling.sampler must be one of ancestral, confidence, margin, entropy, "
            "got 'fancy'",
        ),
        (
            "sampling:\n  dtype: fancy\n",
            "spec.yaml: sampling.dtype must be one of float32, bfloat16, float16, got 'fancy'",
        ),
        (
            "constraints:\n  - type: sa\n    tau: !foo 3.5\n",
            "spec.yaml:3: cannot read this value (could not determine a constructor for the "
            "tag '!foo')",
        ),
        # A character YAML refuses has no line (the reader stops before parsing) and one line.
        (
            "tau: \x07\n",
            "spec.yaml: YAML syntax error: unacceptable character #x0007: special characters are "
            "not allowed",
        ),
        # Under COLLIE's word rules, "Cat" and "cat" are one word and "don't" is two.
        (
            "words: collie\nconstraints:\n  - type: include\n    words: [Cat]\n  - type: exclude\n"
            "    words: [cat]\n",
            "spec.yaml:3: 'Cat' is required here but excluded at spec.yaml:5",
        ),
        (
            'words: collie\nconstraints:\n  - type: exclude\n    words: ["don\'t"]\n',
            'spec.yaml:3: "don\'t" is not one word under the collie word rules (it reads as '
            "['do', \"n't\"])",
        ),
    ],
)
def test_spec_errors_read_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, message: str
):
    write(tmp_path, text)
    monkeypatch.chdir(tmp_path)  # the file is named as given: spec.yaml
    with pytest.raises(InputError) as refused:
        load_spec(Path("spec.yaml"))
    assert str(refused.value) == message


def test_what_collie_rules_read_as_one_word_is_accepted(tmp_path: Path):
    two_slots = (
        "words: collie\nconstraints:\n  - type: word_at\n    position: 2\n    word: Cat\n"
        "  - type: word_at\n    position: 2\n    word: cat\n"
    )
    assert [c.options["word"] for c in load_spec(write(tmp_path, two_slots)).constraints] == [
        "Cat",
        "cat",
    ]
    # Compared under COLLIE's rules whichever comes first.
    swapped = two_slots.replace("word: Cat", "word: X").replace("word: cat", "word: Cat")
    assert len(load_spec(write(tmp_path, swapped.replace("word: X", "word: cat"))).constraints) == 2
    plain = 'constraints:\n  - type: exclude\n    words: ["don\'t"]\n'
    assert load_spec(write(tmp_path, plain)).constraints[0].options == {"words": ["don't"]}
    # float32's largest number is a number it holds.
    largest = load_spec(write(tmp_path, "projection:\n  mu_max: 3.4028234663852886e+38\n"))
    assert largest.projection.mu_max == 3.4028234663852886e38


def test_a_spec_that_is_a_folder_is_refused(tmp_path: Path):
    with pytest.raises(InputError) as refused:
        load_spec(tmp_path)
    assert str(refused.value) == f"{tmp_path}: not a regular file"


def test_a_value_the_yaml_reader_gives_up_on_is_named_by_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from cdd_cli.spec import reader as spec_module

    def too_deep(text: str) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(spec_module.yaml, "safe_load", too_deep)
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "model: x\n")
    with pytest.raises(InputError) as refused:
        load_spec(Path("spec.yaml"))
    assert str(refused.value) == "spec.yaml:1: cannot read this value (RecursionError)"


def test_unknown_types_list_the_usable_plugins_beside_the_built_ins(
    monkeypatch: pytest.MonkeyPatch,
):
    from cdd_cli import plugins
    from cdd_cli.constraints.table import BUILTINS
    from cdd_cli.spec.entries import constraint_from_flags

    usable = plugins.Installed("mine", "mine 1.0", plugin=object())  # type: ignore[arg-type]
    broken = plugins.Installed("broken", "broken 0.1", plugin=None, problem="does not import")
    monkeypatch.setattr(plugins, "installed", lambda builtin: [broken, usable])
    monkeypatch.setattr(plugins, "find", lambda name, builtin: None)
    with pytest.raises(InputError) as refused:
        constraint_from_flags("nope", 1.0)
    assert str(refused.value) == (
        f"--constraint nope: unknown constraint type 'nope' "
        f"(available: {', '.join(BUILTINS)}, mine)"
    )


def test_what_a_command_line_lays_over_a_spec_is_checked_as_the_spec_is(tmp_path: Path):
    from cdd_cli.spec.overlay import overlay

    path = write(tmp_path, "sampling: {n: 2}\n")
    with pytest.raises(InputError) as refused:
        overlay(load_spec(path), [], decode="fancy")
    assert str(refused.value) == (
        f"{path}: sampling.decode must be one of well-formed, plain, got 'fancy'"
    )


def test_a_value_of_no_type_a_key_takes_names_them_all():
    from cdd_cli.spec.reader import Located, check_type

    node = yaml.compose("3.5")
    with pytest.raises(InputError) as refused:
        check_type(Located("p.yaml"), node, "shape", 3.5, (str, list))  # a plugin's option
    assert str(refused.value) == "p.yaml:1: key 'shape': expected str or list, got 3.5"


def test_every_family_module_that_describes_types_is_in_the_table():
    """A built-in family is its module: the table must hold every module that exports a
    descriptor, or its types would exist and be unknown to specs and `cdd constraints ls`."""
    import importlib
    import pkgutil

    import cdd_cli.constraints as package
    from cdd_cli.constraints import table

    describing = []
    for found in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"cdd_cli.constraints.{found.name}")
        if hasattr(module, "DESCRIPTOR") or hasattr(module, "DESCRIPTORS"):
            describing.append(module)
    assert sorted(m.__name__ for m in describing) == sorted(m.__name__ for m in table.FAMILIES)
    for name, described in table.BUILTINS.items():
        assert described.name == name and described.domain in ("molecules", "text", "any")
        assert all(k in described.keys or k == "tau" for k in described.defaults)
        assert described.tau_flag in described.keys or not described.needs_tau


def test_the_apis_typed_constraint_values_take_their_types_keys():
    import inspect

    from cdd_cli import constraint_values
    from cdd_cli.constraints import table

    typed = {
        "SA": "sa",
        "Toxicity": "toxicity",
        "Novelty": "novelty",
        "WordAt": "word_at",
        "Include": "include",
        "Exclude": "exclude",
        "WordCount": "word_count",
        "SentenceCount": "sentence_count",
        "Count": "count",
        "Regex": "regex",
        "JsonSchema": "json_schema",
    }
    for function, kind in typed.items():
        parameters = inspect.signature(getattr(constraint_values, function)).parameters
        assert set(parameters) <= set(table.BUILTINS[kind].keys), function
        assert getattr(constraint_values, function).__doc__


def test_a_json_schema_is_read_and_checked_once_for_a_check_and_a_build(tmp_path: Path):
    from cdd_cli.constraints import json_schema, structured
    from cdd_cli.constraints.descriptor import ConstraintSpec
    from cdd_cli.spec.entries import check_constraint

    path = tmp_path / "s.json"
    path.write_text('{"type": "object", "properties": {"n": {"type": "integer"}}}')
    entry = ConstraintSpec("json_schema", {"schema": str(path)}, "s.yaml:2")
    check_constraint(entry)
    path.unlink()  # built from what the check read, not read again
    (built,) = structured.build_json_schema(entry, None, "cpu", "plain")  # type: ignore[arg-type]
    assert built.source == "s.json" and built.schema_text == entry.prepared["schema"][0]
    assert built.automaton_pattern() == json_schema.schema_pattern(built.schema_text)
