"""The best-first flip search alone: hand-built predictions, judges that keep a log, readers
that read sequences as the tests say."""

from __future__ import annotations

import pytest
import torch

from cdd_cli.projection.search import best_first
from cdd_cli.settings import SearchSettings


def table(*positions: list[float]) -> torch.Tensor:
    """Probabilities [L, V], one row a position."""
    return torch.tensor(positions)


class Log:
    """`accept` with a log of the sequences judged; accepts those in `accepted`."""

    def __init__(self, *accepted: list[int]):
        self.accepted = [list(a) for a in accepted]
        self.calls: list[list[int]] = []

    def __call__(self, ids: list[int]) -> bool:
        self.calls.append(list(ids))
        return ids in self.accepted


class Reader:
    """Reads a sequence as `readings` says (itself where it says nothing; every sequence as
    `everything_as` where given); its text ends at the first `end` token. Counts the calls of
    `text_end`: one for every flip set taken from the queue."""

    def __init__(self, readings=None, end: int = -1, everything_as: list[int] | None = None):
        self.readings: dict[tuple[int, ...], list[int]] = readings or {}
        self.end, self.everything_as = end, everything_as
        self.ends_read = 0

    def canonical_ids(self, ids: list[int]) -> list[int]:
        if self.everything_as is not None:
            return list(self.everything_as)
        return list(self.readings.get(tuple(ids), ids))

    def text_end(self, ids: list[int]) -> int:
        self.ends_read += 1
        return ids.index(self.end) if self.end in ids else len(ids)


def test_a_top_k_past_the_vocabulary_tries_every_other_token_once():
    accept = Log([2])
    result = best_first(
        table([0.5, 0.3, 0.2]), torch.tensor([True]), accept, SearchSettings(top_k=5, max_nodes=100)
    )
    assert result.ids == [2] and result.nodes == 3
    assert accept.calls == [[0], [1], [2]]


def test_top_k_alternatives_of_a_short_sequence_over_a_long_vocabulary():
    # Two positions, six tokens: the accepted token is position 0's third alternative.
    probs = table([0.4, 0.25, 0.15, 0.1, 0.06, 0.04], [0.4, 0.25, 0.15, 0.1, 0.06, 0.04])
    accept = Log([3, 0])
    result = best_first(
        probs, torch.tensor([True, True]), accept, SearchSettings(top_k=3, max_nodes=100)
    )
    assert result.ids == [3, 0]
    assert all(a[0] in (0, 1, 2, 3) and a[1] in (0, 1, 2, 3) for a in accept.calls)


def test_the_queue_is_read_at_most_twenty_times_per_node_of_budget():
    # Ten positions, one alternative each: 1,024 flip sets. Every one reads as the argmax,
    # judged first and only once, so no set after it reaches the judge: the search stops on
    # its 20 x max_nodes queue entries, not on its nodes.
    probs = table(*[[0.5, 0.3, 0.2]] * 10)
    base = [0] * 10
    reader = Reader(everything_as=base)
    accept = Log()
    settings = SearchSettings(top_k=1, max_nodes=2)
    result = best_first(probs, torch.ones(10, dtype=torch.bool), accept, settings, reader)
    assert result.ids is None and result.nodes == 1
    assert accept.calls == [base]
    assert reader.ends_read == 40


def test_a_costly_reading_reached_by_two_flip_sets_is_judged_once():
    # Flips: position 0 to 1 costs 0.1, position 1 to 1 costs 0.12, position 2 to 1 costs 0.5.
    # (1, 0, 0) and (0, 1, 0) both read as (1, 1, 0), which costs 0.22: queued at that cost
    # by the first, and not again by the second.
    probs = table([0.5, 0.4, 0.1], [0.5, 0.38, 0.12], [0.7, 0.2, 0.1])
    reader = Reader({(1, 0, 0): [1, 1, 0], (0, 1, 0): [1, 1, 0]})
    accept = Log()
    settings = SearchSettings(top_k=1, max_nodes=50)
    result = best_first(probs, torch.ones(3, dtype=torch.bool), accept, settings, reader)
    assert result.ids is None and result.nodes == 6
    readings = [[0, 0, 0], [1, 1, 0], [0, 0, 1], [1, 0, 1], [0, 1, 1], [1, 1, 1]]
    assert accept.calls == readings


def test_a_reading_that_moves_a_fixed_token_is_charged_at_movable_positions_only():
    # Position 2 is fixed; (1, 0, 0) reads as (1, 0, 2), moving it (a token after the text's
    # end, say): judged as it stands, at its flip's cost 0.1, before (0, 1, 0) at 0.2, and
    # whatever position 2's token 2 would cost (0.85).
    probs = table([0.5, 0.4, 0.1], [0.5, 0.3, 0.2], [0.9, 0.05, 0.05])
    reader = Reader({(1, 0, 0): [1, 0, 2]})
    accept = Log()
    movable = torch.tensor([True, True, False])
    result = best_first(probs, movable, accept, SearchSettings(top_k=1, max_nodes=100), reader)
    assert result.ids is None
    assert accept.calls == [[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0]]


def test_an_argmax_whose_text_is_empty_is_judged_first():
    # Token 2 ends the text; the argmax starts with it.
    probs = table([0.2, 0.3, 0.5], [0.6, 0.3, 0.1])
    accept = Log([2, 0], [2, 1])
    reader = Reader(end=2)
    result = best_first(
        probs, torch.tensor([True, True]), accept, SearchSettings(max_nodes=100), reader
    )
    assert result.ids == [2, 0] and result.nodes == 1


def test_a_reading_of_another_length_is_an_error():
    reader = Reader({(0, 0): [0]})
    with pytest.raises(ValueError):
        best_first(
            table([0.6, 0.4], [0.6, 0.4]),
            torch.ones(2, dtype=torch.bool),
            Log(),
            SearchSettings(max_nodes=100),
            reader,
        )
