"""Every public name of the API, given bad arguments of each kind, raises `cdd.InputError` with
one line in the API's words (no command-line flag named), never another exception."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import pytest
import torch

import cdd_cli as cdd
from cdd_cli.run.runner import Output
from cdd_cli.spec.model import Spec

# A flag as the command line writes it (--length, -o): the API's messages name none.
FLAG = re.compile(r"(^|[\s(\[])(--[a-z]|-[a-z]\b)")


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    folder = tmp_path_factory.mktemp("api-inputs")
    words = folder / "words.yaml"
    words.write_text("model: default-text\nconstraints:\n  - {type: word_count, max: 8}\n")
    (folder / "broken.yaml").write_text("constraints: [\n")
    (folder / "a-file").write_text("not a folder\n")
    pattern = "constraints:\n  - {type: regex, pattern: '[a-z ]+'}\n"
    (folder / "lookahead-reject.yaml").write_text(
        f"model: default-text\nmethod: reject\n{pattern}projection: {{lookahead: 4}}\n"
    )
    (folder / "lookahead-alone.yaml").write_text(
        "model: default-text\nprojection: {lookahead: 4}\n"
    )
    molecules = cdd.load_model("default-molecules", device="cpu")
    text = cdd.load_model("default-text", device="cpu")
    return SimpleNamespace(
        dir=folder,
        words=words,
        molecules=molecules,
        text=text,
        molecule_run=cdd.Generator(molecules, steps=2),
        text_run=cdd.Generator(text, steps=2),
    )


def lookahead_spec(method: str, constraints: list | None = None) -> Spec:
    spec = Spec(method=method, constraints=constraints or [])
    spec.projection.lookahead = 4
    return spec


def containing_itself() -> dict:
    schema: dict = {"type": "object"}
    schema["properties"] = {"a": schema}
    return schema


def nested(depth: int) -> dict:
    schema: dict = {}
    inner = schema
    for _ in range(depth):
        inner["not"] = inner = {}
    return schema


def shared_many_times(levels: int) -> dict:
    """A schema whose one part is used 2**levels times: small in memory, not as JSON."""
    schema: dict = {"type": "string"}
    for _ in range(levels):
        schema = {"anyOf": [schema, schema]}
    return schema


CASES = {
    # load_model
    "load_model: a number": (lambda a: cdd.load_model(5), "load_model: give a shipped model"),
    "load_model: empty": (lambda a: cdd.load_model(" "), "load_model: give a shipped model"),
    "load_model: unknown": (lambda a: cdd.load_model("nope", device="cpu"), "model 'nope'"),
    "load_model: device 3": (
        lambda a: cdd.load_model("default-molecules", device=3),
        "device must be 'auto', 'cpu', 'cuda' or 'cuda:K', got 3",
    ),
    "load_model: device gpu": (
        lambda a: cdd.load_model("default-molecules", device="gpu"),
        "unknown device 'gpu'",
    ),
    "load_model: dtype 5": (
        lambda a: cdd.load_model("default-molecules", device="cpu", dtype=5),
        "dtype 5",
    ),
    # load_spec and check_spec
    "load_spec: a number": (lambda a: cdd.load_spec(123), "spec: expected a YAML file's path"),
    "load_spec: None": (lambda a: cdd.load_spec(None), "spec: expected a YAML file's path"),
    "load_spec: missing": (lambda a: cdd.load_spec(a.dir / "none.yaml"), "no such spec file"),
    "load_spec: a folder": (lambda a: cdd.load_spec(a.dir), "not a regular file"),
    "load_spec: bad YAML": (lambda a: cdd.load_spec(a.dir / "broken.yaml"), "YAML syntax error"),
    "check_spec: a number": (lambda a: cdd.check_spec(123), "spec: expected a YAML file's"),
    "check_spec: length text": (
        lambda a: cdd.check_spec(a.words, "8"),
        "length must be an integer, got '8'",
    ),
    "check_spec: length 0": (lambda a: cdd.check_spec(a.words, 0), "length must be positive"),
    "check_spec: length too long": (
        lambda a: cdd.check_spec(a.words, 9999),
        "length 9999 exceeds model default-text's length",
    ),
    "check_spec: lookahead under reject": (
        lambda a: cdd.check_spec(a.dir / "lookahead-reject.yaml"),
        "projection.lookahead serves the cdd method's regex and json_schema constraints; "
        "method reject does not use it",
    ),
    "check_spec: lookahead without a pattern": (
        lambda a: cdd.check_spec(a.dir / "lookahead-alone.yaml"),
        "projection.lookahead serves a regex or json_schema constraint; this spec has none",
    ),
    # Generator
    "Generator: model 5": (lambda a: cdd.Generator(5), "model must be a name or a folder"),
    "Generator: model empty": (lambda a: cdd.Generator(" "), "model is empty"),
    "Generator: spec 5": (lambda a: cdd.Generator(spec=5), "spec: expected a Spec"),
    "Generator: constraint 5": (
        lambda a: cdd.Generator(a.molecules, [5]),
        "constraints: expected values such as cdd.SA(tau=3.5), got int",
    ),
    "Generator: constraint by name": (
        lambda a: cdd.Generator(a.molecules, "sa"),
        "constraints: expected values such as cdd.SA(tau=3.5), got str",
    ),
    "Generator: method unknown": (
        lambda a: cdd.Generator(a.molecules, method="best"),
        "method must be one of",
    ),
    "Generator: method a list": (
        lambda a: cdd.Generator(a.molecules, method=[]),
        "method must be one of",
    ),
    "Generator: seed negative": (lambda a: cdd.Generator(a.molecules, seed=-1), "seed must be"),
    "Generator: seed fraction": (
        lambda a: cdd.Generator(a.molecules, seed=1.5),
        "seed must be an integer, got 1.5",
    ),
    "Generator: steps 0": (lambda a: cdd.Generator(a.molecules, steps=0), "steps must be"),
    "Generator: batch_size 0": (
        lambda a: cdd.Generator(a.molecules, batch_size=0),
        "batch_size must be positive",
    ),
    "Generator: block_length negative": (
        lambda a: cdd.Generator(a.molecules, block_length=-1),
        "block_length must be",
    ),
    "Generator: decode unknown": (lambda a: cdd.Generator(a.molecules, decode="x"), "decode"),
    "Generator: decode 5": (
        lambda a: cdd.Generator(a.molecules, decode=5),
        "decode must be a name, got 5",
    ),
    "Generator: sampler unknown": (lambda a: cdd.Generator(a.text, sampler="x"), "sampler"),
    "Generator: dtype 5": (lambda a: cdd.Generator(a.text, dtype=5), "dtype must be a name"),
    "Generator: chat yes": (
        lambda a: cdd.Generator(a.text, chat="yes"),
        "chat must be True or False",
    ),
    "Generator: temperature text": (
        lambda a: cdd.Generator(a.text, temperature="a"),
        "temperature must be a number",
    ),
    "Generator: top_p 2": (lambda a: cdd.Generator(a.text, top_p=2), "top_p"),
    "Generator: words 5": (lambda a: cdd.Generator(a.text, words=5), "words must be a name"),
    "Generator: words unknown": (
        lambda a: cdd.Generator(a.text, words="nltk"),
        "words must be one of plain, collie",
    ),
    "Generator: device 3": (
        lambda a: cdd.Generator("default-molecules", device=3),
        "device must be 'auto', 'cpu', 'cuda' or 'cuda:K', got 3",
    ),
    "Generator: device None": (
        lambda a: cdd.Generator("default-molecules", device=None),
        "device must be 'auto', 'cpu', 'cuda' or 'cuda:K', got None",
    ),
    "Generator: device None with a model": (
        lambda a: cdd.Generator(a.molecules, device=None),
        "device must be",
    ),
    "Generator: domain unknown": (
        lambda a: cdd.Generator(a.molecules, domain="x"),
        "domain must be molecules or text, got 'x'",
    ),
    "Generator: domain a list": (
        lambda a: cdd.Generator(a.molecules, domain=[]),
        "domain must be molecules or text, got []",
    ),
    "Generator: the other domain": (
        lambda a: cdd.Generator(a.molecules, domain="text"),
        "is not a text model",
    ),
    "Generator: lookahead under reject": (
        lambda a: cdd.Generator(a.text, spec=lookahead_spec("reject", [cdd.Regex("[a-z ]+")])),
        "projection.lookahead serves the cdd method's regex and json_schema constraints; "
        "method reject does not use it (set it to 0)",
    ),
    "Generator: lookahead under paper": (
        lambda a: cdd.Generator(a.molecules, spec=lookahead_spec("paper"), method="paper"),
        "method paper does not use it",
    ),
    "Generator: lookahead unconstrained": (
        lambda a: cdd.Generator(a.molecules, spec=lookahead_spec("unconstrained")),
        "method unconstrained does not use it",
    ),
    "Generator: lookahead without constraints": (
        lambda a: cdd.Generator(a.text, spec=lookahead_spec("cdd")),
        "projection.lookahead serves a regex or json_schema constraint; this spec has none",
    ),
    "Generator: lookahead with a molecule constraint": (
        lambda a: cdd.Generator(a.molecules, cdd.SA(tau=3.5), spec=lookahead_spec("cdd")),
        "this spec has none",
    ),
    # Generator.generate
    "generate: prompts 5": (
        lambda a: a.text_run.generate(5),
        "prompts: expected a text or a list of them, got 5",
    ),
    "generate: an empty prompt": (
        lambda a: a.text_run.generate("  "),
        "prompts[0]: the prompt is empty",
    ),
    "generate: no prompts": (lambda a: a.text_run.generate([]), "prompts: none given"),
    "generate: a prompt 5": (
        lambda a: a.text_run.generate(["Hi", 5]),
        "prompts[1]: expected a text or an object with a string 'prompt'",
    ),
    "generate: prompt not text": (
        lambda a: a.text_run.generate({"prompt": 5}),
        "prompts[0]: expected a text or an object",
    ),
    "generate: prompt a lone surrogate": (
        lambda a: a.text_run.generate("a\ud800"),
        "prompts[0]: not valid Unicode text",
    ),
    "generate: id an object": (
        lambda a: a.text_run.generate({"prompt": "Hi", "id": object()}),
        "prompts[0]: 'id' must be a string or an integer",
    ),
    "generate: id NaN": (
        lambda a: a.text_run.generate(["Hi", {"prompt": "Hi", "id": math.nan}]),
        "prompts[1]: 'id' must be a string or an integer",
    ),
    "generate: id a mapping": (
        lambda a: a.text_run.generate({"prompt": "Hi", "id": {"x": [1]}}),
        "prompts[0]: 'id' must be a string or an integer",
    ),
    "generate: id True": (
        lambda a: a.text_run.generate({"prompt": "Hi", "id": True}),
        "prompts[0]: 'id' must be a string or an integer",
    ),
    "generate: id a lone surrogate": (
        lambda a: a.text_run.generate({"prompt": "Hi", "id": "q\udc00"}),
        "prompts[0]: 'id': not valid Unicode text",
    ),
    "generate: n 0": (lambda a: a.text_run.generate("Hi", 0), "n must be positive, got 0"),
    "generate: n text": (lambda a: a.text_run.generate("Hi", "4"), "n must be an integer"),
    "generate: length text": (
        lambda a: a.text_run.generate("Hi", length="8"),
        "length must be an integer, got '8'",
    ),
    "generate: length 0": (
        lambda a: a.text_run.generate("Hi", length=0),
        "length must be positive, got 0",
    ),
    "generate: length past the model": (
        lambda a: a.text_run.generate("Hi", length=10**6),
        "prompt 0 (1 tokens) + length 1000000 exceed model default-text's length",
    ),
    "generate: seed True": (
        lambda a: a.text_run.generate("Hi", seed=True),
        "seed must be an integer, got True",
    ),
    "generate: reporter text": (
        lambda a: a.text_run.generate("Hi", reporter="x"),
        "reporter: expected a cdd.Reporter",
    ),
    "generate: steps for blocks": (
        lambda a: cdd.Generator(a.text, steps=1, sampler="confidence", block_length=2).generate(
            "Hi", length=8
        ),
        "1 steps cannot decide 4 blocks of 2 tokens (8 tokens): give steps >= 4 or a longer "
        "block_length",
    ),
    "generate: chat without a template": (
        lambda a: cdd.Generator(a.text, chat=True).generate("Hi"),
        "chat: ",
    ),
    "generate: chat without a prompt": (
        lambda a: cdd.Generator(a.text, chat=True).generate(),
        "chat",
    ),
    "generate: a molecule model": (
        lambda a: a.molecule_run.generate("Hi"),
        "generate(): model default-molecules is a molecules model; use molecules()",
    ),
    # Generator.molecules
    "molecules: a text model": (
        lambda a: a.text_run.molecules(2),
        "molecules(): model default-text is a text model; use generate()",
    ),
    "molecules: n negative": (lambda a: a.molecule_run.molecules(-1), "n must be positive"),
    "molecules: seed text": (
        lambda a: a.molecule_run.molecules(1, seed="x"),
        "seed must be an integer, got 'x'",
    ),
    # Generator.write
    "write: output 5": (
        lambda a: a.molecule_run.write(5, 1),
        "output: expected a file's path or an Output, got 5",
    ),
    "write: Output of a number": (
        lambda a: a.molecule_run.write(Output(5), 1),
        "output: expected a file's path or an Output",
    ),
    "write: a shard past N": (
        lambda a: a.molecule_run.write(Output("-", shard=(2, 2)), 1),
        "Output.shard must be (I, N) with 0 <= I < N, got (2, 2)",
    ),
    "write: no shards": (
        lambda a: a.molecule_run.write(Output("-", shard=(0, 0)), 1),
        "Output.shard must be (I, N) with 0 <= I < N, got (0, 0)",
    ),
    "write: resume yes": (
        lambda a: a.molecule_run.write(Output("-", resume="yes"), 1),
        "Output.resume must be True or False, got 'yes'",
    ),
    "write: a missing folder": (
        lambda a: a.molecule_run.write(str(a.dir / "none" / "out.jsonl"), 1),
        "out.jsonl': no folder ",
    ),
    "write: a file for a folder": (
        lambda a: a.molecule_run.write(a.dir / "a-file" / "out.jsonl", 1),
        "a-file is not a folder",
    ),
    "write: prompts to a molecule model": (
        lambda a: a.molecule_run.write(str(a.dir / "out.jsonl"), 1, prompts="Hi"),
        "a molecule model takes no prompts",
    ),
    "write: say 5": (
        lambda a: a.molecule_run.write(str(a.dir / "out.jsonl"), 1, say=5),
        "say: expected a function",
    ),
    "write: n 0": (
        lambda a: a.molecule_run.write(str(a.dir / "out.jsonl"), 0),
        "n must be positive",
    ),
    "write: a prompt id": (
        lambda a: a.text_run.write(str(a.dir / "t.jsonl"), 1, {"prompt": "Hi", "id": [1]}),
        "prompts[0]: 'id' must be a string or an integer",
    ),
    # cdd.molecules and cdd.generate
    "molecules(): device gpu": (lambda a: cdd.molecules(n=1, device="gpu"), "unknown device"),
    "molecules(): device None": (lambda a: cdd.molecules(n=1, device=None), "device must be"),
    "molecules(): a text model": (lambda a: cdd.molecules(model=a.text), "is a text model"),
    "generate(): a molecule model": (
        lambda a: cdd.generate("Hi", model=a.molecules),
        "is not a text model",
    ),
    "generate(): length 0": (
        lambda a: cdd.generate("Hi", model=a.text, length=0),
        "length must be positive",
    ),
    # Model.logits
    "logits: a list": (lambda a: a.text.logits([[1, 2]]), "logits: ids must be a LongTensor"),
    "logits: outside the vocabulary": (
        lambda a: a.text.logits(torch.tensor([[10**7]])),
        "logits: ids outside the",
    ),
    # The constraint values
    "constraint: type 5": (lambda a: cdd.constraint(5), "constraint: the type must be a name"),
    "constraint: unknown type": (lambda a: cdd.constraint("nosuch"), "unknown constraint type"),
    "constraint: unknown option": (
        lambda a: cdd.constraint("sa", tau=3, foo=1),
        "unknown option 'foo'",
    ),
    "constraint: a required option missing": (lambda a: cdd.constraint("sa"), "needs 'tau'"),
    "SA: tau text": (lambda a: cdd.SA(tau="3"), "option 'tau': expected number, got '3'"),
    "SA: tau outside": (lambda a: cdd.SA(tau=11), "outside [1, 10]"),
    "SA: margin negative": (lambda a: cdd.SA(tau=3, margin=-1), "margin"),
    "SA: surrogate 5": (lambda a: cdd.SA(tau=3, surrogate=5), "option 'surrogate'"),
    "Toxicity: tau outside": (lambda a: cdd.Toxicity(tau=2), "outside [0, 1]"),
    "Toxicity: scope unknown": (lambda a: cdd.Toxicity(tau=0.5, scope="x"), "scope"),
    "Novelty: reference 5": (
        lambda a: cdd.Novelty(5),
        "option 'reference': expected a name or a file's path, got 5",
    ),
    "Novelty: no such file": (lambda a: cdd.Novelty(a.dir / "none.smi"), "reference"),
    "WordAt: position text": (lambda a: cdd.WordAt("x", "a"), "option 'position'"),
    "WordAt: word 5": (lambda a: cdd.WordAt(1, 5), "option 'word'"),
    "Include: one word": (lambda a: cdd.Include("whale"), "give a list of words, e.g. ['whale']"),
    "Include: a number": (lambda a: cdd.Include(5), "words: give a list of words, got 5"),
    "Include: a number in the list": (lambda a: cdd.Include([5]), "key 'words'"),
    "Exclude: a number": (lambda a: cdd.Exclude(5), "words: give a list of words, got 5"),
    "WordCount: a fraction": (lambda a: cdd.WordCount(equals=3.7), "option 'equals'"),
    "SentenceCount: no bound": (lambda a: cdd.SentenceCount(), "needs min, max or equals"),
    "Count: letter 5": (lambda a: cdd.Count(letter=5), "option 'letter'"),
    "Regex: pattern 5": (lambda a: cdd.Regex(5), "option 'pattern': expected str, got 5"),
    "Regex: not a regex": (lambda a: cdd.Regex("("), "constraint 'regex'"),
    "Regex: ignore_case text": (lambda a: cdd.Regex("a", ignore_case="yes"), "ignore_case"),
    "JsonSchema: a number": (
        lambda a: cdd.JsonSchema(5),
        "option 'schema': expected a name or a file's path, got 5",
    ),
    "JsonSchema: None": (lambda a: cdd.JsonSchema(None), "needs 'schema'"),
    "JsonSchema: no such file": (lambda a: cdd.JsonSchema(a.dir / "none.json"), "cannot read"),
    "JsonSchema: not a JSON value": (
        lambda a: cdd.JsonSchema({"type": "object", "default": object()}),
        "#/default is a object, not a JSON value",
    ),
    "JsonSchema: a tuple": (
        lambda a: cdd.JsonSchema({"enum": (1, 2)}),
        "#/enum is a tuple, not a JSON value",
    ),
    "JsonSchema: a key not text": (
        lambda a: cdd.JsonSchema({"properties": {1: {}}}),
        "#/properties has the key 1; JSON's keys are text",
    ),
    "JsonSchema: containing itself": (
        lambda a: cdd.JsonSchema(containing_itself()),
        "key 'schema': #/properties/a contains itself (JSON has no cycles)",
    ),
    "JsonSchema: a minimum past a float": (
        lambda a: cdd.JsonSchema({"type": "integer", "minimum": -(10**400), "maximum": 5}),
        "#/minimum is a 1329-bit integer, past the range of a float",
    ),
    "JsonSchema: NaN": (
        lambda a: cdd.JsonSchema({"const": math.nan}),
        "#/const is nan, which JSON does not write",
    ),
    "JsonSchema: nested too deeply": (
        lambda a: cdd.JsonSchema(nested(5000)),
        "key 'schema' is nested too deeply",
    ),
    "JsonSchema: whitespace unknown": (
        lambda a: cdd.JsonSchema({"type": "string"}, whitespace="x"),
        "whitespace",
    ),
    "JsonSchema: unsupported keyword": (
        lambda a: cdd.JsonSchema({"type": "object", "dependentSchemas": {"a": {}}}),
        "unsupported: keyword 'dependentSchemas' at #",
    ),
    # schema_to_regex and schema_to_patterns
    "schema_to_regex: a number": (
        lambda a: cdd.schema_to_regex(5),
        "schema: expected a mapping or a .json file's path, got 5",
    ),
    "schema_to_regex: containing itself": (
        lambda a: cdd.schema_to_regex(containing_itself()),
        "schema: #/properties/a contains itself",
    ),
    "schema_to_regex: a maximum past a float": (
        lambda a: cdd.schema_to_regex({"type": "number", "maximum": 10**400}),
        "schema: #/maximum is a 1329-bit integer",
    ),
    "schema_to_regex: not a JSON value": (
        lambda a: cdd.schema_to_regex({"type": {"string"}}),
        "schema: #/type is a set, not a JSON value",
    ),
    "schema_to_regex: nested too deeply": (
        lambda a: cdd.schema_to_regex(nested(5000)),
        "is nested too deeply",
    ),
    "schema_to_regex: whitespace 5": (
        lambda a: cdd.schema_to_regex({"type": "string"}, whitespace=5),
        "schema: whitespace must be 'compact' or 'flexible', got 5",
    ),
    "schema_to_regex: several patterns": (
        lambda a: cdd.schema_to_regex({"allOf": [{"pattern": "a"}, {"pattern": "b"}]}),
        "schema_to_patterns gives them",
    ),
    "schema_to_patterns: no such file": (
        lambda a: cdd.schema_to_patterns(a.dir / "none.json"),
        "cannot read",
    ),
    "schema_to_patterns: a list": (
        lambda a: cdd.schema_to_patterns([{"type": "string"}]),
        "schema: expected a mapping or a .json file's path",
    ),
}

SLOW = {
    # A part shared 2**40 times, walked until the size of a schema file is passed (~1 s).
    "JsonSchema: shared past the size of a file": (
        lambda a: cdd.JsonSchema(shared_many_times(40)),
        "key 'schema': larger than 1 MiB as JSON",
    ),
}


def params() -> list:
    fast = [pytest.param(*case, id=name) for name, case in CASES.items()]
    slow = [pytest.param(*case, id=name, marks=pytest.mark.slow) for name, case in SLOW.items()]
    return fast + slow


@pytest.mark.parametrize(("call", "message"), params())
def test_a_bad_input_is_one_input_error_in_the_apis_words(api, call, message: str):
    with pytest.raises(cdd.InputError) as raised:
        result = call(api)
        if hasattr(result, "__next__"):  # a run's iterator: its checks ran at the call
            pytest.fail("a bad input was taken for a run")
    text = str(raised.value)
    assert message in text, text
    assert "\n" not in text and text.strip() == text
    assert not FLAG.search(text), f"names a command-line flag: {text}"


def test_every_public_name_is_tried():
    """Each callable the package exports (the API's names) has a case above."""
    tried = {name.split(":")[0].removesuffix("()") for name in [*CASES, *SLOW]}
    public = {name for name in cdd.__all__ if callable(getattr(cdd, name))}
    untried = public - tried - {"InputError", "Reporter", "Model"}
    assert not untried, sorted(untried)
    assert {"generate", "molecules", "write", "logits"} <= tried  # the methods too
