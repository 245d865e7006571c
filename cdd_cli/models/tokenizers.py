"""Tokenizers saved beside a checkpoint (`tokenizer.json`).

The molecule tokenizers follow the UDLM QM9 layout: specials `<bos>`=0, `<eos>`=1, `<mask>`=2,
`<pad>`=3, `<unk>`=4, then the language's tokens from id 5; sequences are `<bos> tokens <eos>
<pad>...`. The language is SMILES (the regex tokens of UDLM) or SELFIES; both decode to SMILES.

The GPT-2 tokenizer is OpenAI's byte-level BPE (files vendored in `assets/gpt2-tokenizer`) with
MDLM's mask token appended: ids 0..50256 are GPT-2's (`<|endoftext|>` = 50256 is both BOS and
EOS), 50257 is `<mask>`, V = 50258. A checkpoint without `tokenizer.json` whose vocabulary is
50,258 (e.g. `kuleshov-group/mdlm-owt`) uses it, as MDLM does.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from pathlib import Path

import selfies
import torch
from tokenizers import ByteLevelBPETokenizer
from tokenizers import Tokenizer as BPE

from cdd_cli.diffusion.sampler import Layout
from cdd_cli.errors import InputError
from cdd_cli.models.files import regular_file
from cdd_cli.models.smiles_syntax import SmilesSyntax

GPT2_FILES = Path(__file__).resolve().parent.parent / "assets" / "gpt2-tokenizer"
GPT2_VOCAB_SIZE = 50258  # 50,257 GPT-2 tokens + the mask

SPECIALS = ("<bos>", "<eos>", "<mask>", "<pad>", "<unk>")

# The regex SMILES tokenizer of Schwaller et al. (Molecular Transformer), as used by UDLM.
SMILES_PATTERN = re.compile(
    r"(\[[^\]]+]|Br?|Cl?|N|O|S|P|F|I|b|c|n|o|s|p|\(|\)|\.|=|#|-|\+|\\|/|:|~|@|\?|>|\*|\$|%[0-9]{2}|[0-9])"
)


def split_smiles(smiles: str) -> list[str]:
    return SMILES_PATTERN.findall(smiles)


class MoleculeTokenizer:
    """What every molecule tokenizer shares: the UDLM layout (five specials, then the
    language's tokens from id 5) and `<bos> tokens <eos> <pad>...` rows. A subclass says how
    a SMILES splits into its tokens (`split`) and how tokens read back as SMILES
    (`tokens_to_smiles`)."""

    kind = ""

    def __init__(self, tokens: Iterable[str]):
        self.vocab = list(SPECIALS) + [t for t in tokens if t not in SPECIALS]
        self.index = {t: i for i, t in enumerate(self.vocab)}
        self.bos_id, self.eos_id, self.mask_id, self.pad_id, self.unk_id = range(5)

    def split(self, smiles: str) -> list[str] | None:
        """The tokens of `smiles` (None: this language cannot write it)."""
        raise NotImplementedError

    def tokens_to_smiles(self, tokens: list[str]) -> str:
        raise NotImplementedError

    @classmethod
    def from_corpus(cls, smiles: Iterable[str]) -> MoleculeTokenizer:
        return cls.from_token_lists(cls([]).split(s) for s in smiles)

    @classmethod
    def from_token_lists(cls, token_lists: Iterable[list[str] | None]) -> MoleculeTokenizer:
        """The tokens of a corpus already split (None: a molecule the language cannot write)."""
        counts: dict[str, int] = {}
        for tokens in token_lists:
            for t in tokens or ():
                counts[t] = counts.get(t, 0) + 1
        # Most frequent first, ties by name, so the vocabulary is stable for one corpus.
        return cls(sorted(counts, key=lambda t: (-counts[t], t)))

    def __len__(self) -> int:
        return len(self.vocab)

    def token_texts(self) -> list[str]:
        """Each id's token, in id order (the specials as their names)."""
        return list(self.vocab)

    def encode(self, smiles: str, length: int) -> list[int] | None:
        """`<bos> tokens <eos> <pad>...` of exactly `length` ids, or None if it does not fit
        (or the language cannot write it)."""
        return self.row_of(self.split(smiles), length)

    def row_of(self, tokens: list[str] | None, length: int) -> list[int] | None:
        if tokens is None or len(tokens) + 2 > length:
            return None
        ids = [self.bos_id, *(self.index.get(t, self.unk_id) for t in tokens), self.eos_id]
        return ids + [self.pad_id] * (length - len(ids))

    def decode(self, ids: Iterable[int]) -> str:
        """The SMILES of the tokens between `<bos>` and the first `<eos>`; other specials
        are dropped.

        A `<bos>` in the middle or an `<unk>` makes the molecule unreadable, so they decode to
        a character RDKit rejects rather than silently vanishing.
        """
        text = self.text_ids(ids)
        if any(i in (self.bos_id, self.unk_id) for i in text):
            return "?"
        return self.tokens_to_smiles([self.vocab[i] for i in text])

    def text_ids(self, ids: Iterable[int]) -> list[int]:
        """The ids a molecule is read from: those before the first `<eos>`, less a leading
        `<bos>`, padding and masks (a stray `<bos>` or `<unk>` stays: it is unreadable)."""
        out = []
        for position, i in enumerate(ids):
            i = int(i)
            if i == self.eos_id:
                break
            if (i == self.bos_id and position == 0) or i in (self.pad_id, self.mask_id):
                continue
            out.append(i)
        return out

    def syntax(self) -> SmilesSyntax | None:
        """The automaton of this language's well-formed strings, where it has one."""
        return None

    def layout(self) -> Layout | None:
        """Where the sampler may draw the specials (`Layout`); None: anywhere (SMILES, whose
        well-formed decoding reads a stray special as no molecule, and whose shipped models'
        records stay as they were)."""
        return None

    def readable(self, ids: Iterable[int]) -> bool:
        """Whether RDKit can parse `decode(ids)` at all (False: no judge can accept it)."""
        return self.decode(ids) not in ("", "?")

    def decode_batch(self, ids: torch.Tensor) -> list[str]:
        return [self.decode(row) for row in ids.tolist()]

    def text_end(self, ids: list[int]) -> int:
        """Where the text of `ids` ends: its first `<eos>` (nothing after it is read), or
        `len(ids)` when there is none."""
        return ids.index(self.eos_id) if self.eos_id in ids else len(ids)

    def canonical_ids(self, ids: list[int]) -> list[int]:
        """The ids of the molecule `ids` decode to, laid out as training data is (`<bos>`,
        tokens, `<eos>`, padding), e.g. an early `<eos>` pads everything after it; `ids`
        unchanged when that layout does not fit their length.

        Computed on ids, not through the text (the search calls this for every candidate).
        For SMILES it equals `encode(decode(ids))` because every vocabulary token is one whole
        match of the SMILES pattern and no two matches merge when written side by side
        (`B`/`C` take an `r`/`l` that is never a token of its own; brackets and `%nn` are
        closed). For SELFIES two layouts that differ read as different molecules or the same
        one; equal layouts always read the same, which is all the search needs.
        """
        unreadable = self.index.get("?", self.unk_id)  # what decode's "?" encodes to
        stray = (self.bos_id, self.unk_id)
        tokens = [unreadable if i in stray else i for i in self.text_ids(ids)]
        if len(tokens) + 2 > len(ids):
            return ids
        return [self.bos_id, *tokens, self.eos_id] + [self.pad_id] * (len(ids) - len(tokens) - 2)

    def save(self, directory: Path) -> None:
        payload = {"type": self.kind, "vocab": self.vocab}
        (Path(directory) / "tokenizer.json").write_text(json.dumps(payload, indent=1) + "\n")


class SmilesTokenizer(MoleculeTokenizer):
    kind = "smiles-regex"

    def __init__(self, tokens: Iterable[str]):
        super().__init__(tokens)
        self.automaton: SmilesSyntax | None = None

    def split(self, smiles: str) -> list[str]:
        return split_smiles(smiles)

    def tokens_to_smiles(self, tokens: list[str]) -> str:
        return "".join(tokens)

    def decode(self, ids: Iterable[int]) -> str:
        # One "?" where the unreadable token stood (the rest kept), as this tokenizer always
        # wrote it: a record shows where a molecule broke.
        unreadable = (self.bos_id, self.unk_id)
        return "".join("?" if i in unreadable else self.vocab[i] for i in self.text_ids(ids))

    def syntax(self) -> SmilesSyntax:
        """The automaton of well-formed SMILES over this vocabulary (for the sampler and
        `readable`): one per tokenizer, its transitions cached as they are reached."""
        if self.automaton is None:
            self.automaton = SmilesSyntax(self.vocab)
        return self.automaton

    def readable(self, ids: Iterable[int]) -> bool:
        """Whether `decode(ids)` is well-formed SMILES (`SmilesSyntax.reads`): False means
        RDKit cannot parse it, so no judge of a molecule can accept it."""
        syntax = self.syntax()
        text = self.text_ids(ids)
        if any(i in (self.bos_id, self.unk_id) for i in text):
            return False  # decoded as "?"
        classes = [syntax.token_class[i] for i in text]
        return syntax.reads(classes)


class SelfiesTokenizer(MoleculeTokenizer):
    """SELFIES (Krenn et al. 2020, the `selfies` package): every string of its tokens that
    holds an atom reads as a valid molecule, so a model over them writes valid molecules
    whatever it draws (ring and branch tokens alone read as nothing; a special token out of
    place as "?", which `layout` keeps the sampler from drawing); records still carry the
    SMILES the tokens read as. RDKit's canonical SMILES are written by `selfies.encoder` in
    order, so a training molecule's tokens follow its SMILES."""

    kind = "selfies"

    def split(self, smiles: str) -> list[str] | None:
        try:
            return list(selfies.split_selfies(selfies.encoder(smiles)))
        except selfies.EncoderError:
            return None  # e.g. a valence SELFIES' default constraints do not allow

    def tokens_to_smiles(self, tokens: list[str]) -> str:
        return selfies_to_smiles("".join(tokens))

    def layout(self) -> Layout:
        # With no syntax to read a stray `<bos>` or `<unk>`, each was a molecule lost (at
        # MOSES step 500, 21 of 256 samples).
        return Layout(self.bos_id, (self.unk_id,))


@functools.lru_cache(maxsize=1 << 16)
def selfies_to_smiles(text: str) -> str:
    """The SMILES of a SELFIES string, cached: decoding is pure Python (about 0.5 ms a
    drug-sized molecule), and the judges and searches read the same sequences again."""
    try:
        return selfies.decoder(text)
    except selfies.DecoderError:
        return "?"


class TextTokenizer:
    """A byte-level BPE (`tokenizers`) with the diffusion model's mask and end-of-text ids."""

    kind = "text"

    def __init__(self, bpe, eos_id: int, mask_id: int, size: int):
        self.bpe = bpe
        self.eos_id = self.bos_id = eos_id
        self.mask_id = mask_id
        self.size = size

    @functools.cached_property
    def longest_token_bytes(self) -> int:
        """A text of more bytes than this x N cannot be N tokens or fewer (byte-level: one
        character of a token's text is one byte)."""
        return max(len(t) for t in self.bpe.get_vocab())

    def __len__(self) -> int:
        return self.size

    def encode(self, text: str) -> list[int]:
        return self.bpe.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.bpe.encode_batch(texts, add_special_tokens=False)]

    def encode_padded(self, texts: list[str], max_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Ids [N, W] padded with EOS and the mask of real tokens, for classifiers; texts are
        cut to `max_tokens`, and an empty text keeps one EOS so every row has a token."""
        # One text at a time: the judge's batches are small (a sampler batch at each step),
        # where the batch encoder's thread pool and a tensor per row cost twice the encoding.
        rows = [self.encode(text)[:max_tokens] or [self.eos_id] for text in texts]
        lengths = torch.tensor([len(r) for r in rows])
        width = int(lengths.max())
        ids = torch.tensor([r + [self.eos_id] * (width - len(r)) for r in rows])
        return ids, torch.arange(width) < lengths[:, None]

    def token_text(self, token_id: int) -> str:
        return "<mask>" if token_id == self.mask_id else self.bpe.decode([token_id])

    def token_texts(self) -> list[str]:
        """Each id's text as it reads inside a text, in id order, from its bytes (a piece of a
        character reads as U+FFFD; specials as the tokenizer decodes them). Not `decode([id])`:
        a SentencePiece-style decoder drops the space of a word-initial "▁the" at a text's
        start, which would make every word token read as a piece of a word."""
        return [
            self.token_text(i) if raw is None else raw.decode("utf-8", errors="replace")
            for i, raw in enumerate(self.token_bytes())
        ]

    def token_bytes(self) -> list[bytes | None]:
        """Each id's bytes, in id order (None: a special token, the mask or end-of-text,
        never written): byte-level BPE (GPT-2, SmolLM2, Qwen) through its byte alphabet,
        SentencePiece-style pieces through `▁` and their `<0xNN>` byte fallback."""
        inner = getattr(self.bpe, "_tokenizer", self.bpe)  # the implementations' core
        described = json.loads(inner.to_str())
        special = {t["id"] for t in described.get("added_tokens") or [] if t.get("special")}
        special |= {self.eos_id, self.mask_id}
        byte_level = "ByteLevel" in json.dumps(described.get("decoder"))
        alphabet = byte_alphabet()
        out: list[bytes | None] = [None] * len(self)
        for text, i in self.bpe.get_vocab().items():
            if i in special or i >= len(out):
                continue
            if byte_level:
                if all(c in alphabet for c in text):
                    out[i] = bytes(alphabet[c] for c in text)
            elif len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
                out[i] = bytes([int(text[3:5], 16)])  # SentencePiece's byte fallback
            else:
                out[i] = text.replace("\u2581", " ").encode()
        return out

    def decode(self, ids: Iterable[int]) -> str:
        """The text up to the first end-of-text token; masks (none after sampling) are dropped.

        Text after an end-of-text token would belong to another document, so it is not shown.
        """
        out = []
        for i in ids:
            i = int(i)
            if i == self.eos_id:
                break
            if i != self.mask_id:
                out.append(i)
        return self.bpe.decode(out)

    def syntax(self) -> None:
        """Text has no syntax the sampler enforces."""
        return None

    def decode_batch(self, ids: torch.Tensor) -> list[str]:
        return [self.decode(row) for row in ids.tolist()]

    def same_vocabulary(self, other: object) -> bool:
        """Whether ids mean the same text in both (a surrogate trained on one reads the other)."""
        if not isinstance(other, TextTokenizer):
            return False
        if other is self or (type(self) is Gpt2Tokenizer and type(other) is Gpt2Tokenizer):
            return True
        return (len(self), self.eos_id, self.mask_id) == (
            len(other),
            other.eos_id,
            other.mask_id,
        ) and self.bpe.get_vocab() == other.bpe.get_vocab()


def byte_alphabet() -> dict[str, int]:
    """Byte-level BPE's alphabet (GPT-2's): the printable character that stands for each
    byte in the vocabulary's token strings."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    shifted = [b for b in range(256) if b not in printable]
    table = {chr(b): b for b in printable}
    table.update({chr(256 + k): b for k, b in enumerate(shifted)})
    return table


class Gpt2Tokenizer(TextTokenizer):
    kind = "gpt2-bpe"

    def __init__(self, files: Path = GPT2_FILES):
        bpe = ByteLevelBPETokenizer(str(files / "vocab.json"), str(files / "merges.txt"))
        if bpe.get_vocab_size() != 50257:
            raise InputError(f"{files}: expected the 50,257-token GPT-2 vocabulary")
        super().__init__(bpe, eos_id=50256, mask_id=50257, size=GPT2_VOCAB_SIZE)

    def save(self, directory: Path) -> None:
        payload = {"type": self.kind, "mask_id": self.mask_id}
        (Path(directory) / "tokenizer.json").write_text(json.dumps(payload, indent=1) + "\n")


class FileTokenizer(TextTokenizer):
    """A Hugging Face `tokenizer.json` (the format of the `tokenizers` library), e.g. SmolLM2's;
    its mask and end-of-text ids come from the model's config (`mask_id`, `prefix_id`)."""

    kind = "tokenizers-file"

    def __init__(self, path: Path, eos_id: int, mask_id: int):
        try:
            bpe = BPE.from_file(str(path))
        except Exception as exc:  # the library raises plain Exceptions for bad files
            raise InputError(f"{path}: not a tokenizers file ({str(exc)[:120]})") from None
        size = bpe.get_vocab_size()
        for name, value in (("end-of-text", eos_id), ("mask", mask_id)):
            if not 0 <= value < size:
                raise InputError(f"{path}: {name} id {value} outside the {size:,}-token vocabulary")
        super().__init__(bpe, eos_id=eos_id, mask_id=mask_id, size=size)
        self.path = path

    def save(self, directory: Path) -> None:
        (Path(directory) / "tokenizer.json").write_bytes(self.path.read_bytes())


Tokenizer = MoleculeTokenizer | TextTokenizer


class Continuation:
    """The text of a sequence after its first `keep` ids (a prompt's): what judges read."""

    def __init__(self, tokenizer: Tokenizer, keep: int):
        self.decode, self.keep = tokenizer.decode, keep
        # Where the language has a syntax (SMILES): whether the text can be read at all.
        self.check = tokenizer.readable if isinstance(tokenizer, MoleculeTokenizer) else None

    def __call__(self, ids: list[int]) -> str:
        return self.decode(ids[self.keep :])

    def readable(self, ids: list[int]) -> bool:
        return self.check is None or self.check(ids[self.keep :])


MOLECULE_TOKENIZERS: dict[str, type[MoleculeTokenizer]] = {
    SmilesTokenizer.kind: SmilesTokenizer,
    SelfiesTokenizer.kind: SelfiesTokenizer,
}


def load_tokenizer(
    directory: Path, vocab_size: int | None = None, special: dict | None = None
) -> Tokenizer:
    """The tokenizer beside a checkpoint. `special`: the model config's `prefix_id` (end of
    text) and `mask_id`, which a Hugging Face tokenizers file does not name itself."""
    path = regular_file(Path(directory) / "tokenizer.json", "tokenizer.json")
    if not path.is_file():
        if vocab_size == GPT2_VOCAB_SIZE:
            return Gpt2Tokenizer()  # the MDLM OpenWebText convention
        raise InputError(
            f"{directory}: no tokenizer.json beside the checkpoint, and its vocabulary "
            f"({vocab_size}) is not GPT-2's {GPT2_VOCAB_SIZE}, so its tokenizer is unknown"
        )
    try:
        payload = json.loads(path.read_text())
        if isinstance(payload, dict) and "model" in payload and "version" in payload:
            if not special or not {"prefix_id", "mask_id"} <= special.keys():
                raise InputError(
                    f"{path}: a tokenizers file needs prefix_id and mask_id in config.json"
                )
            return FileTokenizer(path, int(special["prefix_id"]), int(special["mask_id"]))
        kind = payload["type"]
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise InputError(f"{path}: not a cdd tokenizer file ({exc})") from None
    if kind in MOLECULE_TOKENIZERS:
        vocab = payload.get("vocab")
        if not isinstance(vocab, list) or not all(isinstance(t, str) and t for t in vocab):
            raise InputError(f"{path}: 'vocab' must be a list of token strings")
        if len(set(vocab)) != len(vocab):
            twice = sorted({t for t in vocab if vocab.count(t) > 1})
            raise InputError(f"{path}: 'vocab' lists {', '.join(twice[:4])} more than once")
        if list(vocab[:5]) != list(SPECIALS):
            raise InputError(f"{path}: the first five tokens must be {', '.join(SPECIALS)}")
        return MOLECULE_TOKENIZERS[kind](vocab[5:])
    if kind == Gpt2Tokenizer.kind:
        return Gpt2Tokenizer()
    raise InputError(f"{path}: unknown tokenizer type {kind!r}")
