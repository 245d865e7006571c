"""WordLayout piece by piece: what the constructor gathers from the constraints and refuses,
the role scores the dynamic programme reads, the hidden tokens it tracks from step to step,
the order in which placed words are decided and the projection of each position's row.

Everything runs on the real GPT-2 tokenizer with a few positions, so each test is fast."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from cdd_cli.constraints.lexical import Exclude, Include, SentenceCount, WordAt, WordCount
from cdd_cli.constraints.lexical.grammar import (
    AFTER_END,
    BARE,
    BREAK,
    END,
    HIDDEN,
    OPENER,
    PLACED,
    PUNCT,
    WORD,
    token_classes,
)
from cdd_cli.constraints.lexical.layout import WordLayout
from cdd_cli.constraints.lexical.programme import Plan
from cdd_cli.errors import InputError
from cdd_cli.models.tokenizers import Gpt2Tokenizer

TOKENIZER = Gpt2Tokenizer()
V = len(TOKENIZER)


def token(text: str) -> int:
    (i,) = TOKENIZER.encode(text)
    return i


WHALE, SHIP, SEA, THE, COMMA, NEWLINE = (
    token(t) for t in (" whale", " ship", " sea", " the", ",", "\n")
)
HARPOONEER = TOKENIZER.encode(" harpooneer")  # four tokens


def random_probs(n: int, length: int, seed: int) -> torch.Tensor:
    probs = torch.rand(n, length, V, generator=torch.Generator().manual_seed(seed))
    return probs / probs.sum(-1, keepdim=True)


def peaked(rows: list[str]) -> torch.Tensor:
    """[1, L, V]: each position nearly certain of its token ("" is end-of-text)."""
    probs = torch.full((1, len(rows), V), 1e-9)
    for i, text in enumerate(rows):
        probs[0, i, TOKENIZER.encode(text)[0] if text else TOKENIZER.eos_id] = 1.0
    return probs / probs.sum(-1, keepdim=True)


def draw(layout: WordLayout, probs: torch.Tensor, x=None, fixed=None, seed: int = 0):
    x = torch.zeros(probs.shape[:2], dtype=torch.long) if x is None else x
    fixed = torch.zeros(probs.shape[:2], dtype=torch.bool) if fixed is None else fixed
    generators = [torch.Generator().manual_seed(seed + i) for i in range(len(probs))]
    return layout.plan(probs, x, fixed, generators)


def refused(constraints: list, length: int = 6, start: int = 0) -> str:
    with pytest.raises(InputError) as error:
        WordLayout(constraints, TOKENIZER, start, length)
    return str(error.value)


# --------------------------------------------------------------------------------------------
# What the constructor gathers


@pytest.mark.slow
def test_a_fresh_layout_has_its_span_and_has_drawn_nothing_yet():
    layout = WordLayout([WordCount(max=3)], TOKENIZER, start=2, length=5)
    assert (layout.tokenizer, layout.start, layout.length) == (TOKENIZER, 2, 5)
    assert layout.counts is None and layout.drawn_hidden is None and layout.last is None
    assert layout.grammar.scheme == "plain" and not layout.grammar.sentences
    assert layout.states == layout.grammar.states
    assert layout.lays_out_every_position


def test_no_constraints_lay_out_plain_words():
    layout = WordLayout([], TOKENIZER, start=0, length=3)
    assert layout.grammar.scheme == "plain" and (layout.low, layout.high) == (0, None)
    assert layout.pins == {} and layout.includes == [] and layout.words_of == {}
    assert layout.most == 3 and layout.needed == 0 and layout.word_counts() == [None]


@pytest.mark.slow  # builds the COLLIE token classes (seconds, once a process)
def test_the_word_rules_are_the_constraints_own():
    layout = WordLayout([WordCount(max=3, scheme="collie")], TOKENIZER, 0, 4)
    assert layout.grammar.scheme == "collie"
    message = refused([WordCount(max=3), WordCount(max=3, scheme="collie")])
    assert message == "lexical constraints under different word rules: ['collie', 'plain']"
    # One word under COLLIE's rules, which compare words lower-cased: a single pin.
    same = [
        WordAt(position=1, word="Whale", scheme="collie"),
        WordAt(position=1, word="whale", scheme="collie"),
    ]
    layout = WordLayout(same, TOKENIZER, 0, 4)
    assert layout.pins == {1: "whale"}


def test_the_word_bounds_of_all_constraints_hold_together():
    constraints = [
        WordCount(min=2),
        WordCount(max=5),
        WordCount(min=1, max=4),
        Exclude(words=("a",)),
    ]
    layout = WordLayout(constraints, TOKENIZER, 0, 10)
    assert (layout.low, layout.high, layout.most, layout.needed) == (2, 4, 4, 2)
    layout = WordLayout([WordCount(max=4), WordCount(max=6)], TOKENIZER, 0, 10)
    assert (layout.low, layout.high, layout.most) == (0, 4, 4)
    # No upper bound: as many words as the tokens hold, less the placed words' extra tokens.
    layout = WordLayout([WordAt(position=1, word="harpooneer")], TOKENIZER, 0, 10)
    assert (layout.high, layout.most, layout.needed) == (None, 7, 1)
    layout = WordLayout([WordCount(max=20)], TOKENIZER, 0, 5)
    assert layout.most == 5


def test_the_words_needed_are_the_bound_the_placed_words_and_the_farthest_position():
    layout = WordLayout([WordAt(position=-3, word="whale")], TOKENIZER, 0, 6)
    assert layout.needed == 3 and layout.word_counts() == [3, 4, 5, 6]
    layout = WordLayout([Include(words=("whale", "ship"))], TOKENIZER, 0, 6)
    assert layout.needed == 2
    layout = WordLayout([WordAt(position=2, word="whale"), WordCount(min=4)], TOKENIZER, 0, 6)
    assert layout.needed == 4


@pytest.mark.slow
def test_sentence_bounds_of_all_constraints_hold_together():
    layout = WordLayout([SentenceCount(min=1), SentenceCount(max=3)], TOKENIZER, 0, 8)
    assert layout.sentence_bounds == (1, 3) and layout.grammar.sentences
    layout = WordLayout([SentenceCount(max=3), SentenceCount(max=2)], TOKENIZER, 0, 8)
    assert layout.sentence_bounds == (0, 2)
    layout = WordLayout([SentenceCount(min=1), SentenceCount(min=2)], TOKENIZER, 0, 8)
    assert layout.sentence_bounds == (2, None)
    layout = WordLayout([SentenceCount(max=2), WordCount(max=5)], TOKENIZER, 0, 8)
    assert layout.sentence_bounds == (0, 2)
    layout = WordLayout([WordCount(max=5)], TOKENIZER, 0, 8)
    assert layout.sentence_bounds == (0, None) and not layout.grammar.sentences
    message = refused([SentenceCount(min=3), SentenceCount(max=2)], length=8)
    assert message == "the constraints need at least 3 sentence(s) and at most 2"
    message = refused([SentenceCount(min=1), SentenceCount(min=3), SentenceCount(max=2)], 8)
    assert message == "the constraints need at least 3 sentence(s) and at most 2"


def test_one_position_cannot_hold_two_words():
    message = refused([WordAt(position=1, word="whale"), WordAt(position=1, word="ship")])
    assert message == "word 1 cannot be both 'whale' and 'ship'"
    assert "cannot be both" in refused(
        [WordAt(position=1, word="Whale"), WordAt(position=1, word="whale")]
    )


def test_a_placed_word_must_be_one_word_and_not_forbidden():
    message = refused([Include(words=("sea whale",))])
    assert message == (
        "'sea whale' is not one word under the plain word rules (it reads as ['sea', 'whale'])"
    )
    assert "'whale,' is not one word" in refused([WordAt(position=1, word="whale,")])
    message = refused([Include(words=("whale",)), Exclude(words=("whale",))])
    assert message == "'whale' is both required and forbidden"
    assert "both required and forbidden" in refused(
        [WordAt(position=2, word="ship"), Exclude(words=("sea", "ship"))]
    )


@pytest.mark.slow
def test_words_too_many_for_the_continuation_are_refused_saying_why():
    message = refused([WordCount(min=5)], length=3)
    assert message == "the constraints need 5 word(s), but 3 continuation tokens hold at most 3"
    message = refused([WordAt(position=5, word="cat")], length=3)
    assert message == (
        "the constraints need 5 word(s), but 3 continuation tokens hold at most 3 "
        "(the placed words take 1 tokens)"
    )
    message = refused([WordAt(position=3, word="cat"), WordCount(max=2)], length=6)
    assert message == "the constraints need 3 word(s), but word_count allows at most 2"
    message = refused([Include(words=("harpooneer",))], length=3)
    assert message == (
        "the constraints need 1 word(s), but 3 continuation tokens hold at most 0 "
        "(the placed words take 4 tokens)"
    )
    message = refused([Include(words=("harpooneer", "whale"))], length=4)
    assert message == (
        "the constraints need 2 word(s), but 4 continuation tokens hold at most 1 "
        "(the placed words take 5 tokens)"
    )
    message = refused([WordCount(max=0)], length=3)
    assert message == "the constraints need 1 word(s), but word_count allows at most 0"
    # An upper bound above what the tokens hold: the tokens are the limit named.
    message = refused([WordCount(min=5), WordCount(max=9)], length=3)
    assert message == "the constraints need 5 word(s), but 3 continuation tokens hold at most 3"
    message = refused([WordCount(min=5), WordCount(max=3)], length=3)
    assert message == "the constraints need 5 word(s), but 3 continuation tokens hold at most 3"
    message = refused([Include(words=("harpooneer", "whale", "ship"))], length=5)
    assert message.endswith("5 continuation tokens hold at most 2 (the placed words take 6 tokens)")
    # Just enough: each placed word in its tokens, one word for each.
    WordLayout([Include(words=("harpooneer", "whale"))], TOKENIZER, 0, 5)
    WordLayout([WordAt(position=3, word="cat"), WordCount(max=3)], TOKENIZER, 0, 3)
    WordLayout([WordCount(max=1)], TOKENIZER, 0, 1)


def test_a_word_placed_first_and_last_counts_its_tokens_once():
    pins = [
        WordAt(position=1, word="harpooneer"),
        WordAt(position=-1, word="harpooneer"),
        WordCount(equals=1),
    ]
    layout = WordLayout(pins, TOKENIZER, 0, 4)
    assert layout.most == 1 and layout.needed == 1


def test_two_positions_that_name_one_slot_with_different_words_are_refused():
    message = refused(
        [WordAt(position=2, word="whale"), WordAt(position=-1, word="ship"), WordCount(equals=2)]
    )
    assert message == "two word positions name the same word slot"
    # Some number of words keeps them apart: accepted.
    WordLayout(
        [WordAt(position=1, word="whale"), WordAt(position=-1, word="ship"), WordCount(max=2)],
        TOKENIZER,
        0,
        6,
    )


def test_include_words_are_gathered_once_and_a_pinned_one_is_not_included_again():
    constraints = [
        Include(words=("whale", "ship", "whale")),
        Include(words=("ship",)),
        WordAt(position=2, word="whale"),
    ]
    layout = WordLayout(constraints, TOKENIZER, 0, 6)
    assert layout.includes == ["ship"] and layout.pins == {2: "whale"}
    assert layout.words_of == {"whale": [WHALE], "ship": [SHIP]}
    assert layout.spellings == {"ship": [SHIP, token("ship")]}
    assert layout.needed == 2  # two words placed, not three
    layout = WordLayout([Include(words=("harpooneer",))], TOKENIZER, 0, 6)
    assert layout.words_of == {"harpooneer": HARPOONEER} and layout.spellings == {"harpooneer": []}


def test_an_excluded_word_is_no_free_word_and_other_layouts_keep_it():
    layout = WordLayout([Exclude(words=("the", "sea"))], TOKENIZER, 0, 4)
    for t in (THE, token("the"), SEA):
        assert not layout.classes[WORD][t] and not layout.classes[BARE][t]
    assert layout.classes[WORD][WHALE] and layout.classes[WORD][token(" The")]
    assert layout.classes[BARE][token("The")]
    classes, _ = token_classes(TOKENIZER, layout.grammar)
    assert classes[WORD][THE] and classes[BARE][token("the")]  # the shared classes untouched
    assert WordLayout([], TOKENIZER, 0, 4).classes[WORD][THE]
    assert torch.equal(layout.classes[PUNCT], classes[PUNCT])
    assert torch.equal(layout.classes[END], classes[END])


def test_the_first_state_follows_the_prompt():
    after_word = WordLayout([WordCount(max=3).with_prompt("Call me", 2)], TOKENIZER, 2, 4)
    fresh = WordLayout([WordCount(max=3)], TOKENIZER, 2, 4)
    grammar = fresh.grammar
    assert after_word.first_state == grammar.start_state("Call me")
    assert fresh.first_state == grammar.start_state("")
    assert after_word.first_state != fresh.first_state


def test_constraints_no_text_satisfies_together_are_refused():
    message = refused([SentenceCount(min=3)], length=3)
    assert message == "no continuation of 3 tokens satisfies the lexical constraints together"
    WordLayout([SentenceCount(min=3)], TOKENIZER, 0, 6)  # "A. B. C": six tokens
    # Positions from the end with a free number of words: checked over every count at once.
    layout = WordLayout([WordAt(position=-1, word="whale"), WordCount(max=3)], TOKENIZER, 0, 3)
    assert layout.word_counts() == [1, 2, 3]
    message = refused(
        [WordAt(position=-1, word="whale"), SentenceCount(min=3), WordCount(max=3)], length=4
    )
    assert message == "no continuation of 4 tokens satisfies the lexical constraints together"


def test_a_position_from_the_end_is_checked_with_an_exact_count_not_without_one():
    # Two words, two sentences, the last word "whale": only "X. whale", and a sentence
    # does not go on lower-case. Capitalised, it fits.
    constraints = [WordAt(position=-1, word="whale"), WordCount(equals=2), SentenceCount(min=2)]
    message = refused(constraints, length=6)
    assert message == "no continuation of 6 tokens satisfies the lexical constraints together"
    WordLayout([WordAt(position=-1, word="Whale"), *constraints[1:]], TOKENIZER, 0, 6)
    # One or two words: checked over both at once ("X. Y" fits; one word alone would not).
    free = [WordAt(position=-1, word="whale"), WordCount(max=2), SentenceCount(min=2)]
    assert WordLayout(free, TOKENIZER, 0, 3).word_counts() == [1, 2]


def test_a_long_placed_word_fits_only_where_its_tokens_do():
    # Four tokens and the end's end-of-text: five positions hold it.
    WordLayout(
        [WordAt(position=1, word="harpooneer"), WordCount(equals=1), SentenceCount(min=1)],
        TOKENIZER,
        0,
        4,
    )
    message = refused([WordAt(position=1, word="harpooneer"), SentenceCount(min=2)], length=5)
    assert message.startswith("no continuation of 5 tokens")


# --------------------------------------------------------------------------------------------
# The role scores


def expected_score(mass: torch.Tensor, fits: torch.Tensor, decided: torch.Tensor) -> np.ndarray:
    chosen = torch.where(fits, 0.0, -math.inf)
    return torch.where(decided, chosen, mass.clamp_min(1e-30).log()).numpy()


def test_role_scores_are_each_roles_log_mass_and_decided_tokens_fit_or_not():
    constraints = [
        Include(words=("ship",)),
        WordAt(position=1, word="harpooneer"),
        WordCount(max=4),
    ]
    start, length = 2, 6
    layout = WordLayout(constraints, TOKENIZER, start, length)
    probs = random_probs(2, start + length, seed=3)
    probs[0, start + 3] = 0.0  # a row with no mass: the floor, not -inf
    x = torch.zeros(2, start + length, dtype=torch.long)
    fixed = torch.zeros(2, start + length, dtype=torch.bool)
    fixed[:, :start] = True
    x[0, start + 4], fixed[0, start + 4] = TOKENIZER.eos_id, True
    x[0, start + 5], fixed[0, start + 5] = COMMA, True
    x[1, start + 2], fixed[1, start + 2] = HARPOONEER[1], True
    x[1, start + 5], fixed[1, start + 5] = SHIP, True
    drawn_hidden = torch.zeros(2, length, dtype=torch.bool)
    drawn_hidden[1, 5] = True  # " ship" decided while hidden
    scores = layout.role_scores(probs, x, fixed, drawn_hidden)

    p = probs[:, start:]
    tokens, decided = x[:, start:], fixed[:, start:]
    classes = layout.classes

    def mass(role: str) -> torch.Tensor:
        return (p * classes[role]).sum(-1)

    for role in (PUNCT, OPENER, BREAK, END):
        expected = expected_score(mass(role), classes[role][tokens], decided)
        np.testing.assert_allclose(scores[role], expected, rtol=1e-4, atol=1e-5)
    assert scores[PUNCT][0, 5] == 0.0 and scores[END][0, 4] == 0.0
    assert scores[BREAK][0, 5] == -math.inf and scores[PUNCT][0, 4] == -math.inf
    assert scores[END][0, 3] == pytest.approx(math.log(1e-30))
    free = sum(mass(r) for r in (WORD, BARE, PUNCT, OPENER, BREAK))
    eos = tokens == TOKENIZER.eos_id
    np.testing.assert_allclose(
        scores[AFTER_END], expected_score(free, eos, decided), rtol=1e-4, atol=1e-5
    )
    hidden = expected_score(free, eos | drawn_hidden, decided)
    np.testing.assert_allclose(scores[HIDDEN], hidden, rtol=1e-4, atol=1e-5)
    assert scores[HIDDEN][1, 5] == 0.0 and scores[AFTER_END][1, 5] == -math.inf
    assert scores[HIDDEN][0, 4] == 0.0 and scores[HIDDEN][0, 5] == -math.inf

    # A placed word: the sum of its tokens' scores from each start where all of it fits.
    logs = {t: expected_score(p[..., t], tokens == t, decided) for t in HARPOONEER}
    placed = scores[PLACED, "harpooneer"]
    assert placed.shape == (2, length) and np.isneginf(placed[:, 3:]).all()
    for i in range(3):
        total = sum(logs[t][:, i + j] for j, t in enumerate(HARPOONEER))
        np.testing.assert_allclose(placed[:, i], total, rtol=1e-4, atol=1e-5)
    assert np.isfinite(placed).tolist() == [
        [True, False, False, False, False, False],
        [False, True, False, False, False, False],
    ]
    ship = scores[PLACED, "ship"]
    expected = expected_score(p[..., SHIP], tokens == SHIP, decided)
    np.testing.assert_allclose(ship, expected, rtol=1e-4, atol=1e-5)
    assert ship[1, 5] == 0.0 and ship[0, 5] == -math.inf

    # A free word before "ship" is placed is not "ship" (its spellings taken out of the mass).
    spellings = [SHIP, token("ship")]
    for role in (WORD, BARE):
        for m, waiting in ((0, spellings), (1, [])):
            fits = classes[role][tokens] & ~torch.isin(
                tokens, torch.tensor(waiting, dtype=torch.long)
            )
            spelled = (p[..., waiting] * classes[role][waiting]).sum(-1)
            expected = expected_score(mass(role) - spelled, fits, decided)
            np.testing.assert_allclose(scores[role, m], expected, rtol=1e-4, atol=1e-6)
    assert scores[WORD, 0][1, 5] == -math.inf and scores[WORD, 1][1, 5] == 0.0
    assert scores[WORD, 0][0, 0] < scores[WORD, 1][0, 0]
    assert set(scores) >= {(WORD, 0), (WORD, 1), (BARE, 0), (BARE, 1)}
    assert (WORD, 2) not in scores

    # Lifted where a position and the one before it are both undecided (the first never).
    lift = scores["lift"]
    assert lift.dtype == bool and lift.shape == (2, length)
    assert lift.tolist() == [
        [False, True, True, True, False, False],
        [False, True, False, False, True, False],
    ]


# --------------------------------------------------------------------------------------------
# Drawing layouts step after step


def test_tokens_decided_while_hidden_are_remembered_from_step_to_step():
    """The first plan hides what follows its end; a token decided there at the next step is
    `drawn_hidden` (the end may move back over it), one decided as text or before is not."""
    start = 2
    layout = WordLayout([WordCount(equals=2)], TOKENIZER, start=start, length=7)
    probs = peaked(["Call", " me", " Call", " me", "\n\n", " the", " whale", " sea", "."])
    x = probs[0].argmax(-1).expand(1, -1).clone()
    fixed = torch.zeros(1, 9, dtype=torch.bool)
    fixed[:, :start] = True
    (plan,) = draw(layout, probs, x, fixed.clone())  # a new mask each step, as a sampler's
    assert plan.end == start + 2 and plan.pinned == {start + 3: TOKENIZER.eos_id}
    assert layout.drawn_hidden.tolist() == [[False] * 7]
    decided, hidden = layout.last
    assert decided.tolist() == [[False] * 7]
    assert hidden.tolist() == [[False, False, False, False, True, True, True]]
    fixed[0, start + 5] = True  # decided while hidden
    fixed[0, start + 0] = True  # decided as text
    draw(layout, probs, x, fixed.clone(), seed=1)
    assert layout.drawn_hidden.tolist() == [[False, False, False, False, False, True, False]]
    assert layout.last[0].tolist() == [[True, False, False, False, False, True, False]]
    fixed[0, start + 6] = True  # hidden at the last step as well
    draw(layout, probs, x, fixed.clone(), seed=2)
    assert layout.drawn_hidden.tolist() == [[False, False, False, False, False, True, True]]


def test_a_text_that_fills_the_continuation_hides_nothing():
    layout = WordLayout([WordCount(equals=3)], TOKENIZER, start=0, length=3)
    (plan,) = draw(layout, peaked([" Call", " me", " Ishmael"]))
    assert plan.end is None and plan.pinned == {} and plan.words == [0, 1, 2]
    assert layout.last[1].tolist() == [[False, False, False]]


def test_each_sample_keeps_the_number_of_words_it_drew_first():
    """With a position from the end and no exact count, each sample draws its number of
    words once; each layout has that many words, whatever the later predictions."""
    constraints = [WordAt(position=-1, word="whale"), WordCount(max=4)]
    layout = WordLayout(constraints, TOKENIZER, start=0, length=5)
    probs = random_probs(6, 5, seed=7)
    probs[..., WHALE] += 0.3
    probs = probs / probs.sum(-1, keepdim=True)
    plans = draw(layout, probs)
    counts = list(layout.counts)
    assert len(counts) == 6 and set(counts) <= {1, 2, 3, 4} and len(set(counts)) > 1
    again = draw(layout, random_probs(6, 5, seed=8), seed=50)
    assert layout.counts == counts
    for b, plan in enumerate([*plans, *again]):
        words = len(plan.words) + len(plan.placed)
        assert words == counts[b % 6], (b, plan)
        last = max(p for span in plan.placed for p in span)
        assert all(p < last for p in plan.words) and plan.pinned[last] == WHALE


def test_samples_are_laid_out_from_their_own_rows():
    layout = WordLayout([WordCount(equals=2)], TOKENIZER, start=0, length=4)
    probs = torch.cat([peaked([" Call", " me", "\n\n", " sea"]), peaked([" Call", ",", " me", ""])])
    first, second = draw(layout, probs)
    assert first.words == [0, 1] and first.end == 2
    assert second.words == [0, 2] and second.punctuation == [1] and second.end == 3


# --------------------------------------------------------------------------------------------
# The order of decisions


def test_placed_words_are_decided_before_their_neighbours_inside_the_continuation():
    start, length = 2, 8  # positions 2..9
    layout = WordLayout([WordCount(max=8)], TOKENIZER, start=start, length=length)
    # A word at the first position, one of two tokens, two side by side at the end.
    plan = Plan(placed=[[2], [5, 6], [8], [9]])
    fixed = torch.zeros(1, start + length, dtype=torch.bool)
    fixed[0, :start] = True

    def ordered(decide: list[int], fix: tuple[int, ...] = (), placed=plan) -> list[int]:
        changing = torch.zeros(1, start + length, dtype=torch.bool)
        changing[0, decide] = True
        done = fixed.clone()
        done[0, list(fix)] = True
        layout.order([placed], changing, done)
        return changing[0].nonzero().squeeze(-1).tolist()

    assert ordered([3]) == [2]  # the word beside 3 instead
    assert ordered([4]) == [5, 6]
    assert ordered([4], fix=(5,)) == [6]  # only what is left of the word
    assert ordered([4], fix=(5, 6)) == [4]  # the word decided: nothing held back
    assert ordered([3], fix=(2,)) == [3]
    assert ordered([4], fix=(2,)) == [5, 6]  # a word decided earlier in the plan: the next
    assert ordered([7]) == [5, 6]  # held back for the first word beside it
    assert ordered([7], fix=(5, 6)) == [8]
    assert ordered([0, 3, 9]) == [0, 2, 9]  # the prompt is not the step's to hold back
    assert ordered([8]) == [8]  # a placed word beside another is not held back for it
    assert ordered([9]) == [9]  # nor is the last, with nothing after it in the continuation
    assert ordered([8, 9]) == [8, 9]
    assert ordered([]) == []
    # A word at the second position: the first is its neighbour.
    assert ordered([2], placed=Plan(placed=[[3]])) == [3]
    assert ordered([4], placed=Plan(placed=[[3]])) == [3]


def test_decisions_of_each_sample_are_ordered_by_its_own_plan():
    layout = WordLayout([WordCount(max=4)], TOKENIZER, start=0, length=4)
    plans = [Plan(placed=[[1]]), Plan(placed=[[3]])]
    changing = torch.tensor([[False, False, True, False], [False, False, True, False]])
    layout.order(plans, changing, torch.zeros(2, 4, dtype=torch.bool))
    assert changing.tolist() == [[False, True, False, False], [False, False, False, True]]


# --------------------------------------------------------------------------------------------
# The projection


def test_each_position_is_renormalised_over_its_roles_tokens():
    start = 1
    layout = WordLayout(
        [WordCount(max=3), Include(words=("ship",))], TOKENIZER, start=start, length=5
    )
    probs = random_probs(2, 6, seed=11)
    probs[0, 3] = 0.0
    probs[0, 3, WHALE] = 1.0  # nothing on punctuation: uniform over it
    plan = Plan(
        pinned={2: SHIP, 5: TOKENIZER.eos_id},
        roles={1: WORD, 3: PUNCT, 4: END},
        not_yet={1: [SHIP, token("ship")]},
        placed=[[2]],
        end=4,
    )
    fixed = torch.zeros(2, 6, dtype=torch.bool)
    fixed[:, 0] = True
    out = layout.apply(probs, [plan, Plan()], fixed)
    assert out.dtype == probs.dtype and out.shape == probs.shape
    assert torch.equal(out[1], probs[1]) and torch.equal(out[0, 0], probs[0, 0])
    classes = layout.classes
    word = probs[0, 1] * classes[WORD]
    word[[SHIP, token("ship")]] = 0.0
    assert torch.allclose(out[0, 1], word / word.sum()) and out[0, 1, SHIP] == 0.0
    assert torch.equal(out[0, 2], torch.nn.functional.one_hot(torch.tensor(SHIP), V).float())
    punct = classes[PUNCT].float()
    assert torch.allclose(out[0, 3], punct / punct.sum())
    end = probs[0, 4] * classes[END]
    assert torch.allclose(out[0, 4], end / end.sum()) and out[0, 4, NEWLINE] > 0
    assert out[0, 5].tolist() == [float(t == TOKENIZER.eos_id) for t in range(V)]


def test_positions_already_decided_are_left_as_they_are():
    layout = WordLayout([WordCount(max=3)], TOKENIZER, start=0, length=4)
    probs = random_probs(1, 4, seed=12)
    plan = Plan(
        pinned={0: WHALE, 3: TOKENIZER.eos_id},
        roles={1: WORD, 2: END},
        not_yet={1: [WHALE]},
        placed=[[0]],
        end=2,
    )
    fixed = torch.ones(1, 4, dtype=torch.bool)
    assert torch.equal(layout.apply(probs, [plan], fixed), probs)
    fixed[0, 1] = False  # the free word only
    out = layout.apply(probs, [plan], fixed)
    assert torch.equal(out[0, [0, 2, 3]], probs[0, [0, 2, 3]])
    assert out[0, 1, WHALE] == 0.0 and torch.allclose(out[0, 1].sum(), torch.tensor(1.0))
    assert out[0, 1, THE] > probs[0, 1, THE]


def test_a_float64_prediction_is_projected_in_float64():
    layout = WordLayout([WordCount(max=2)], TOKENIZER, start=0, length=3)
    probs = random_probs(1, 3, seed=13).double()
    probs[0, 1] = 0.0
    probs[0, 1, WHALE] = 1.0  # nothing on punctuation
    plan = Plan(pinned={2: TOKENIZER.eos_id}, roles={0: WORD, 1: PUNCT}, end=None)
    out = layout.apply(probs, [plan], torch.zeros(1, 3, dtype=torch.bool))
    assert out.dtype == torch.float64
    punct = layout.classes[PUNCT].double()
    assert torch.equal(out[0, 1], punct / punct.sum())
    assert abs(float(out[0, 0].sum()) - 1.0) < 1e-12


# --------------------------------------------------------------------------------------------
# More of what the constructor gathers and refuses


def test_the_tightest_sentence_bounds_hold_whatever_the_order_and_may_meet():
    layout = WordLayout([SentenceCount(max=2), SentenceCount(max=3)], TOKENIZER, 0, 8)
    assert layout.sentence_bounds == (0, 2)
    # At least two and at most two: exactly two, not a contradiction.
    layout = WordLayout([SentenceCount(min=2), SentenceCount(max=2)], TOKENIZER, 0, 8)
    assert layout.sentence_bounds == (2, 2)


def test_a_placed_word_is_one_word_under_the_constraints_own_rules():
    # COLLIE's rules read "cannot" as two words; the plain rules as one.
    message = refused([WordAt(position=1, word="cannot", scheme="collie")])
    assert message == (
        "'cannot' is not one word under the collie word rules (it reads as ['can', 'not'])"
    )
    WordLayout([WordAt(position=1, word="cannot")], TOKENIZER, 0, 4)


def test_excluding_a_word_no_single_token_spells_leaves_the_free_words_as_they_are():
    layout = WordLayout([Exclude(words=("harpooneer",))], TOKENIZER, 0, 4)
    classes, _ = token_classes(TOKENIZER, layout.grammar)
    for role in layout.grammar.word_roles:
        assert torch.equal(layout.classes[role], classes[role])


def test_without_constraints_the_continuation_starts_as_a_text_does():
    layout = WordLayout([], TOKENIZER, 0, 3)
    assert layout.first_state == layout.grammar.start_state("")
    assert layout.first_state != layout.grammar.start_state("Call me")


def test_a_first_word_that_cannot_fit_is_checked_with_a_free_count():
    # "harpooneer" first and last (one placement) takes four of five tokens: no room for two
    # sentences, whatever the number of words (one or two, checked at once).
    constraints = [
        WordAt(position=1, word="harpooneer"),
        WordAt(position=-1, word="harpooneer"),
        SentenceCount(min=2),
    ]
    layout = WordLayout(constraints[:2], TOKENIZER, 0, 5)
    assert layout.word_counts() == [1, 2]
    message = refused(constraints, length=5)
    assert message == "no continuation of 5 tokens satisfies the lexical constraints together"


def test_a_word_count_bound_is_checked_with_positions_from_the_end():
    # Three sentences need three words: "A. B. whale" fits eight tokens, two words do not.
    constraints = [WordAt(position=-1, word="whale"), SentenceCount(min=3)]
    WordLayout([*constraints, WordCount(max=3)], TOKENIZER, 0, 8)
    message = refused([*constraints, WordCount(max=2)], length=8)
    assert message == "no continuation of 8 tokens satisfies the lexical constraints together"


def test_a_last_word_that_fills_the_continuation_is_accepted_and_placed():
    layout = WordLayout([WordAt(position=-1, word="harpooneer")], TOKENIZER, 0, 4)
    assert layout.word_counts() == [1]
    (plan,) = draw(layout, random_probs(1, 4, seed=5))
    assert plan.placed == [[0, 1, 2, 3]] and plan.words == [] and plan.end is None
    assert plan.pinned == dict(enumerate(HARPOONEER))
    layout = WordLayout([WordAt(position=-1, word="whale")], TOKENIZER, 0, 1)
    (plan,) = draw(layout, random_probs(1, 1, seed=5))
    assert plan.pinned == {0: WHALE}


# --------------------------------------------------------------------------------------------
# More of drawing layouts


def test_the_waiting_tokens_spell_the_include_words_not_yet_placed():
    layout = WordLayout([Include(words=("whale", "ship"))], TOKENIZER, 0, 6)
    whale, ship = layout.spellings["whale"], layout.spellings["ship"]
    assert WHALE in whale and SHIP in ship and not set(whale) & set(ship)
    assert sorted(layout.waiting_tokens(0)) == sorted(whale + ship)
    assert sorted(layout.waiting_tokens(1)) == sorted(ship)  # "whale" placed
    assert sorted(layout.waiting_tokens(2)) == sorted(whale)  # "ship" placed
    assert layout.waiting_tokens(3) == []


def test_each_sample_draws_one_of_two_word_counts_and_keeps_it():
    constraints = [WordAt(position=-1, word="whale"), WordCount(max=2)]
    layout = WordLayout(constraints, TOKENIZER, start=0, length=4)
    assert layout.word_counts() == [1, 2]
    probs = random_probs(8, 4, seed=21)
    plans = draw(layout, probs)
    counts = list(layout.counts)
    assert len(counts) == 8 and set(counts) == {1, 2}
    for b, plan in enumerate(plans):
        assert len(plan.words) + len(plan.placed) == counts[b], (b, plan)
        assert plan.pinned[max(p for span in plan.placed for p in span)] == WHALE


def test_layouts_are_drawn_with_each_samples_own_generator():
    """The same seeds draw the same layouts, whatever the global random state."""
    probs = random_probs(4, 8, seed=31)

    def plans(global_seed: int, seed: int) -> list[Plan]:
        layout = WordLayout([WordCount(max=8)], TOKENIZER, start=0, length=8)
        with torch.random.fork_rng():
            torch.manual_seed(global_seed)
            return draw(layout, probs, seed=seed)

    assert plans(1, seed=0) == plans(2, seed=0)
    assert plans(1, seed=0) != plans(1, seed=100)
