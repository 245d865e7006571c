"""Lexical and counting constraints through `cdd generate`: the word layout satisfies every
judge, unconstrained sampling does not, and impossible specs fail before sampling."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cdd_cli.constraints.lexical import Count, Exclude, Include, WordAt, WordCount, split_words
from cdd_cli.constraints.lexical.grammar import (
    BARE,
    BREAK,
    END,
    PUNCT,
    PUNCTUATION_ROLES,
    ROLE_LIFTS,
    STATES,
    WORD,
    WORD_ROLES,
    next_state,
    start_state,
)
from cdd_cli.constraints.lexical.layout import WordLayout
from cdd_cli.errors import InputError
from cdd_cli.models.tokenizers import Gpt2Tokenizer
from tests.test_text import generate, records, toxicity_spec

SPEC = """constraints:
  - type: word_count
    equals: 9
  - type: word_at
    position: 2
    word: whale
  - type: word_at
    position: -1
    word: harpooneer
  - type: include
    words: [ship, Ahab]
  - type: exclude
    words: [the, and, of]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


@pytest.mark.slow
def test_cdd_satisfies_all_lexical_constraints_at_once(text_model_dir: Path, tmp_path: Path):
    spec = write(tmp_path, SPEC)
    args = ["--prompt", "Call me Ishmael.", "-n", "4", "--length", "16", "--spec", str(spec)]
    free = generate(text_model_dir, *args, "--method", "unconstrained")
    assert free.exit_code == 3 and not any(r["satisfied"] for r in records(free.stdout))
    result = generate(text_model_dir, *args)
    assert result.exit_code == 0, result.stderr
    for row in records(result.stdout):
        words = split_words(row["text"])
        assert len(words) == 9 and words[1] == "whale" and words[-1] == "harpooneer"
        assert {"ship", "Ahab"} <= set(words) and not {"the", "and", "of"} & set(words)
        assert set(row["constraints"]) == {
            "word_count", "word_at", "word_at#2", "include", "exclude"
        }  # fmt: skip
        assert all(c["satisfied"] and c["value"] == 1.0 for c in row["constraints"].values())


def test_count_reads_the_prompt(text_model_dir: Path):
    result = generate(
        text_model_dir, "--prompt", "How many r's are in strawberry?", "-c", "count",
        "-n", "3", "--length", "6",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    for row in records(result.stdout):
        assert row["text"].split()[0] == "3"
        assert "'r' occurs 3 time(s)" in row["constraints"]["count"]["detail"]


@pytest.mark.slow
def test_lexical_with_toxicity_in_one_spec(
    text_model_dir: Path, toxicity_dir: Path, tmp_path: Path
):
    args = ["--prompt", "You are", "-n", "4", "--length", "8"]
    probe = generate(
        text_model_dir,
        *args,
        "--spec",
        str(toxicity_spec(tmp_path, toxicity_dir, 1.0, "continuation")),
    )
    tau = round(sorted(r["constraints"]["toxicity"]["value"] for r in records(probe.stdout))[1], 4)
    spec = toxicity_spec(tmp_path, toxicity_dir, tau, "continuation")
    spec.write_text(
        spec.read_text()
        + "  - type: word_at\n    position: 1\n    word: kind\n"
        + "  - type: word_count\n    max: 6\n"
    )
    result = generate(text_model_dir, *args, "--spec", str(spec))
    assert result.exit_code == 0, result.stderr
    for row in records(result.stdout):
        words = split_words(row["text"])
        assert words[0] == "kind" and len(words) <= 6
        assert row["constraints"]["toxicity"]["value"] <= tau


@pytest.mark.parametrize(
    ("spec", "args", "expected"),
    [
        (
            "constraints:\n  - type: word_at\n    position: 40\n    word: cat\n",
            [],
            "need 40 word(s)",
        ),
        (
            "constraints:\n  - type: word_at\n    position: 1\n    word: cat\n"
            "  - type: word_count\n    max: 0\n",
            [],
            "word_count allows at most 0",
        ),
        (
            "constraints:\n  - type: include\n    words: [antidisestablishmentarianism]\n",
            ["--length", "3"],
            "hold at most",
        ),
        ("constraints:\n  - type: word_at\n    position: 1\n    word: U.S.\n", [], "not one word"),
        ("constraints:\n  - type: count\n", ["--prompt", "Tell me a story"], "does not ask"),
    ],
)
def test_impossible_lexical_specs_fail_before_sampling(
    text_model_dir: Path, tmp_path: Path, spec: str, args: list[str], expected: str
):
    out = tmp_path / "out.jsonl"
    result = generate(
        text_model_dir, "--length", "12", "--spec", str(write(tmp_path, spec)), "-o", str(out),
        *args,
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert expected in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not out.exists() or out.read_text() == ""  # nothing sampled


def draw_plans(layout: WordLayout, probs: torch.Tensor, x=None, fixed=None, seed: int = 0):
    n = len(probs)
    x = torch.zeros(probs.shape[:2], dtype=torch.long) if x is None else x
    fixed = torch.zeros(probs.shape[:2], dtype=torch.bool) if fixed is None else fixed
    generators = [torch.Generator().manual_seed(seed + i) for i in range(n)]
    return layout.plan(probs, x, fixed, generators)


def random_probs(tokenizer: Gpt2Tokenizer, n: int, length: int, seed: int) -> torch.Tensor:
    probs = torch.rand(n, length, len(tokenizer), generator=torch.Generator().manual_seed(seed))
    return probs / probs.sum(-1, keepdim=True)


def peaked(tokenizer: Gpt2Tokenizer, rows: list[str]) -> torch.Tensor:
    """[1, L, V]: each position nearly certain of its token."""
    probs = torch.full((1, len(rows), len(tokenizer)), 1e-9)
    for i, text in enumerate(rows):
        probs[0, i, tokenizer.encode(text)[0] if text else tokenizer.eos_id] = 1.0
    return probs / probs.sum(-1, keepdim=True)


def test_layout_places_include_words_where_the_model_wants_them():
    tokenizer = Gpt2Tokenizer()
    layout = WordLayout([Include(words=("whale",))], tokenizer, start=2, length=5)
    probs = peaked(tokenizer, ["Call", " me", " the", ",", " a", " whale", " sea"])
    (plan,) = draw_plans(layout, probs)
    (whale,) = tokenizer.encode(" whale")
    assert plan.pinned == {5: whale} and plan.words == [2, 4, 6] and plan.punctuation == [3]


def test_layout_follows_the_tokens_already_decided():
    tokenizer = Gpt2Tokenizer()
    layout = WordLayout(
        [WordAt(position=2, word="whale"), WordCount(equals=3)], tokenizer, start=0, length=6
    )
    probs = random_probs(tokenizer, 8, 6, seed=1)
    x = torch.zeros(8, 6, dtype=torch.long)
    fixed = torch.zeros(8, 6, dtype=torch.bool)
    x[:, 1], fixed[:, 1] = tokenizer.encode(",")[0], True  # punctuation decided at 1
    x[:, 2], fixed[:, 2] = tokenizer.encode(" the")[0], True  # a word decided at 2
    (whale,) = tokenizer.encode(" whale")
    for plan in draw_plans(layout, probs, x, fixed):
        assert 1 in plan.punctuation and 2 in plan.words
        # " the" at 2 can only be word 1 (word 2 is whale), so 0 holds punctuation
        assert 0 in plan.punctuation and whale in plan.pinned.values()
    for b, plan in enumerate(draw_plans(layout, probs, x, fixed)):
        out = layout.apply(probs[b : b + 1], [plan], fixed[b : b + 1])
        assert torch.equal(out[0, 1:3], probs[b, 1:3])  # decided rows are left alone
        ids = out[0].argmax(-1)
        ids[fixed[b]] = x[b][fixed[b]]
        words = split_words(tokenizer.decode(ids.tolist()))
        assert len(words) == 3 and words[:2] == ["the", "whale"], words


def test_a_placed_word_is_decided_no_later_than_its_neighbours():
    tokenizer = Gpt2Tokenizer()
    layout = WordLayout(
        [WordAt(position=2, word="whale"), WordCount(equals=3)], tokenizer, start=0, length=6
    )
    probs = peaked(tokenizer, ["Call", " the", " whale", " sea", "\n", "\n"])
    (plan,) = draw_plans(layout, probs)
    (whale,) = tokenizer.encode(" whale")
    assert plan.placed == [[2]] and plan.pinned[2] == whale
    fixed = torch.zeros(1, 6, dtype=torch.bool)
    changing = torch.zeros(1, 6, dtype=torch.bool)
    changing[0, 3] = True  # the step would write the word after "whale" first
    layout.order([plan], changing, fixed)
    assert changing[0].tolist() == [False, False, True, False, False, False]
    changing[0, 0] = True  # a position not beside a placed word is left to the step
    layout.order([plan], changing, fixed)
    assert changing[0].tolist() == [True, False, True, False, False, False]
    fixed[0, 2], changing[0, 1] = True, True  # once the word is decided, nothing is held back
    layout.order([plan], changing, fixed)
    assert changing[0].tolist() == [True, True, True, False, False, False]


def test_after_the_end_one_end_of_text_then_the_model_writes_what_no_one_reads():
    """The model never saw a run of end-of-text tokens (it was trained on packed documents),
    so after the end and one end-of-text its own prediction stands, unprojected."""
    tokenizer = Gpt2Tokenizer()
    layout = WordLayout([WordCount(equals=2)], tokenizer, start=0, length=7)
    probs = peaked(tokenizer, [" Call", " me", "\n\n", " the", " whale", " sea", "."])
    (plan,) = draw_plans(layout, probs)
    assert plan.end == 2 and plan.words == [0, 1]
    assert plan.pinned == {3: tokenizer.eos_id}
    assert not {4, 5, 6} & (plan.roles.keys() | plan.pinned.keys())
    out = layout.apply(probs, [plan], torch.zeros(1, 7, dtype=torch.bool))
    assert torch.equal(out[0, 4:], probs[0, 4:])  # hidden: the model's own
    assert out[0, 3].argmax() == tokenizer.eos_id
    ids = out[0].argmax(-1).tolist()
    assert split_words(tokenizer.decode(ids)) == ["Call", "me"]


def test_the_end_moves_back_over_hidden_tokens_but_not_over_text():
    tokenizer = Gpt2Tokenizer()
    rows = [" Call", " me", "\n\n", " the", " whale", " sea", "."]
    probs = peaked(tokenizer, rows)
    x = torch.tensor([[tokenizer.encode(r)[0] for r in rows]])
    fixed = torch.zeros(1, 7, dtype=torch.bool)
    fixed[0, [2, 5]] = True  # the break, and " sea" after it
    constraints = [WordCount(max=5)]
    # Decided while the layout hid it (the end was at 2): the end may stay at 2.
    layout = WordLayout(constraints, tokenizer, start=0, length=7)
    (plan,) = draw_plans(layout, probs)
    assert plan.end == 2
    hidden_then = [draw_plans(layout, probs, x, fixed, seed=s)[0].end for s in range(20)]
    # Decided as text (the first plan already saw it): the end must come after it.
    text_then = []
    for s in range(20):
        layout = WordLayout(constraints, tokenizer, start=0, length=7)
        text_then.append(draw_plans(layout, probs, x, fixed, seed=s)[0].end)
    assert 2 in hidden_then
    assert all(end is None or end > 5 for end in text_then), text_then


def test_layout_projection_keeps_the_rest_of_each_distribution():
    tokenizer = Gpt2Tokenizer()
    layout = WordLayout(
        [WordAt(position=1, word="Call"), Exclude(words=("whale",)), WordCount(equals=3)],
        tokenizer,
        start=0,
        length=6,
    )
    probs = random_probs(tokenizer, 16, 6, seed=0)
    plans = draw_plans(layout, probs)
    out = layout.apply(probs, plans, torch.zeros(16, 6, dtype=torch.bool))
    (call,) = tokenizer.encode(" Call")
    roles = set()
    for b, plan in enumerate(plans):
        (at,) = [p for p, t in plan.pinned.items() if t == call]
        assert out[b, at, call] == 1.0
        for role in (*WORD_ROLES, *PUNCTUATION_ROLES):
            allowed = layout.classes[role]
            for position in plan.where(role):
                row = out[b, position]
                assert row[~allowed].sum() == 0 and torch.isclose(row.sum(), torch.tensor(1.0))
                ratio = row[allowed] / probs[b, position][allowed]
                assert torch.allclose(ratio, ratio[0].expand_as(ratio))  # renormalised
        text = tokenizer.decode(out[b].argmax(-1).tolist())
        assert len(split_words(text)) == 3 and split_words(text)[0] == "Call", text
        roles.add(tuple(sorted(plan.roles.items())))
    assert not layout.classes[WORD][tokenizer.encode(" whale")[0]]
    assert len(roles) > 1  # layouts are drawn, not fixed


ROLES = (*PUNCTUATION_ROLES, *WORD_ROLES, "whale", "ship", END)


def exact_layout_distribution(probs: torch.Tensor, tokenizer, layout, valid) -> dict:
    """Every role sequence by brute force, weighted as constraints/lexical/layout.py defines it.
    "whale" and "ship" are placements; a free word may be any token of its role."""
    import itertools

    (whale,), (ship,) = tokenizer.encode(" whale"), tokenizer.encode(" ship")
    mass = {r: (probs * layout.classes[r]).sum(-1) for r in (*PUNCTUATION_ROLES, *WORD_ROLES)}
    mass |= {"whale": probs[:, whale], "ship": probs[:, ship]}
    free = sum(mass[r] for r in (*PUNCTUATION_ROLES, *WORD_ROLES))
    weights = {}
    for roles in itertools.product(ROLES, repeat=len(probs)):
        first = roles.index(END) if END in roles else len(roles)
        if any(r != END for r in roles[first:]):
            continue
        if not valid([r for r in roles[:first] if r not in PUNCTUATION_ROLES]):
            continue
        weight, state = 1.0, layout.first_state
        for i, r in enumerate(roles):
            if i > first:
                weight *= float(free[i])
                continue
            role = r if r in (*PUNCTUATION_ROLES, *WORD_ROLES, END) else WORD
            if i > 0 and r != END:  # all undecided: each pair of neighbours is lifted
                weight *= ROLE_LIFTS[STATES[state].lift, role]
            if r == END:
                weight *= float((probs[i] * layout.classes[END]).sum())
                continue
            state = next_state(state, role)
            if state is None:
                break
            if r in WORD_ROLES and "ship" in layout.includes and "ship" not in roles[:i]:
                ship_tokens = tokenizer.encode(" ship") + tokenizer.encode("ship")
                spelled = [t for t in ship_tokens if layout.classes[r][t]]
                weight *= float(mass[r][i] - probs[i, spelled].sum())  # not ship before it
            else:
                weight *= float(mass[r][i])
        if state is not None:
            weights[roles] = weight
    total = sum(weights.values())
    return {k: v / total for k, v in weights.items()}


def plan_roles(plan, tokenizer, length: int) -> tuple[str, ...]:
    names = {tokenizer.encode(" whale")[0]: "whale", tokenizer.encode(" ship")[0]: "ship"}
    roles = []
    for i in range(length):
        if i in plan.roles:
            roles.append(plan.roles[i])
        else:
            token = plan.pinned[i]
            roles.append(END if token == tokenizer.eos_id else names[token])
    return tuple(roles)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("constraints", "valid"),
    [
        # word 2 is whale, ship placed once elsewhere, any number of words
        (
            [WordAt(position=2, word="whale"), Include(words=("ship",))],
            lambda w: len(w) >= 2 and w[1] == "whale" and w.count("whale") == w.count("ship") == 1,
        ),
        # exactly 3 words, the last is whale
        (
            [WordAt(position=-1, word="whale"), WordCount(equals=3)],
            lambda w: (
                len(w) == 3 and w[-1] == "whale" and w.count("whale") == 1 and "ship" not in w
            ),
        ),
    ],
)
def test_layouts_are_drawn_in_proportion_to_their_weight(constraints, valid):
    """The forward-filtering backward-sampling draw against brute-force enumeration."""
    tokenizer = Gpt2Tokenizer()
    length, n = 4, 3000
    layout = WordLayout(constraints, tokenizer, start=0, length=length)
    probs = torch.rand(length, len(tokenizer), generator=torch.Generator().manual_seed(3)) ** 8
    probs = 0.55 * probs / probs.sum(-1, keepdim=True)
    (whale,), (ship,) = tokenizer.encode(" whale"), tokenizer.encode(" ship")
    probs[:, [whale, ship, tokenizer.eos_id]] += 0.15  # placed words and ends are likely
    expected = exact_layout_distribution(probs, tokenizer, layout, valid)
    batch = probs.expand(n // 6, -1, -1).contiguous()  # 6 x 500 draws, not one 2.4 GB tensor
    plans = [p for k in range(6) for p in draw_plans(layout, batch, seed=k * (n // 6))]
    seen: dict = {}
    for plan in plans:
        roles = plan_roles(plan, tokenizer, length)
        assert roles in expected, roles  # every draw is a valid layout
        seen[roles] = seen.get(roles, 0) + 1 / n
    distance = sum(abs(seen.get(k, 0) - v) for k, v in expected.items()) / 2
    assert distance < 0.03, sorted(expected.items(), key=lambda kv: -kv[1])[:5]


def test_word_counts_drawn_for_positions_from_the_end_give_valid_layouts():
    """Without an exact count, a position from the end needs each sample's number of words
    (drawn approximately, see WordLayout.draw_counts): every layout must still be valid."""
    tokenizer = Gpt2Tokenizer()
    layout = WordLayout(
        [WordAt(position=-1, word="whale"), WordAt(position=1, word="Call"), WordCount(max=5)],
        tokenizer,
        start=0,
        length=8,
    )
    probs = random_probs(tokenizer, 64, 8, seed=4)
    plans = draw_plans(layout, probs)
    counts = set()
    for b, plan in enumerate(plans):
        out = layout.apply(probs[b : b + 1], [plan], torch.zeros(1, 8, dtype=torch.bool))
        words = split_words(tokenizer.decode(out[0].argmax(-1).tolist()))
        assert 2 <= len(words) <= 5 and words[0] == "Call" and words[-1] == "whale", words
        counts.add(len(words))
    assert len(counts) > 1


def test_count_without_a_question_is_refused():
    with pytest.raises(InputError, match="does not ask"):
        Count().with_prompt("Hello there", 2)


@pytest.mark.slow
def test_validate_catches_words_that_cannot_fit(tmp_path: Path):
    from typer.testing import CliRunner

    from cdd_cli.cli.app import app

    spec = write(tmp_path, "constraints:\n  - type: word_at\n    position: 500\n    word: cat\n")
    result = CliRunner().invoke(app, ["validate", str(spec)])
    assert result.exit_code == 2 and "need 500 word(s)" in result.stderr
    ok = write(tmp_path, SPEC)
    result = CliRunner().invoke(app, ["validate", str(ok)])
    assert result.exit_code == 0 and "layout fits 64 tokens (--length 64)" in result.stderr
    # Checked at the length `generate` uses by default (64), or at the one given.
    many = write(
        tmp_path, "model: default-text\nconstraints:\n  - type: word_count\n    equals: 80\n"
    )
    result = CliRunner().invoke(app, ["validate", str(many)])
    assert result.exit_code == 2 and "(--length 64)" in result.stderr
    result = CliRunner().invoke(app, ["validate", str(many), "--length", "120"])
    assert result.exit_code == 0 and "layout fits 120 tokens" in result.stderr
    result = CliRunner().invoke(app, ["validate", str(many), "--length", "999"])
    assert result.exit_code == 2 and "exceeds model default-text's length" in result.stderr


@pytest.mark.slow
def test_an_include_word_used_twice_is_not_weighted_twice():
    """Free words before the placement are not the include word, so each text has one
    layout: with " whale" and " the" equally likely, the three texts that include whale are
    equally likely."""
    tokenizer = Gpt2Tokenizer()
    layout = WordLayout([Include(words=("whale",))], tokenizer, start=0, length=2)
    (whale,), (the,) = tokenizer.encode(" whale"), tokenizer.encode(" the")
    # 3,000 draws in batches of 500: one [3000, 2, V] prediction and its projection took
    # 2.4 GB (and minutes on a loaded machine).
    probs = torch.zeros(500, 2, len(tokenizer))
    probs[..., [whale, the]] = 0.5
    texts: list[str] = []
    for batch in range(6):
        plans = draw_plans(layout, probs, seed=500 * batch)
        out = layout.apply(probs, plans, torch.zeros(500, 2, dtype=torch.bool))
        ids = torch.multinomial(
            out.view(-1, len(tokenizer)), 1, generator=torch.Generator().manual_seed(batch)
        )
        texts += [tokenizer.decode(row) for row in ids.view(500, 2).tolist()]
    shares = {t: texts.count(t) / len(texts) for t in set(texts)}
    assert set(shares) == {" whale whale", " whale the", " the whale"}
    assert all(abs(share - 1 / 3) < 0.04 for share in shares.values()), shares


def test_a_word_placed_first_and_last_may_be_one_placement():
    tokenizer = Gpt2Tokenizer()
    assert len(tokenizer.encode(" harpooneer")) > 2
    pins = [WordAt(position=1, word="harpooneer"), WordAt(position=-1, word="harpooneer")]
    layout = WordLayout([*pins, WordCount(equals=1)], tokenizer, start=0, length=4)
    (plan,) = draw_plans(layout, random_probs(tokenizer, 1, 4, seed=5))
    out = layout.apply(
        random_probs(tokenizer, 1, 4, seed=5), [plan], torch.zeros(1, 4, dtype=torch.bool)
    )
    assert split_words(tokenizer.decode(out[0].argmax(-1).tolist())) == ["harpooneer"]


@pytest.mark.slow
def test_a_layout_with_zero_probability_is_still_drawn():
    """The model may give a token the decided ones require probability 0; the projection must
    still find the layout rather than fail mid-sampling."""
    tokenizer = Gpt2Tokenizer()
    layout = WordLayout([WordAt(position=1, word="whale"), WordCount(equals=2)], tokenizer, 0, 3)
    probs = random_probs(tokenizer, 1, 3, seed=6)
    (whale,), (sea,) = tokenizer.encode(" whale"), tokenizer.encode(" sea")
    probs[:, :, whale] = 0.0
    x = torch.tensor([[0, sea, 0]])
    fixed = torch.tensor([[False, True, False]])  # " sea" decided: word 2, so whale is at 0
    (plan,) = draw_plans(layout, probs, x, fixed)
    assert plan.pinned[0] == whale


@pytest.mark.parametrize(
    ("prompt", "state"),
    [
        ("", (BREAK, "C")),
        ("Call me\n", (BREAK, "C")),
        ("Call me", (WORD, "A")),
        ("Call me.", (PUNCT, "A")),
        ('He said "', (PUNCT, "C")),
    ],
)
def test_the_continuation_starts_where_the_prompt_leaves_off(prompt, state):
    assert (STATES[start_state(prompt)].lift, STATES[start_state(prompt)].chunk) == state


@pytest.mark.slow
def test_a_bare_word_starts_a_word_only_after_whitespace():
    """ "The" after a line break is a word; after a word it would join it ("theThe"), so the
    layout gives it no word role there, and the judge counts what the layout counted."""
    tokenizer = Gpt2Tokenizer()
    constraints = [WordAt(position=2, word="whale"), WordCount(equals=2)]
    layout = WordLayout(constraints, tokenizer, start=0, length=4)
    probs = peaked(tokenizer, ["\n", "The", " whale", ""])
    (plan,) = draw_plans(layout, probs)
    assert plan.roles[0] == BREAK and plan.roles[1] == BARE
    out = layout.apply(probs, [plan], torch.zeros(1, 4, dtype=torch.bool))
    assert split_words(tokenizer.decode(out[0].argmax(-1).tolist())) == ["The", "whale"]

    after_a_word = WordLayout(
        [c.with_prompt("Call me", 2) for c in [WordCount(equals=1)]], tokenizer, 2, 1
    )
    probs = peaked(tokenizer, ["Call", " me", "Ishmael"])
    for plan in draw_plans(after_a_word, probs.expand(32, -1, -1).contiguous()):
        assert plan.roles[2] == WORD  # " Ishmael"'s role, never "Ishmael" joined to "me"
