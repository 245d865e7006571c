"""Tokenizers saved beside a checkpoint (`tokenizer.json`).

The SMILES tokenizer follows the UDLM QM9 layout: specials `<bos>`=0, `<eos>`=1, `<mask>`=2,
`<pad>`=3, `<unk>`=4, then SMILES tokens from id 5; sequences are `<bos> smiles <eos> <pad>...`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

import torch

from cdd_cli.errors import InputError

SPECIALS = ("<bos>", "<eos>", "<mask>", "<pad>", "<unk>")

# The regex SMILES tokenizer of Schwaller et al. (Molecular Transformer), as used by UDLM.
SMILES_PATTERN = re.compile(
    r"(\[[^\]]+]|Br?|Cl?|N|O|S|P|F|I|b|c|n|o|s|p|\(|\)|\.|=|#|-|\+|\\|/|:|~|@|\?|>|\*|\$|%[0-9]{2}|[0-9])"
)


def split_smiles(smiles: str) -> list[str]:
    return SMILES_PATTERN.findall(smiles)


class SmilesTokenizer:
    kind = "smiles-regex"

    def __init__(self, tokens: Iterable[str]):
        self.vocab = list(SPECIALS) + [t for t in tokens if t not in SPECIALS]
        self.index = {t: i for i, t in enumerate(self.vocab)}
        self.bos_id, self.eos_id, self.mask_id, self.pad_id, self.unk_id = range(5)

    @classmethod
    def from_corpus(cls, smiles: Iterable[str]) -> SmilesTokenizer:
        counts: dict[str, int] = {}
        for s in smiles:
            for t in split_smiles(s):
                counts[t] = counts.get(t, 0) + 1
        # Most frequent first, ties by name, so the vocabulary is stable for one corpus.
        return cls(sorted(counts, key=lambda t: (-counts[t], t)))

    def __len__(self) -> int:
        return len(self.vocab)

    def encode(self, smiles: str, length: int) -> list[int] | None:
        """`<bos> tokens <eos> <pad>...` of exactly `length` ids, or None if it does not fit."""
        ids = [self.index.get(t, self.unk_id) for t in split_smiles(smiles)]
        if len(ids) + 2 > length:
            return None
        ids = [self.bos_id, *ids, self.eos_id]
        return ids + [self.pad_id] * (length - len(ids))

    def decode(self, ids: Iterable[int]) -> str:
        """Text between `<bos>` and the first `<eos>`; other specials are dropped.

        A `<bos>` in the middle or an `<unk>` makes the molecule unreadable, so they decode to
        a character RDKit rejects rather than silently vanishing.
        """
        out = []
        for position, i in enumerate(ids):
            i = int(i)
            if i == self.eos_id:
                break
            if i == self.bos_id and position == 0:
                continue
            if i in (self.pad_id, self.mask_id):
                continue
            if i in (self.bos_id, self.unk_id):
                out.append("?")
                continue
            out.append(self.vocab[i])
        return "".join(out)

    def decode_batch(self, ids: torch.Tensor) -> list[str]:
        return [self.decode(row) for row in ids.tolist()]

    def save(self, directory: Path) -> None:
        payload = {"type": self.kind, "vocab": self.vocab}
        (Path(directory) / "tokenizer.json").write_text(json.dumps(payload, indent=1) + "\n")


def load_tokenizer(directory: Path) -> SmilesTokenizer:
    path = Path(directory) / "tokenizer.json"
    if not path.is_file():
        raise InputError(f"{directory}: no tokenizer.json beside the checkpoint")
    try:
        payload = json.loads(path.read_text())
        kind = payload["type"]
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{path}: not a cdd tokenizer file ({exc})") from None
    if kind == SmilesTokenizer.kind:
        vocab = payload["vocab"]
        if list(vocab[:5]) != list(SPECIALS):
            raise InputError(f"{path}: the first five tokens must be {', '.join(SPECIALS)}")
        return SmilesTokenizer(vocab[5:])
    raise InputError(f"{path}: unknown tokenizer type {kind!r}")
