"""Lexical constraints under either word rules (a spec's `words: plain | collie`) and the
`sentence_count` constraint: every layout the projection draws reads, under the chosen rules'
exact judges, as the constraints demand; specs those rules make impossible are refused."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from cdd_cli.cli.app import app
from cdd_cli.constraints.lexical import (
    Exclude,
    Include,
    SentenceCount,
    WordAt,
    WordCount,
    lexical_from_spec,
)
from cdd_cli.constraints.lexical.grammar import (
    BREAK,
    END,
    OPENER,
    PUNCT,
    ROLE_LIFTS,
    STOP,
    token_classes,
)
from cdd_cli.constraints.lexical.layout import WordLayout
from cdd_cli.constraints.lexical.rules import split_sentences, split_words, word_key
from cdd_cli.errors import InputError
from cdd_cli.models.tokenizers import Gpt2Tokenizer
from cdd_cli.spec.model import Spec
from cdd_cli.spec.reader import load_spec
from tests.constraints.test_lexical_constraints import draw_plans
from tests.test_text import generate, records

TOKENIZER = Gpt2Tokenizer()
# Tokens the two word rules read differently, or that end sentences where a layout must not:
# quotes (a word under COLLIE), dashes and ellipses (words under COLLIE), clitics, a fused
# word, sentence marks inside other punctuation, abbreviations and initials, lower-case words.
TRICKY = [
    '"', ' "', "--", " --", "...", "\u2014", "\u201c", "\u201d", " cannot", " gonna", "'s",
    "n't", '."', ".)", "?)", "?", "!", ".", ",", "-", "'", " Mr", " Dr", " I", " a", " A",
    " the", " The", " whale", " ship", "\n", "\n\n", " (", ")",
]  # fmt: skip


def tricky_probs(n: int, length: int, seed: int) -> torch.Tensor:
    """[n, length, V]: random rows with most of their mass on the tricky tokens."""
    generator = torch.Generator().manual_seed(seed)
    probs = torch.rand(n, length, len(TOKENIZER), generator=generator)
    probs *= probs
    probs *= probs
    probs /= probs.sum(-1, keepdim=True)
    tricky = [TOKENIZER.encode(t)[0] for t in TRICKY] + [TOKENIZER.eos_id]
    boost = torch.rand(n, length, len(tricky), generator=generator)
    probs[..., tricky] += 3 * boost / boost.sum(-1, keepdim=True)
    return probs / probs.sum(-1, keepdim=True)


def drawn_texts(layout: WordLayout, probs: torch.Tensor, seed: int = 0) -> list[str]:
    """Plan a layout per row, project, draw every position from its projected row."""
    plans = draw_plans(layout, probs, seed=seed)
    fixed = torch.zeros(probs.shape[:2], dtype=torch.bool)
    out = layout.apply(probs, plans, fixed)
    generator = torch.Generator().manual_seed(seed)
    cumulative = out.cumsum(-1)  # inverse CDF: one uniform a position
    u = torch.rand(*probs.shape[:2], 1, generator=generator) * cumulative[..., -1:]
    tokens = torch.searchsorted(cumulative, u).squeeze(-1).clamp_max(len(TOKENIZER) - 1)
    return [TOKENIZER.decode(row.tolist()) for row in tokens]


def satisfied(text: str, constraints: list) -> bool:
    return all(c.check(text) for c in constraints)


def with_rules(scheme: str) -> list:
    rules = {"scheme": scheme}
    return [
        WordCount(equals=7, **rules),
        WordAt(position=2, word="whale", **rules),
        Include(words=("ship",), **rules),
        Exclude(words=("The",), **rules),
        SentenceCount(equals=2, **rules),
    ]


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["plain", "collie"])
def test_layouts_read_as_the_constraints_demand_under_their_word_rules(scheme: str):
    constraints = with_rules(scheme)
    layout = WordLayout(constraints, TOKENIZER, start=0, length=16)
    texts = [t for seed in range(2) for t in drawn_texts(layout, tricky_probs(32, 16, seed), seed)]
    for text in texts:
        assert satisfied(text, constraints), (text, [c.explain(text) for c in constraints])
    other = with_rules("collie" if scheme == "plain" else "plain")
    if scheme == "plain":
        # The rules differ on these texts: the plain layout alone does not satisfy COLLIE's
        # judges (quotes, dashes and case count there), so the test can tell them apart.
        assert not all(satisfied(text, other) for text in texts)
    assert len(set(texts)) == len(texts)  # layouts and tokens are drawn, not fixed


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["plain", "collie"])
@pytest.mark.parametrize(
    "bounds", [{"equals": 1}, {"equals": 3}, {"min": 2}, {"max": 2}, {"min": 2, "max": 4}]
)
def test_sentence_counts_hold_under_both_word_rules(scheme: str, bounds: dict):
    counted = SentenceCount(scheme=scheme, **bounds)
    layout = WordLayout([counted], TOKENIZER, start=0, length=14)
    texts = drawn_texts(layout, tricky_probs(48, 14, seed=1), seed=1)
    low, high = counted.sentence_bounds()
    seen = set()
    for text in texts:
        n = len(split_sentences(text, scheme))
        assert (low or 0) <= n <= (high if high is not None else math.inf), (text, n)
        seen.add(n)
    if bounds == {"max": 2}:
        assert len(seen) > 1  # free within the bounds: more than one count is drawn


@pytest.mark.slow
def test_a_sentence_stops_only_where_both_judges_see_a_stop():
    """A stop after an abbreviation or an initial, or before a lower-case word, ends no
    sentence for one judge or the other: the grammar never lays one out there."""
    layout = WordLayout([SentenceCount(equals=2)], TOKENIZER, start=0, length=5)
    grammar = layout.grammar
    classes = layout.classes
    short = [r for r in grammar.word_roles if r.endswith("short")]
    assert classes[" ".join(["word", "capital", "short"])][TOKENIZER.encode(" Mr")[0]]
    assert classes["word short"][TOKENIZER.encode(" a")[0]]
    assert classes[STOP][TOKENIZER.encode(".")[0]]
    for marks in ('."', ".)", "?)"):  # a stop inside other punctuation: in no role
        (token,) = TOKENIZER.encode(marks)
        assert not any(classes[r][token] for r in layout.roles), marks
    after_short = grammar.next_state(0, short[0])
    assert grammar.next_state(after_short, STOP) is None
    stopped = grammar.next_state(0, STOP)
    assert grammar.next_state(stopped, "word") is None  # lower case after a stop
    assert grammar.next_state(stopped, "word capital") is not None
    assert grammar.next_state(grammar.next_state(stopped, BREAK), "bare") is None
    assert grammar.next_state(stopped, PUNCT) is None


@pytest.mark.slow
def test_collie_punctuation_is_one_ascii_mark_never_beside_another():
    layout = WordLayout([WordCount(max=5, scheme="collie")], TOKENIZER, start=0, length=5)
    texts = TOKENIZER.token_texts()
    for role in (PUNCT, OPENER, BREAK):
        for token in layout.classes[role].nonzero().flatten().tolist():
            text = texts[token]
            context = f"alpha{text}Beta" if role == OPENER else f"alpha{text} beta"
            words = [word_key(w, "collie") for w in split_words(context, "collie")]
            assert words in (["alpha", "beta"], ["alphabeta"]) or (
                role == OPENER and words == ["alpha", "beta"]
            ), (role, text, words)
    for word in (" cannot", " gonna"):
        assert not layout.classes["word"][TOKENIZER.encode(word)[0]]
    plain, _ = token_classes(TOKENIZER)
    assert plain["word"][TOKENIZER.encode(" cannot")[0]] and plain[PUNCT][TOKENIZER.encode('"')[0]]
    grammar = layout.grammar
    assert grammar.next_state(grammar.next_state(0, PUNCT), PUNCT) is None
    assert (
        layout.grammar.next_state(1, PUNCT) is None
        and WordLayout([WordCount(max=5)], TOKENIZER, start=0, length=5).grammar.next_state(
            1, PUNCT
        )
        == 1
    )


@pytest.mark.slow
def test_collie_compares_words_by_its_key():
    layout = WordLayout(
        [Exclude(words=("THE",), scheme="collie"), WordCount(max=4, scheme="collie")],
        TOKENIZER,
        start=0,
        length=4,
    )
    for spelling in (" the", " The", "The", " THE"):
        assert not any(layout.classes[r][TOKENIZER.encode(spelling)[0]] for r in layout.roles)
    plain = WordLayout([Exclude(words=("THE",)), WordCount(max=4)], TOKENIZER, start=0, length=4)
    assert plain.classes["word"][TOKENIZER.encode(" the")[0]]
    with pytest.raises(InputError, match="both required and forbidden"):
        WordLayout(
            [
                Include(words=("whale",), scheme="collie"),
                Exclude(words=("Whale",), scheme="collie"),
            ],
            TOKENIZER,
            start=0,
            length=4,
        )


def enumerate_layouts(layout: WordLayout, probs: torch.Tensor, sentences: int) -> dict:
    """Every role sequence of a layout with no placed words, by brute force, weighted as
    lexical/layout.py defines it, keeping those with `sentences` sentences."""
    roles = (*layout.roles, END)
    mass = {r: float((probs * layout.classes[r]).sum()) for r in roles}
    rows = [
        {r: float((probs[i] * layout.classes[r]).sum()) for r in roles} for i in range(len(probs))
    ]
    free = [sum(row[r] for r in layout.roles) for row in rows]
    grammar, weights = layout.grammar, {}
    for sequence in itertools.product(roles, repeat=len(probs)):
        first = sequence.index(END) if END in sequence else len(sequence)
        if any(r != END for r in sequence[first:]):
            continue
        weight, state = 1.0, layout.first_state
        for i, role in enumerate(sequence[:first]):
            if i > 0:
                weight *= ROLE_LIFTS[layout.states[state].lift, grammar.lift_role(role)]
            weight *= rows[i][role]
            state = grammar.next_state(state, role)
            if state is None:
                break
        if state is None:
            continue
        if first < len(sequence):
            weight *= rows[first][END] * math.prod(free[first + 1 :])
        stops = sequence[:first].count(STOP)
        if stops + (not layout.states[state].fresh) == sentences:
            weights[sequence[:first]] = weight
    assert mass  # every role has some mass in the rows
    total = sum(weights.values())
    return {k: v / total for k, v in weights.items()}


@pytest.mark.slow
def test_sentence_layouts_are_drawn_in_proportion_to_their_weight():
    """The forward-filtering backward-sampling draw with its sentence axis against brute-force
    enumeration (the tokens after the end are all end-of-text here: nothing is hidden)."""
    length, n = 4, 3000
    layout = WordLayout([SentenceCount(equals=2)], TOKENIZER, start=0, length=length)
    generator = torch.Generator().manual_seed(5)
    probs = torch.rand(length, len(TOKENIZER), generator=generator) ** 8
    probs = 0.4 * probs / probs.sum(-1, keepdim=True)
    for text in (" The", ".", " whale", "\n", " a", " Mr", "Ahab"):
        probs[:, TOKENIZER.encode(text)[0]] += 0.08
    expected = enumerate_layouts(layout, probs, sentences=2)
    batch = probs.expand(n // 6, -1, -1).contiguous()
    seen: dict = {}
    for k in range(6):
        for plan in draw_plans(layout, batch, seed=k * (n // 6)):
            end = plan.end if plan.end is not None else length
            sequence = tuple(plan.roles[i] for i in range(end))
            assert sequence in expected, sequence  # every draw is a valid layout
            seen[sequence] = seen.get(sequence, 0) + 1 / n
    distance = sum(abs(seen.get(k, 0) - v) for k, v in expected.items()) / 2
    # 140 layouts here: 3000 exact draws are this far from `expected` by chance alone.
    p = np.array(list(expected.values()))
    chance = np.random.default_rng(0).multinomial(n, p, size=20) / n
    noise = float(np.mean(np.abs(chance - p).sum(-1) / 2))
    assert distance < 1.25 * noise, (distance, noise)


def test_constraints_take_the_specs_word_rules():
    built = lexical_from_spec("word_at", {"position": 1, "word": "The"}, "collie")
    assert built.judge_name == "collie-words" and built.scheme == "collie"
    assert built.check("the whale") and not lexical_from_spec(
        "word_at", {"position": 1, "word": "The"}
    ).check("the whale")
    counted = lexical_from_spec("sentence_count", {"equals": 2}, "collie")
    assert counted.name == "sentence_count" and counted.sentence_bounds() == (2, 2)
    assert counted.check('"Oh!" he said.') and not counted.check("One sentence.")
    assert lexical_from_spec("sentence_count", {"min": 1}).word_bounds() == (None, None)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


def validate(path: Path):
    return CliRunner().invoke(app, ["validate", str(path)])


@pytest.mark.slow
def test_validate_reads_the_word_rules_and_refuses_what_they_make_impossible(tmp_path: Path):
    clitic = "constraints:\n  - type: word_at\n    position: 2\n    word: don't\n"
    assert validate(write(tmp_path, "model: default-text\n" + clitic)).exit_code == 0
    result = validate(write(tmp_path, "model: default-text\nwords: collie\n" + clitic))
    assert result.exit_code == 2, result.output
    assert "not one word under the collie word rules" in result.stderr
    assert "['do', \"n't\"]" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    # An excluded word the rules read as several would never be found: refused as well.
    excluded = 'constraints:\n  - type: exclude\n    words: ["{}"]\n'
    result = validate(write(tmp_path, "words: collie\n" + excluded.format("don't")))
    assert result.exit_code == 2 and "not one word under the collie word rules" in result.stderr
    result = validate(write(tmp_path, excluded.format("New York")))
    assert result.exit_code == 2 and "not one word under the plain word rules" in result.stderr
    # A word COLLIE compares case-insensitively cannot be both required and excluded.
    both = (
        "model: default-text\nwords: collie\nconstraints:\n"
        "  - type: include\n    words: [Whale]\n  - type: exclude\n    words: [whale]\n"
    )
    result = validate(write(tmp_path, both))
    assert result.exit_code == 2 and "excluded" in result.stderr
    assert validate(write(tmp_path, both.replace("words: collie\n", ""))).exit_code == 0
    # Too many sentences for the tokens: each but the last needs a word and a stop.
    many = "model: default-text\nconstraints:\n  - type: sentence_count\n    equals: 40\n"
    result = CliRunner().invoke(app, ["validate", str(write(tmp_path, many)), "--length", "16"])
    assert result.exit_code == 2 and "no continuation of 16 tokens" in result.stderr
    ok = "model: default-text\nwords: collie\nconstraints:\n  - type: sentence_count\n    min: 2\n"
    result = validate(write(tmp_path, ok))
    assert result.exit_code == 0, result.stderr
    assert "words: collie" in result.stdout and "type: sentence_count" in result.stdout


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("words: nltk\n", "key 'words': 'nltk' is not one of plain, collie"),
        ("words: [collie]\n", "key 'words'"),
        ("constraints:\n  - type: sentence_count\n", "sentence_count needs min, max or equals"),
        (
            "constraints:\n  - type: sentence_count\n    min: -1\n",
            "sentence counts must be >= 0",
        ),
        (
            "constraints:\n  - type: sentence_count\n    min: 3\n    max: 2\n",
            "min 3 > max 2",
        ),
    ],
)
def test_bad_word_rules_and_sentence_counts_are_one_line(tmp_path: Path, text: str, message):
    result = validate(write(tmp_path, text))
    assert result.exit_code == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_spec_words_default_and_resolved(tmp_path: Path):
    assert load_spec(write(tmp_path, "method: cdd\n")).words == "plain"
    spec = load_spec(write(tmp_path, "words: collie\n"))
    assert spec.words == "collie" and spec.resolved()["words"] == "collie"
    assert Spec().resolved()["words"] == "plain"


@pytest.mark.slow
def test_generate_under_collie_rules_with_a_sentence_count(text_model_dir: Path, tmp_path: Path):
    spec = write(
        tmp_path,
        "words: collie\nconstraints:\n  - type: sentence_count\n    equals: 2\n"
        "  - type: exclude\n    words: [The]\n  - type: word_at\n    position: 1\n"
        "    word: Whale\n",
    )
    args = ["-n", "3", "--length", "20", "--steps", "8", "--spec", str(spec), "--seed", "2"]
    result = generate(text_model_dir, *args)
    assert result.exit_code == 0, result.stderr
    rows = records(result.stdout)
    assert len(rows) == 3
    for row in rows:
        assert row["satisfied"] and len(split_sentences(row["text"], "collie")) == 2, row["text"]
        assert split_words(row["text"], "collie")[0].lower() == "whale"
        assert "the" not in {w.lower() for w in split_words(row["text"], "collie")}
        assert {c["judge"] for c in row["constraints"].values()} == {"collie-words"}
    free = generate(text_model_dir, *args, "--method", "unconstrained")
    assert free.exit_code == 3  # the random model alone does not write two sentences


@pytest.mark.slow
def test_resuming_under_other_word_rules_is_refused(text_model_dir: Path, tmp_path: Path):
    spec = write(tmp_path, "constraints:\n  - type: word_count\n    max: 5\n")
    out = tmp_path / "out.jsonl"
    args = ["-n", "1", "--length", "8", "--steps", "4", "--spec", str(spec), "-o", str(out)]
    assert generate(text_model_dir, *args).exit_code == 0
    spec.write_text("words: collie\n" + spec.read_text())
    result = generate(text_model_dir, *args, "-n", "2", "--resume")
    assert result.exit_code == 2 and "words differs" in result.stderr, result.stderr


def test_unconstrained_runs_do_not_call_a_constraint_infeasible():
    from cdd_cli.reporting import satisfaction_note

    excluded = [Exclude(words=("the", "and"))]
    free = satisfaction_note(excluded, 2, 2, "unconstrained", held={})
    assert "no sample satisfies excludes the, and (unconstrained: nothing steered" in free
    assert "infeasible" not in free
    assert "looks infeasible" in satisfaction_note(excluded, 2, 2, "cdd", held={})
    assert "no sample" not in satisfaction_note(excluded, 2, 1, "cdd", held={"exclude": 1})
