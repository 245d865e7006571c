"""Malformed inputs a new user could give, generated, and what cdd does with each.

Run as a script (`python tests/bad_inputs.py RESULTS.json`, under a memory cap set by
test_bad_inputs.py) it runs every case through the CLI's own entry point in this one process
and writes, per case: the exit code, the stderr lines, whether the output file was created
or changed, and the seconds taken. Each case gets a fresh folder; `{d}` in its arguments is
that folder, `{model}` a tiny molecule model, `{text}` a tiny text model (built once).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

TIME_LIMIT_S = 30


@dataclass
class Case:
    name: str
    args: list[str]
    files: dict[str, str | bytes | Callable[[Path], None]] = field(default_factory=dict)
    output: bool = True  # append `-o {d}/out.jsonl` (commands that write records)


def spec_case(name: str, yaml_text: str, command: str = "molecules") -> Case:
    if command == "validate":
        return Case(name, ["validate", "{d}/spec.yaml"], {"spec.yaml": yaml_text}, output=False)
    args = [command, "--spec", "{d}/spec.yaml", "-n", "1"]
    return Case(f"spec: {name}", args, {"spec.yaml": yaml_text})


def spec_cases() -> list[Case]:
    cases = [
        spec_case("yaml syntax", "constraints: [\n"),
        spec_case("yaml tab", "constraints:\n\t- type: sa\n"),
        spec_case("yaml tag", "constraints:\n  - type: sa\n    tau: !foo 3.5\n"),
        spec_case("top level list", "- type: sa\n"),
        spec_case("top level text", "hello\n"),
        spec_case("unknown top key", "models: x\n"),
        spec_case("key twice", "method: cdd\nmethod: cdd\n"),
        spec_case("constraints not list", "constraints: {type: sa}\n"),
        spec_case("constraint not mapping", "constraints:\n  - sa\n"),
        spec_case("constraint without type", "constraints:\n  - tau: 3\n"),
        spec_case("unknown type", "constraints:\n  - type: sas\n    tau: 3\n"),
        spec_case("sa without tau", "constraints:\n  - type: sa\n"),
        spec_case("sa unknown key", "constraints:\n  - type: sa\n    tau: 3\n    mu: 1\n"),
        spec_case(
            "sa empty surrogate", "constraints:\n  - type: sa\n    tau: 3\n    surrogate: ''\n"
        ),
        spec_case(
            "sa missing surrogate",
            "constraints:\n  - type: sa\n    tau: 3\n    surrogate: /no/such\n",
        ),
        spec_case("sa negative margin", "constraints:\n  - type: sa\n    tau: 3\n    margin: -1\n"),
        spec_case("toxicity on molecules", "constraints:\n  - type: toxicity\n    tau: 0.5\n"),
        spec_case("novelty on text", "constraints:\n  - type: novelty\n", "generate"),
        spec_case(
            "toxicity bad scope",
            "constraints:\n  - type: toxicity\n    tau: 0.5\n    scope: all\n",
            "generate",
        ),
        spec_case(
            "word_at zero",
            "constraints:\n  - type: word_at\n    position: 0\n    word: a\n",
            "generate",
        ),
        spec_case(
            "word_at empty word",
            "constraints:\n  - type: word_at\n    position: 1\n    word: ' '\n",
            "generate",
        ),
        spec_case(
            "include text", "constraints:\n  - type: include\n    words: whale\n", "generate"
        ),
        spec_case("include empty", "constraints:\n  - type: include\n    words: []\n", "generate"),
        spec_case(
            "include number", "constraints:\n  - type: include\n    words: [3]\n", "generate"
        ),
        spec_case("word_count none", "constraints:\n  - type: word_count\n", "generate"),
        spec_case(
            "word_count min>max",
            "constraints:\n  - type: word_count\n    min: 5\n    max: 2\n",
            "generate",
        ),
        spec_case(
            "word_count equals and min",
            "constraints:\n  - type: word_count\n    equals: 3\n    min: 1\n",
            "generate",
        ),
        spec_case(
            "word_count negative", "constraints:\n  - type: word_count\n    max: -1\n", "generate"
        ),
        spec_case(
            "count two letters",
            "constraints:\n  - type: count\n    letter: rr\n    word: strawberry\n",
            "generate",
        ),
        spec_case(
            "count letter alone", "constraints:\n  - type: count\n    letter: r\n", "generate"
        ),
        spec_case(
            "required and excluded",
            "constraints:\n  - type: include\n    words: [sea]\n"
            "  - type: exclude\n    words: [sea]\n",
            "generate",
        ),
        spec_case(
            "two words one place",
            "constraints:\n  - type: word_at\n    position: 1\n    word: a\n"
            "  - type: word_at\n    position: 1\n    word: b\n",
            "generate",
        ),
        spec_case("bad method", "method: magic\n"),
        spec_case("method number", "method: 3\n"),
        spec_case("empty model", "model: ''\n"),
        spec_case("model list", "model: [a]\n"),
        spec_case("missing model dir", "model: /no/such/model\n"),
        spec_case("mistyped model with slash", "model: runs/qm9\n"),
        spec_case("settings not mapping", "projection: 3\n"),
        spec_case("unknown projection key", "projection:\n  lambda_init: 1.0\n"),
        spec_case("yaml 1e3 as text", "projection:\n  mu_max: 1e3\n"),
        spec_case("quoted number", "projection:\n  eta: '1.0'\n"),
        spec_case("nan", "projection:\n  eta: .nan\n"),
        spec_case("inf", "projection:\n  eta: .inf\n"),
        spec_case("beyond float32", "projection:\n  eta: 1.0e+308\n"),
        spec_case("bool setting", "projection:\n  inner_iters: true\n"),
        spec_case("mu_init above mu_max", "projection:\n  mu_init: 10.0\n  mu_max: 1.0\n"),
        spec_case("support negative", "projection:\n  support: -1\n"),
        spec_case("project_from 2", "projection:\n  project_from: 2.0\n"),
        spec_case("lookahead negative", "projection:\n  lookahead: -1\n"),
        spec_case("lookahead huge", "projection:\n  lookahead: 100000\n"),
        spec_case("lookahead fraction", "projection:\n  lookahead: 1.5\n"),
        spec_case("lookahead null", "projection:\n  lookahead: null\n"),
        spec_case(
            "lookahead without a pattern",
            "constraints:\n  - type: sa\n    tau: 3.5\nprojection:\n  lookahead: 4\n",
        ),
        spec_case("search top_k 0", "search:\n  top_k: 0\n"),
        spec_case("repair negative", "repair:\n  max_redraws: -1\n"),
        spec_case("reject 0", "reject:\n  max_attempts: 0\n"),
        spec_case("steps huge", "sampling:\n  steps: 2000000000\n"),
        spec_case("seed negative", "sampling:\n  seed: -1\n"),
        spec_case("seed huge", "sampling:\n  seed: 99999999999999999999999\n"),
        spec_case("batch 0", "sampling:\n  batch_size: 0\n"),
        spec_case("n text", "sampling:\n  n: many\n"),
        spec_case("duplicate novelty", "constraints:\n" + "  - type: novelty\n" * 3),
        spec_case("deep nesting", "constraints: " + "[" * 2000 + "]" * 2000 + "\n"),
        Case(
            "validate: not utf-8",
            ["validate", "{d}/spec.yaml"],
            {"spec.yaml": b"\xff\xfe\x00"},
            False,
        ),
        Case("validate: missing", ["validate", "{d}/none.yaml"], {}, False),
        Case("validate: a folder", ["validate", "{d}/sub"], {"sub/x": ""}, False),
    ]
    # Every numeric setting, given text, a list and a negative number.
    numeric = {
        "projection": ["eta", "inner_iters", "max_outer_iters", "mu_init", "mu_max", "alpha"],
        "search": ["top_k", "max_nodes"],
        "sampling": ["steps", "batch_size", "n"],
    }
    for section, keys in numeric.items():
        for key in keys:
            for label, value in (("text", "x"), ("list", "[1]"), ("negative", "-5")):
                cases.append(
                    spec_case(f"{section}.{key} {label}", f"{section}:\n  {key}: {value}\n")
                )
    # Every tau of a bounded type, out of its range or of the wrong type.
    for kind, command, bad in (
        ("sa", "molecules", ("0.5", "11", "x", "[3]", "true")),
        ("toxicity", "generate", ("-0.1", "1.5", "x", "{a: 1}")),
    ):
        for value in bad:
            cases.append(
                spec_case(
                    f"{kind} tau {value}",
                    f"constraints:\n  - type: {kind}\n    tau: {value}\n",
                    command,
                )
            )
    # The same mistakes through `cdd validate`.
    for case in list(cases[:30]):
        # validate picks the model by the constraints' domain: those two are fine there.
        fine = ("spec: toxicity on molecules", "spec: novelty on text")
        if case.args[0] != "validate" and case.name not in fine:
            name = case.name.removeprefix("spec: ")
            cases.append(spec_case(f"validate: {name}", case.files["spec.yaml"], "validate"))
    return cases


def mkfifo(folder: Path) -> None:
    os.mkfifo(folder / "fifo")


def flag_cases() -> list[Case]:
    long_name = "x" * 300
    cases = [
        Case("n zero", ["molecules", "-n", "0"]),
        Case("n negative", ["molecules", "-n", "-4"]),
        Case("n text", ["molecules", "-n", "many"]),
        Case("n and batch huge", ["molecules", "-n", "100000000", "--batch-size", "100000000"]),
        Case("steps huge", ["molecules", "--steps", "2000000000"]),
        Case("steps zero", ["molecules", "--steps", "0"]),
        Case("seed negative", ["molecules", "--seed", "-1"]),
        Case("seed huge", ["molecules", "--seed", "99999999999999999999999"]),
        Case("batch zero", ["molecules", "--batch-size", "0"]),
        Case("threads zero", ["molecules", "--threads", "0"]),
        Case(
            "eval threads negative",
            ["eval", "{d}/r.jsonl", "--threads", "-2"],
            {"r.jsonl": '{"id": "0-0", "text": "C"}\n'},
            False,
        ),
        Case("tau without constraint", ["molecules", "--tau", "3"]),
        Case("constraint without tau", ["molecules", "-c", "sa"]),
        Case("two taus one constraint", ["molecules", "-c", "sa", "--tau", "3", "--tau", "4"]),
        Case("tau out of range", ["molecules", "-c", "sa", "--tau", "11"]),
        Case("tau nan", ["molecules", "-c", "sa", "--tau", "nan"]),
        Case("tau inf", ["molecules", "-c", "sa", "--tau", "inf"]),
        Case("unknown constraint", ["molecules", "-c", "qed2", "--tau", "0.5"]),
        Case("spec-only constraint as flag", ["generate", "-c", "word_at"]),
        Case("text constraint on molecules", ["molecules", "-c", "toxicity", "--tau", "0.5"]),
        Case("bad method", ["molecules", "--method", "magic"]),
        Case("bad device", ["molecules", "--device", "tpu"]),
        Case("cuda absent", ["molecules", "--device", "cuda:7"]),
        Case("empty model", ["molecules", "--model", ""]),
        Case("missing model", ["molecules", "--model", "{d}/nope"]),
        Case("mistyped model with slash", ["molecules", "--model", "runs/qm9"]),
        Case("model is a file", ["molecules", "--model", "{d}/f"], {"f": "x"}),
        Case("model name too long", ["molecules", "--model", long_name]),
        Case("hub id malformed", ["molecules", "--model", "hf://only-owner"]),
        Case("text model for molecules", ["molecules", "--model", "default-text"]),
        Case(
            "molecule model for text", ["generate", "--model", "default-molecules", "--prompt", "a"]
        ),
        Case("empty prompt", ["generate", "--prompt", "  "]),
        Case("length zero", ["generate", "--prompt", "a", "--length", "0"]),
        Case("length beyond model", ["generate", "--prompt", "a", "--length", "100000"]),
        Case("prompt too long", ["generate", "--prompt", "word " * 20000]),
        Case("output is a folder", ["molecules", "-n", "1", "-o", "{d}"], output=False),
        Case("output name empty", ["molecules", "-n", "1", "-o", ""], output=False),
        Case(
            "output name too long", ["molecules", "-n", "1", "-o", "{d}/" + long_name], output=False
        ),
        Case(
            "output config is a folder", ["molecules", "-n", "1"], {"out.jsonl.config.yaml/x": ""}
        ),
        Case("unknown flag", ["molecules", "--colour"]),
        Case("unknown command", ["sample"]),
        Case(
            "validate length zero",
            ["validate", "{d}/s.yaml", "--length", "0"],
            {"s.yaml": "method: cdd\n"},
            False,
        ),
        Case("eval missing file", ["eval", "{d}/none.jsonl"], {}, False),
        Case("train out is a file", ["train", "sa-surrogate", "--out", "{d}/f"], {"f": "x"}, False),
        Case(
            "train steps 1", ["train", "sa-surrogate", "--out", "{d}/o", "--steps", "1"], {}, False
        ),
        Case("train lr nan", ["train", "molecules", "--out", "{d}/o", "--lr", "nan"], {}, False),
        Case(
            "train heads", ["train", "molecules", "--out", "{d}/o", "--hidden-dim", "30"], {}, False
        ),
        Case(
            "train text no data",
            ["train", "text", "--out", "{d}/o", "--data", "{d}/none"],
            {},
            False,
        ),
        Case("train surrogate none", ["train", "surrogate", "--out", "{d}/o"], {}, False),
    ]
    for case in cases:
        case.name = f"flag: {case.name}"
    return cases


def prompt_cases() -> list[Case]:
    def prompts(name: str, content: str | bytes) -> Case:
        return Case(
            f"prompts: {name}",
            ["generate", "--prompts", "{d}/p.jsonl", "-n", "1"],
            {"p.jsonl": content},
        )

    return [
        prompts("not json", "hello\n"),
        prompts("a list", '["a"]\n'),
        prompts("no prompt key", '{"text": "a"}\n'),
        prompts("prompt number", '{"prompt": 3}\n'),
        prompts("prompt list", '{"prompt": ["a"]}\n'),
        prompts("prompt empty", '{"prompt": ""}\n'),
        prompts("prompt blank", '{"prompt": "   "}\n'),
        prompts("id bool", '{"prompt": "a", "id": true}\n'),
        prompts("id list", '{"prompt": "a", "id": [1]}\n'),
        prompts("lone surrogate", '{"prompt": "a\\ud800"}\n'),
        prompts("not utf-8", b'{"prompt": "\xff"}\n'),
        prompts("empty file", ""),
        prompts("only blank lines", "\n\n"),
        prompts("deep nesting", '{"prompt": "a", "x": ' + "[" * 100000 + "]" * 100000 + "}\n"),
        prompts("huge number", '{"prompt": "a", "x": ' + "9" * 5000 + "}\n"),
        prompts("too long", json.dumps({"prompt": "word " * 20000}) + "\n"),
        prompts("second line bad", '{"prompt": "a"}\n{"prompt": 1}\n'),
        prompts("truncated", '{"prompt": "a"'),
        Case("prompts missing", ["generate", "--prompts", "{d}/none.jsonl"]),
        Case("prompts is a folder", ["generate", "--prompts", "{d}/sub"], {"sub/x": ""}),
        Case(
            "prompt and prompts",
            ["generate", "--prompt", "a", "--prompts", "{d}/p.jsonl"],
            {"p.jsonl": '{"prompt": "b"}\n'},
        ),
    ]


def write_model(
    path: Path,
    change: Callable[[dict], None] | None = None,
    weights: Callable[[dict], dict] | None = None,
    text: bool = False,
) -> None:
    """A copy of the tiny test model with its config or weights changed."""
    from safetensors.torch import load_file, save_file

    source = TEXT_MODEL if text else MOLECULE_MODEL
    shutil.copytree(source, path, dirs_exist_ok=True)
    if change is not None:
        config = json.loads((path / "config.json").read_text())
        change(config)
        (path / "config.json").write_text(json.dumps(config))
    if weights is not None:
        state = weights(load_file(str(path / "model.safetensors")))
        save_file(state, str(path / "model.safetensors"))


def checkpoint_cases() -> list[Case]:
    import torch

    def model(name: str, change=None, weights=None, command: str = "molecules") -> Case:
        args = [command, "--model", "{d}/m", "-n", "1"]
        if command == "generate":
            args += ["--prompt", "a", "--length", "2"]
        return Case(
            f"checkpoint: {name}",
            args,
            {"m": lambda d: write_model(d / "m", change, weights, command == "generate")},
        )

    def setter(**values):
        return lambda c: c.update(values)

    def dropper(key):
        return lambda c: c.pop(key)

    def first_weight(f):
        def change(state):
            key = sorted(state)[0]
            state[key] = f(state[key])
            return state

        return change

    def tokenizer(content: str) -> Case:
        def build(d: Path) -> None:
            write_model(d / "m")
            (d / "m" / "tokenizer.json").write_text(content)

        return Case(
            f"tokenizer: {content[:40]}", ["molecules", "--model", "{d}/m", "-n", "1"], {"m": build}
        )

    from cdd_cli.models.checkpoint import REQUIRED

    cases = [model(f"missing {k}", dropper(k)) for k in REQUIRED]
    cases += [
        model("hidden_dim huge", setter(hidden_dim=4096)),
        model("hidden_dim 65536", setter(hidden_dim=65536, n_heads=4)),
        model("hidden_dim text", setter(hidden_dim="64")),
        model("hidden_dim bool", setter(hidden_dim=True)),
        model("n_heads 3", setter(n_heads=3)),
        model("n_blocks 0", setter(n_blocks=0)),
        model("n_blocks 1000", setter(n_blocks=1000)),
        model("vocab_size 0", setter(vocab_size=0)),
        model("vocab_size wrong", setter(vocab_size=31)),
        model("model_length 1", setter(model_length=1)),
        model("model_length huge", setter(model_length=10**9)),
        model("model_type gpt", setter(model_type="gpt")),
        model("noise contradicts", setter(noise="masked")),
        model("noise unknown", setter(noise="gaussian")),
        model("default steps huge", setter(default_sampling_steps=10**9)),
        model("default steps float", setter(default_sampling_steps=1e9)),
        model("default steps zero", setter(default_sampling_steps=0)),
        model("weights int", weights=first_weight(lambda t: t.to(torch.int32))),
        model("weights bool", weights=first_weight(lambda t: t > 0)),
        model("weights nan", weights=first_weight(lambda t: t * float("nan"))),
        model("weights inf", weights=first_weight(lambda t: t + float("inf"))),
        model("weights missing key", weights=lambda s: {k: v for k, v in list(s.items())[1:]}),
        model("weights extra key", weights=lambda s: {**s, "extra": torch.zeros(2)}),
        model("weights misshaped", weights=first_weight(lambda t: torch.zeros(3, 3))),
        Case(
            "checkpoint: config not json",
            ["molecules", "--model", "{d}/m", "-n", "1"],
            {"m": lambda d: (write_model(d / "m"), (d / "m" / "config.json").write_text("{"))},
        ),
        Case(
            "checkpoint: config a list",
            ["molecules", "--model", "{d}/m", "-n", "1"],
            {"m": lambda d: (write_model(d / "m"), (d / "m" / "config.json").write_text("[]"))},
        ),
        Case(
            "checkpoint: config nested",
            ["molecules", "--model", "{d}/m", "-n", "1"],
            {
                "m": lambda d: (
                    write_model(d / "m"),
                    (d / "m" / "config.json").write_text(
                        '{"x": ' + "[" * 100000 + "]" * 100000 + "}"
                    ),
                )
            },
        ),
        Case(
            "checkpoint: no weights",
            ["molecules", "--model", "{d}/m", "-n", "1"],
            {"m": lambda d: (write_model(d / "m"), (d / "m" / "model.safetensors").unlink())},
        ),
        Case(
            "checkpoint: truncated weights",
            ["molecules", "--model", "{d}/m", "-n", "1"],
            {
                "m": lambda d: (
                    write_model(d / "m"),
                    (d / "m" / "model.safetensors").write_bytes(
                        (MOLECULE_MODEL / "model.safetensors").read_bytes()[:100]
                    ),
                )
            },
        ),
        Case(
            "checkpoint: no tokenizer",
            ["molecules", "--model", "{d}/m", "-n", "1"],
            {"m": lambda d: (write_model(d / "m"), (d / "m" / "tokenizer.json").unlink())},
        ),
        tokenizer("{"),
        tokenizer("[]"),
        tokenizer('{"type": "smiles-regex"}'),
        tokenizer('{"type": "smiles-regex", "vocab": {"a": 1}}'),
        tokenizer('{"type": "smiles-regex", "vocab": [1, 2]}'),
        tokenizer(
            '{"type": "smiles-regex", "vocab": '
            '["<bos>", "<eos>", "<mask>", "<pad>", "<unk>", "C", "C"]}'
        ),
        tokenizer('{"type": "smiles-regex", "vocab": ["C", "N"]}'),
        tokenizer('{"type": "wordpiece"}'),
        model("text: noise contradicts", setter(noise="uniform"), command="generate"),
        model(
            "text: weights nan",
            weights=first_weight(lambda t: t * float("nan")),
            command="generate",
        ),
    ]
    return cases


def surrogate_cases() -> list[Case]:
    def surrogate(name: str, change: Callable[[dict], None]) -> Case:
        def build(d: Path) -> None:
            from cdd_cli.models.registry import ASSETS

            shutil.copytree(ASSETS / "qm9-sa-surrogate", d / "s")
            config = json.loads((d / "s" / "config.json").read_text())
            change(config)
            (d / "s" / "config.json").write_text(json.dumps(config))

        spec = "constraints:\n  - type: sa\n    tau: 3.5\n    surrogate: {d}/s\n"
        return Case(
            f"surrogate: {name}",
            ["validate", "{d}/spec.yaml"],
            {"s": build, "spec.yaml": spec},
            output=False,
        )

    return [
        surrogate("n_heads 3", lambda c: c.update(n_heads=3)),
        surrogate("hidden_dim text", lambda c: c.update(hidden_dim="64")),
        surrogate("max_length huge", lambda c: c.update(max_length=10**9)),
        surrogate("max_length short", lambda c: c.update(max_length=4)),
        surrogate("model_type", lambda c: c.update(model_type="other")),
        surrogate("vocab_size wrong", lambda c: c.update(vocab_size=99)),
        surrogate("n_layers 0", lambda c: c.update(n_layers=0)),
    ]


def eval_cases() -> list[Case]:
    good = {"id": "0-0", "text": "CCO", "prompt": None, "constraints": {}, "valid": True}

    def records(name: str, content: str | bytes) -> Case:
        return Case(f"eval: {name}", ["eval", "{d}/r.jsonl"], {"r.jsonl": content}, output=False)

    def changed(**values) -> str:
        return json.dumps({**good, **values}) + "\n"

    return [
        records("not json", "hello\n"),
        records("empty", ""),
        records("a list", "[1]\n"),
        records("no text", json.dumps({"id": "0-0"}) + "\n"),
        records("text number", changed(text=3)),
        records("bad id", changed(id="first")),
        records("prompt list", changed(prompt=["a"])),
        records("prompt_id bool", changed(prompt_id=True)),
        records("constraints list", changed(constraints=[1])),
        records("constraint no satisfied", changed(constraints={"sa": {"value": 3}})),
        records("valid text", changed(valid="yes")),
        records("novel number", changed(novel=3)),
        records("qed text", changed(qed="high")),
        records("huge number", '{"id": "0-0", "text": "x", "n": ' + "9" * 5000 + "}\n"),
        records(
            "deep nesting", '{"id": "0-0", "text": "x", "n": ' + "[" * 100000 + "]" * 100000 + "}\n"
        ),
        records("NaN literal", '{"id": "0-0", "text": "x", "qed": NaN}\n'),
        records("not utf-8", b'{"id": "0-0", "text": "\xff"}\n'),
        records("lone surrogate", '{"id": "0-0", "text": "a\\ud800"}\n'),
        records("second line bad", changed() + "{\n"),
        records("text too long", json.dumps({"id": "0-0", "text": "word " * 400_000}) + "\n"),
    ]


# Constraint plugins that misbehave in ways issue 49 found (installed for these cases by
# `write_audit_plugins`, a distribution on sys.path; tests/test_bad_inputs.py uses them too).
AUDIT_PLUGINS = """
import time

from cdd_cli.plugins import ConstraintPlugin, Option


def length(texts, options):
    return [float(len(t)) for t in texts]


def infinite(texts, options):
    return [float("inf") for _ in texts]


def huge(texts, options):
    return [10**400 for _ in texts]


def digits(texts, options):
    return [float(sum(c.isdigit() for c in t)) for t in texts]


def slow(texts, options):
    time.sleep(0.06 * len(texts))
    return length(texts, options)


def check_size(options):
    if options.get("size", 0) < 0:
        raise ValueError("size must be >= 0")


inf_judge = ConstraintPlugin(name="inf_judge", domain="molecules", judge=infinite)
huge_judge = ConstraintPlugin(name="huge_judge", domain="molecules", judge=huge)
slow_once = ConstraintPlugin(name="slow_once", domain="molecules", judge=slow)
no_digits = ConstraintPlugin(
    name="no_digits", domain="text", judge=digits, tau_default=0.0, tau_range=(0, 100)
)
sized = ConstraintPlugin(
    name="sized", domain="molecules", judge=length, options={"size": Option(int)},
    check=check_size,
)
"""


def write_audit_plugins(folder: Path) -> Path:
    """The audit's plugins as an installed distribution in `folder` (put it on sys.path)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cdd_audit_plugins.py").write_text(AUDIT_PLUGINS)
    info = folder / "cdd_audit_plugins-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: cdd-audit-plugins\nVersion: 0.1\n")
    names = ("inf_judge", "huge_judge", "slow_once", "no_digits", "sized")
    entries = "".join(f"{name} = cdd_audit_plugins:{name}\n" for name in names)
    (info / "entry_points.txt").write_text(f"[cdd.constraints]\n{entries}")
    return folder


def alias_bomb(indent: str) -> str:
    """YAML whose nine nested aliases stand for 9^9 values (a billion laughs)."""
    levels = ["&a0 [x, x, x, x, x, x, x, x, x]"]
    levels += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    return "".join(f"{indent}- {level}\n" for level in levels)


def regex_spec(pattern: str) -> str:
    return f"constraints:\n  - type: regex\n    pattern: {json.dumps(pattern)}\n"


def schema_spec(schema: str) -> str:
    return f"constraints:\n  - type: json_schema\n    schema: {schema}\n"


def doubling_schema(levels: int) -> str:
    """A schema whose every definition names the one before twice: its regex doubles at
    each level."""
    defs = {"d0": {"type": "string", "maxLength": 3}}
    for i in range(1, levels):
        ref = {"$ref": f"#/$defs/d{i - 1}"}
        defs[f"d{i}"] = {"anyOf": [ref, {"type": "array", "items": ref}]}
    return json.dumps({"$defs": defs, "$ref": f"#/$defs/d{levels - 1}"})


def write_shards(folder: Path, records: list[str], config: str | None = None) -> None:
    """Two shards of a run of 2 samples: a.jsonl (sample 0) and b.jsonl (`records`), each
    with a configuration beside it (b's: `config`, or a's)."""
    a_config = "model: m\nmethod: cdd\nsampling:\n  n: 2\n  seed: 0\n"
    record = {"id": "0-0", "seed": 0, "text": "C", "valid": True}
    (folder / "a.jsonl").write_text(json.dumps(record) + "\n")
    (folder / "a.jsonl.config.yaml").write_text(a_config)
    (folder / "b.jsonl").write_text("".join(line + "\n" for line in records))
    (folder / "b.jsonl.config.yaml").write_text(a_config if config is None else config)


def write_chat_model(folder: Path, template: str) -> None:
    """The tiny text model with a chat template of its own (tokenizer_config.json)."""
    write_model(folder, text=True)
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))


def audit_cases() -> list[Case]:
    """The hostile inputs of issue 49, and what a fresh audit of the same kind found. Cases
    that load a model run with -q: the error is then the only line, whatever the display
    says while a model loads."""
    record = {"id": "0-1", "seed": 0, "text": "C", "valid": True}
    line = json.dumps(record)
    cases = [
        spec_case("1,000-digit tau", "constraints:\n  - type: sa\n    tau: " + "9" * 1000 + "\n"),
        spec_case("5,000-digit seed", "sampling:\n  seed: " + "9" * 5000 + "\n"),
        spec_case("10 MB line", "model: " + "x" * (10 << 20) + "\n"),
        spec_case("100,000 constraints", "constraints:\n" + "  - {type: novelty}\n" * 100_000),
        spec_case(
            "1,001 constraints",
            "constraints:\n"
            + "".join(f"  - {{type: sa, tau: {2 + k / 1000}}}\n" for k in range(1001)),
        ),
        spec_case(
            "alias bomb",
            "constraints:\n  - type: json_schema\n    schema:\n      type: string\n"
            "      examples:\n" + alias_bomb("        "),
        ),
        spec_case("validate: regex a{100000}", regex_spec("a{100000}"), "validate"),
        spec_case("validate: regex (a+)+b", regex_spec("(a+)+b"), "validate"),
        spec_case("validate: regex (a|a)*b", regex_spec("(a|a)*b"), "validate"),
        spec_case("validate: regex (a|a){30}", regex_spec("(a|a){30}"), "validate"),
        spec_case("validate: regex (\\w+\\s?)*", regex_spec(r"(\w+\s?)*"), "validate"),
        spec_case("validate: regex DFA blow-up", regex_spec("[ab]*a[ab]{20}"), "validate"),
        spec_case(
            "validate: regex 250 optional letters repeated",
            regex_spec("(?:(?:[ab]?){250}c)+"),
            "validate",
        ),
        spec_case("validate: regex [a-z ]{0,3000}", regex_spec("[a-z ]{0,3000}"), "validate"),
        spec_case("validate: regex [a-z ]{0,900}", regex_spec("[a-z ]{0,900}"), "validate"),
        spec_case("validate: regex a{900}", regex_spec("a{900}"), "validate"),
        spec_case(
            "validate: schema maxLength 100000",
            schema_spec("{type: string, maxLength: 100000}"),
            "validate",
        ),
        spec_case(
            "validate: schema pattern a{100000}",
            schema_spec("{type: string, pattern: 'a{100000}'}"),
            "validate",
        ),
        spec_case(
            "validate: schema pattern (a+)+",
            schema_spec("{type: string, pattern: '(a+)+'}"),
            "validate",
        ),
        spec_case(
            "validate: schema maximum infinite",
            schema_spec("{type: integer, maximum: .inf}"),
            "validate",
        ),
        spec_case(
            "validate: schema $ref cycle",
            schema_spec(
                "{$defs: {a: {$ref: '#/$defs/b'}, b: {$ref: '#/$defs/a'}}, $ref: '#/$defs/a'}"
            ),
            "validate",
        ),
        spec_case(
            "validate: schema array of 50 long strings",
            schema_spec("{type: array, items: {type: string, maxLength: 50}, maxItems: 50}"),
            "validate",
        ),
        Case(
            "validate: schema $ref doubling",
            ["validate", "{d}/spec.yaml"],
            {"spec.yaml": schema_spec("{d}/s.json"), "s.json": doubling_schema(40)},
            output=False,
        ),
        Case(
            "validate: schema file 2 MB",
            ["validate", "{d}/spec.yaml"],
            {
                "spec.yaml": schema_spec("{d}/s.json"),
                "s.json": json.dumps({"type": "string", "description": "x" * (2 << 20)}),
            },
            output=False,
        ),
        Case(
            "validate: schema file nested 100,000 deep",
            ["validate", "{d}/spec.yaml"],
            {"spec.yaml": schema_spec("{d}/s.json"), "s.json": "[" * 100_000 + "]" * 100_000},
            output=False,
        ),
        Case(
            "validate: schema file not utf-8",
            ["validate", "{d}/spec.yaml"],
            {"spec.yaml": schema_spec("{d}/s.json"), "s.json": b'{"type": "\xff"}'},
            output=False,
        ),
        Case(
            "validate: schema /dev/zero",
            ["validate", "{d}/spec.yaml"],
            {"spec.yaml": schema_spec("/dev/zero")},
            output=False,
        ),
        spec_case("model name with newlines", 'model: "a\\nb\\u2028c"\n'),
        Case("flag: model name with newlines", ["molecules", "--model", "a\nb\rc"]),
        Case("flag: an option with a newline", ["molecules", "--fo\no"]),
        Case(
            "flag: resume to stdout", ["molecules", "-n", "1", "--resume", "-o", "-"], output=False
        ),
        Case("prompts: /dev/zero", ["generate", "--prompts", "/dev/zero", "-n", "1"]),
        Case(
            "prompts: 100,001 prompts",
            ["generate", "--prompts", "{d}/p.jsonl", "-n", "1"],
            {"p.jsonl": '{"prompt": "a"}\n' * 100_001},
        ),
        Case("eval: /dev/zero", ["eval", "/dev/zero"], output=False),
        Case(
            "eval: numbers past any record's",
            ["eval", "{d}/r.jsonl"],
            {
                "r.jsonl": "".join(
                    f"{json.dumps({**record, 'id': f'0-{k}', 'qed': 1e308})}\n" for k in range(3)
                )
            },
            output=False,
        ),
        Case(
            "eval: prompt of 2 million characters",
            ["eval", "{d}/r.jsonl"],
            {"r.jsonl": json.dumps({**record, "prompt": "p " * 1_000_000}) + "\n"},
            output=False,
        ),
        Case(
            "plugin: judge gives infinity",
            ["molecules", "-c", "inf_judge", "--tau", "1", "-n", "1", "-q"],
        ),
        Case(
            "plugin: judge gives a 400-digit integer",
            ["molecules", "-c", "huge_judge", "--tau", "1", "-n", "1", "-q"],
        ),
        Case(
            "train: molecules -q without QM9",
            ["train", "molecules", "-q", "--out", "{d}/o", "--qm9", "{d}/q", "--max-steps", "1"],
            {"q/x": ""},
            output=False,
        ),
    ]
    merges = {
        "an id past any prompt": [json.dumps({**record, "id": "99999999999999999-1"})],
        "an id past n": [json.dumps({**record, "id": "0-5"})],
        "NaN": [line.replace('"valid"', '"qed": NaN, "valid"')],
        "an infinite seed": [line.replace('"seed": 0', '"seed": 1e400')],
        "a text seed": [line.replace('"seed": 0', '"seed": "0"')],
        "an id of Arabic digits": [json.dumps({**record, "id": "\u0663-1"})],
        "a foreign line": ['{"a": 1}'],
        "a torn line": [line[:20]],
        "a line without end": [json.dumps({**record, "text": "C" * (17 << 20)})],
    }
    for name, lines in merges.items():
        cases.append(Case(
            f"merge: {name}",
            ["merge", "{d}/out.jsonl", "{d}/a.jsonl", "{d}/b.jsonl"],
            {"s": lambda d, lines=lines: write_shards(d, lines)},
            output=False,
        ))  # fmt: skip
    configs = {
        "n not a number": "model: m\nmethod: cdd\nsampling:\n  n: many\n  seed: 0\n",
        "alias bomb": "sampling:\n  n: 2\nextra:\n" + alias_bomb("  "),
        "2 MB": "sampling:\n  n: 2\n# " + "x" * (2 << 20) + "\n",
        "a date": "model: m\nmethod: cdd\nsampling:\n  n: 2\n  seed: 0\nwhen: 2024-01-01\n",
    }
    for name, config in configs.items():
        cases.append(Case(
            f"merge: configuration {name}",
            ["merge", "{d}/out.jsonl", "{d}/a.jsonl", "{d}/b.jsonl"],
            {"s": lambda d, config=config: write_shards(d, [line], config)},
            output=False,
        ))  # fmt: skip
    resumes = {
        "an infinite seed": '{"id": "0-0", "seed": 0}\n{"id": "0-1", "seed": 1e400}\n',
        "a foreign line": '{"id": "0-0", "seed": 0}\n{"a": 1}\n',
        "a line without end": '{"id": "0-0", "seed": 0}\n' + "x" * (17 << 20),
    }
    for name, content in resumes.items():
        cases.append(Case(
            f"resume: {name}",
            ["molecules", "--model", "{d}/m", "-n", "1", "--resume", "-q"],
            {"m": lambda d: write_model(d / "m"), "out.jsonl": content},
        ))  # fmt: skip
    cases.append(Case(
        "resume: configuration alias bomb",
        ["molecules", "--model", "{d}/m", "-n", "1", "--resume", "-q"],
        {
            "m": lambda d: write_model(d / "m"),
            "out.jsonl": '{"id": "0-0", "seed": 0}\n',
            "out.jsonl.config.yaml": "sampling:\n  n: 1\nextra:\n" + alias_bomb("  "),
        },
    ))  # fmt: skip
    templates = {
        "reaches for a class": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "reaches for globals": "{{ cycler.__init__.__globals__.os }}",
        "reaches through attr": "{{ (''|attr('__class__')).__base__ }}",
        "formats an attribute": "{{ '{0.__class__.__init__.__globals__}'.format('') }}",
        "allocates 10 GB": "{{ 'a' * 10000000000 }}",
        "doubles a string": "{% macro d(s, n) %}{{ d(s ~ s, n - 1) if n else s|length }}"
        "{% endmacro %}{{ d('a', 40) }}",
        "loops 10^10 times": "{% for i in range(100000) %}{% for j in range(100000) %}"
        "{% endfor %}{% endfor %}",
        "calls itself": "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
        "adds a number to text": "{{ 1 + 'a' }}",
        "divides by zero": "{{ 1 / 0 }}",
        "raises": "{{ raise_exception('no system role') }}",
        "writes 200 MB": "{% for i in range(100000) %}{{ 'x' * 2000 }}{% endfor %}",
    }
    chat = ["generate", "--model", "{d}/m", "--prompt", "a", "--length", "2", "-n", "1"]
    for name, template in templates.items():
        cases.append(Case(
            f"chat template: {name}",
            [*chat, "--chat", "-q"],
            {"m": lambda d, template=template: write_chat_model(d / "m", template)},
        ))  # fmt: skip
    return cases


def all_cases() -> list[Case]:
    cases = spec_cases() + flag_cases() + prompt_cases() + checkpoint_cases()
    cases += surrogate_cases() + eval_cases() + audit_cases()
    names = [c.name for c in cases]
    assert len(set(names)) == len(names), "case names must be unique"
    return cases


MOLECULE_MODEL = Path()
TEXT_MODEL = Path()


def snapshot(folder: Path) -> dict[str, str]:
    """Every path under `folder` with a digest of its content (folders and pipes: their kind)."""
    out = {}
    for path in folder.rglob("*"):
        name = path.relative_to(folder).as_posix()
        if path.is_file() and not path.is_symlink():
            out[name] = hashlib.sha1(path.read_bytes()).hexdigest()
        else:
            out[name] = "link" if path.is_symlink() else "dir" if path.is_dir() else "other"
    return out


class TimeLimit(Exception):
    pass


def run_case(case: Case, root: Path) -> dict:
    from cdd_cli.cli.app import main

    folder = root / f"case{abs(hash(case.name))}"
    folder.mkdir()
    for name, content in case.files.items():
        path = folder / name
        if callable(content):
            content(folder)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content.replace("{d}", str(folder)), encoding="utf-8")
    args = [a.replace("{d}", str(folder)) for a in case.args]
    out = folder / "out.jsonl"
    if case.output:
        args += ["-o", str(out)]
    before = snapshot(folder)
    stdout, stderr = io.StringIO(), io.StringIO()
    sys.argv = ["cdd", *args]
    code: int | str = 0
    started = time.perf_counter()
    signal.alarm(TIME_LIMIT_S)
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except TimeLimit:
        code = "time limit"
    except MemoryError:
        code = "memory limit"
    finally:
        signal.alarm(0)
    after = snapshot(folder)
    return {
        "exit": code,
        "stderr": stderr.getvalue().splitlines(),
        "new_files": sorted(set(after) - set(before)),
        "changed_files": sorted(k for k in before if k in after and before[k] != after[k]),
        "seconds": round(time.perf_counter() - started, 2),
    }


def main(results_path: str) -> None:
    global MOLECULE_MODEL, TEXT_MODEL
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.conftest import build_model_dir, build_text_model

    def on_alarm(*_: object) -> None:
        raise TimeLimit()

    signal.signal(signal.SIGALRM, on_alarm)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        # Before any plugin is looked up: entry points are read once a process.
        sys.path.insert(0, str(write_audit_plugins(root / "plugins")))
        MOLECULE_MODEL = build_model_dir(root / "molecule-model")
        TEXT_MODEL = build_text_model(root / "text-model")
        for case in all_cases():
            results[case.name] = run_case(case, root)
    Path(results_path).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
