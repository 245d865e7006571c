"""A regular expression compiled against a model's vocabulary: which token leads from which
state to which, as arrays a dynamic program can read.

The automaton comes from outlines-core (its `Index`: the pattern's byte-level DFA walked with
every token of the vocabulary), chosen over llguidance and xgrammar because it hands out the
whole transition table (`get_transitions`), not only a next-token mask: the projection
(`pattern_layout.py`) needs every (state, token, next state) to run forward over positions.
Building one costs 0.03-0.3 s for a short pattern over GPT-2's 50,257 tokens and grows with the
pattern; the table is cached on disk per (pattern, vocabulary, outlines-core version) as
safetensors, so a second run loads it in milliseconds.

Tokens are read as the bytes they stand for (`TextTokenizer.token_bytes`), never as their
display text: a token holding half of a UTF-8 character is still a valid step of the byte
DFA.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from importlib import metadata

import torch
from outlines_core import Index, Vocabulary
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from cdd_cli.constraints.pattern_limits import pattern_problem
from cdd_cli.errors import InputError
from cdd_cli.evaluate.reference import cache_dir
from cdd_cli.models.tokenizers import TextTokenizer


@dataclass(frozen=True)
class TokenAutomaton:
    """A DFA over token ids: state 0 is the start; `src[k] --token[k]--> dst[k]`; the
    end-of-text token is left out (the projection adds it where `final` allows an end)."""

    src: torch.Tensor  # [T] int64
    token: torch.Tensor  # [T] int64
    dst: torch.Tensor  # [T] int64
    final: torch.Tensor  # [S] bool
    states: int

    def accepts(self, ids: list[int]) -> bool:
        """Whether these tokens (no end-of-text) spell a match, walking the table."""
        table = self.table
        state = 0
        for t in ids:
            state = table.get((state, t))
            if state is None:
                return False
        return bool(self.final[state])

    @functools.cached_property
    def table(self) -> dict[tuple[int, int], int]:
        return {
            (s, t): d
            for s, t, d in zip(
                self.src.tolist(), self.token.tolist(), self.dst.tolist(), strict=True
            )
        }

    def shortest(self) -> int | None:
        """The fewest tokens that spell a match (None: nothing does)."""
        edges: dict[int, set[int]] = {}
        for s, d in zip(self.src.tolist(), self.dst.tolist(), strict=True):
            edges.setdefault(s, set()).add(d)
        # Sets, of the final states and of each step's: indexing the tensor state by state,
        # and a frontier that listed a state once per edge into it, took minutes for a{1000}.
        final = set(torch.nonzero(self.final).flatten().tolist())
        seen, frontier, n = {0}, {0}, 0
        while frontier:
            if not final.isdisjoint(frontier):
                return n
            frontier = {d for s in frontier for d in edges.get(s, ()) if d not in seen}
            seen |= frontier
            n += 1
        return None


@functools.lru_cache(maxsize=8)
def _vocabulary(tokenizer: TextTokenizer) -> tuple[object, str]:
    """outlines-core's Vocabulary for `tokenizer`, and a digest of what it holds."""
    pieces: dict[bytes, list[int]] = {}
    for i, b in enumerate(tokenizer.token_bytes()):
        if b:
            pieces.setdefault(b, []).append(i)
    digest = hashlib.sha256(
        repr(sorted((b, ids) for b, ids in pieces.items())).encode()
    ).hexdigest()[:16]
    return Vocabulary(tokenizer.eos_id, pieces), digest


@functools.lru_cache(maxsize=32)
def compile_pattern(pattern: str, tokenizer: TextTokenizer) -> TokenAutomaton:
    """The token automaton of `pattern` (outlines-core's regex syntax, the Rust `regex`
    crate's: no look-around or back-references), loaded from the cache where it was built
    before. InputError where the library cannot compile the pattern."""
    # The last gate before the library builds it (from a spec, the entry's check ran this):
    # a pattern past the limits would hold the process for minutes or fill its memory.
    problem = pattern_problem(pattern, backtracked=False)
    if problem:
        raise InputError(f"the pattern cannot be compiled: {problem}")
    vocabulary, digest = _vocabulary(tokenizer)
    version = metadata.version("outlines_core")
    key = hashlib.sha256(f"{version}\0{digest}\0{pattern}".encode()).hexdigest()[:24]
    path = cache_dir() / "automata" / f"{key}.safetensors"
    if path.is_file():
        try:
            return _automaton(load_file(str(path)))
        except (OSError, ValueError, KeyError, SafetensorError):
            pass  # a torn or foreign file: built again below
    try:
        index = Index(pattern, vocabulary)
    except (ValueError, RuntimeError, TypeError) as exc:
        raise InputError(
            f"the pattern cannot be compiled: {str(exc).splitlines()[0][:160]}"
        ) from None
    arrays = _arrays(index, tokenizer.eos_id)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        save_file(arrays, str(partial))
        partial.replace(path)  # whole or not at all: a reader never sees half a table
    except OSError:
        pass  # a read-only cache costs the next run the build, nothing else
    return _automaton(arrays)


def _arrays(index, eos_id: int) -> dict[str, torch.Tensor]:
    """outlines-core's transitions renumbered from 0 (the start) as int64 arrays."""
    transitions = index.get_transitions()
    start = index.get_initial_state()
    finals = index.get_final_states()
    names = {start: 0}
    for s in sorted(
        set(transitions) | set(finals) | {d for m in transitions.values() for d in m.values()}
    ):
        names.setdefault(s, len(names))
    rows = [
        (names[s], t, names[d])
        for s, moves in transitions.items()
        for t, d in moves.items()
        if t != eos_id
    ]
    table = torch.tensor(rows, dtype=torch.int64).reshape(-1, 3)
    final = torch.zeros(len(names), dtype=torch.bool)
    final[[names[s] for s in finals]] = True
    return {
        "src": table[:, 0].contiguous(),
        "token": table[:, 1].contiguous(),
        "dst": table[:, 2].contiguous(),
        "final": final,
    }


def _automaton(arrays: dict[str, torch.Tensor]) -> TokenAutomaton:
    return TokenAutomaton(
        arrays["src"], arrays["token"], arrays["dst"], arrays["final"], len(arrays["final"])
    )
