r"""The official JSON-Schema-Test-Suite (draft 2020-12, vendored in
tests/constraints/data/json_schema_test_suite/) through cdd's schema compiler, and through
llguidance's where it is installed (an optional bench dependency: `pip install llguidance`).

    python bench/schema_suite.py [--refusals] [--missed] [--whitespace compact|flexible]

For each schema: accepted (compiled) or refused; for each accepted one, the instances the
suite marks valid that the compiled constraint matches, and those it marks invalid that it
matches (unsound). An instance is written compactly with its keys in the schema's order (cdd
writes properties in that order; `tests/constraints/json_schema_suite.py`); cdd's patterns
also admit one space after `,` and `:`, llguidance's default any JSON whitespace, so the
compact writing is in both languages. Soundness is judged on more writings for cdd (spaced,
keys in the instance's or sorted order). Matching is by byte automata (llguidance: its matcher
over a byte tokenizer). For cdd, "valid matched" is by its patterns' language (Python's
`re.fullmatch`), "by automaton" by the byte automaton its token automaton is built from
(`automaton.pattern_moves`: outlines-core's index of the pattern with an end, since its index
of the bare pattern loses texts that go on past a match); an instance either matches is
unsound.

`--refusals` counts the refusals by keyword; `--missed` lists the accepted schemas with a valid
instance their constraint does not match. `--whitespace flexible` compiles cdd's patterns with
JSON's whitespace (`json_schema.grammar.WRITINGS`): soundness is then also judged on the
instances written with `indent=2`, and "spaced" counts the valid instances matched compactly, with
", "/": " and with `indent=2` (keys in the schema's order), by pattern and byte automaton.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.constraints.json_schema_suite import (
    Case,
    Outcome,
    Table,
    cases,
    cdd_outcome,
    schema_text,
)


class _Bytes:
    """A tokenizer of the 256 single bytes (and an end token), for llguidance's matcher."""

    eos_token_id = 256
    bos_token_id = None
    tokens = (*(bytes([b]) for b in range(256)), b"<eos>")
    special_token_ids = (256,)

    def __call__(self, text: bytes | str) -> list[int]:
        return list(text if isinstance(text, bytes) else text.encode())


def llguidance_outcomes(suite: list[Case]) -> list[Outcome] | None:
    try:
        import llguidance
    except ImportError:
        return None
    tokenizer = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Bytes()))
    matcher_class = llguidance.LLMatcher
    out = []
    for case in suite:
        try:
            grammar = matcher_class.grammar_from_json_schema(case.schema)
            problem = matcher_class.validate_grammar(grammar, tokenizer)
        except (ValueError, TypeError) as exc:
            problem = str(exc) or type(exc).__name__
        if problem:
            out.append(Outcome(case, refused=problem.splitlines()[0]))
            continue
        outcome = Outcome(case)

        def matched(instance: Any, grammar: str = grammar, schema: Any = case.schema) -> bool:
            data = list(schema_text(instance, schema).encode())
            matcher = matcher_class(tokenizer, grammar, log_level=0)
            return matcher.try_consume_tokens(data) == len(data) and matcher.is_accepting()

        for instance, valid in case.tests:
            if valid:
                outcome.valid_matched += matched(instance)
            elif matched(instance):
                outcome.unsound.append(schema_text(instance, case.schema))
        out.append(outcome)
    return out


def refusal_counts(outcomes: list[Outcome]) -> collections.Counter:
    """Refused schemas by the keyword (or first words of the reason) each names."""
    counts: collections.Counter = collections.Counter()
    for o in outcomes:
        if o.refused is None:
            continue
        named = set(re.findall(r"keyword '([^']+)'", o.refused)) or {
            re.sub(r"^suite: (json_schema: )?", "", o.refused)[:70]
        }
        counts.update(named)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--refusals", action="store_true")
    parser.add_argument("--missed", action="store_true")
    parser.add_argument("--whitespace", choices=("compact", "flexible"), default="compact")
    args = parser.parse_args()
    suite = list(cases())
    rows = {"cdd": [cdd_outcome(case, args.whitespace) for case in suite]}
    guided = llguidance_outcomes(suite)
    if guided is not None:
        from importlib.metadata import version

        rows[f"llguidance {version('llguidance')}"] = guided
    flexible = args.whitespace == "flexible"
    instances = sum(len(c.tests) for c in suite)
    valid = sum(v for c in suite for _, v in c.tests)
    print(
        f"JSON-Schema-Test-Suite draft 2020-12: {len(suite)} schemas, {instances} instances "
        f"({valid} valid); cdd's whitespace: {args.whitespace}"
    )
    print(
        f"{'compiler':<18} {'accepted':>9} {'unsound':>8} {'valid matched':>14} "
        f"{'by automaton':>13} {'broken':>7}" + (f" {'spaced':>7}" if flexible else "")
    )
    for name, outcomes in rows.items():
        t = Table.of(outcomes)
        by_automaton = t.valid_matched - t.valid_lost if name == "cdd" else t.valid_matched
        print(
            f"{name:<18} {t.accepted:>9} {t.unsound:>8} {t.valid_matched:>14} "
            f"{by_automaton:>13} {t.broken:>7}"
            + (f" {t.valid_matched_spaced if name == 'cdd' else '-':>7}" if flexible else "")
        )
    if guided is None:
        print("(llguidance is not installed: its row is left out)")
    for name, outcomes in rows.items():
        for o in outcomes:
            for text in o.unsound:
                print(f"unsound ({name}): {o.case.file}: {o.case.description}: {text}")
            if o.broken:
                print(f"broken ({name}): {o.case.file}: {o.case.description}: {o.broken}")
    if args.refusals:
        for name, outcomes in rows.items():
            print(f"\nrefusals ({name}):")
            for reason, n in refusal_counts(outcomes).most_common():
                print(f"{n:>5}  {reason}")
    if args.missed:
        for o in rows["cdd"]:
            if o.refused is None and o.broken is None and o.valid_matched < o.valid:
                print(f"missed {o.valid - o.valid_matched}: {o.case.file}: {o.case.description}")


if __name__ == "__main__":
    main()
