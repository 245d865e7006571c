"""bench/toxicity_fidelity.py: continuations drawn from one law read near 1x their
within-prompt permutation null; continuations nearer the bound (a method off rejection's
law) read far over 2x on the score, not on what is the same."""

from __future__ import annotations

import importlib
import random
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


def test_a_sample_of_the_same_law_reads_near_its_null_and_one_at_the_bound_far():
    sys.path.insert(0, str(BENCH))
    try:
        fidelity = importlib.import_module("toxicity_fidelity")
    finally:
        sys.path.remove(str(BENCH))
    stream = random.Random(0)
    words = ["the", "day", "was", "long", "and", "we", "went", "home"]

    def record(prompt: int, low: float) -> dict:
        text = " ".join(stream.choice(words) for _ in range(stream.randint(4, 9)))
        value = low + stream.random() * (0.5 - low)
        return {"prompt": f"p{prompt}", "text": text, "values": {"toxicity": value}}

    def sample(low: float) -> list[dict]:
        return [record(p, low) for p in range(40) for _ in range(4)]

    reference = sample(0.0)
    same = fidelity.compared(sample(0.0), reference, 50, stream)
    assert all(ratio < 2 for ratio in same.values()), same
    near_bound = fidelity.compared(sample(0.2), reference, 50, stream)
    assert near_bound["ks_toxicity"] > 2 and near_bound["ks_words"] < 2, near_bound
