"""Text templates for `cdd generate --template`: fixed text kept exactly, blanks drawn.

    Dear {name:1-3}, thank you for {10-20}.

A blank is `{LOW-HIGH}` or `{N}` tokens of the model's tokenizer (tokens, not words), with an
optional name before a colon (`{name:1-3}`); unnamed blanks are named by their number among
the blanks, from 1. `{{` and `}}` write a brace. Each blank's length is drawn once per run
from the run's seed (`blank_lengths`): every sample of a run has the same layout.

Each fixed part is tokenised on its own, exactly as written, so the decoded text holds it
exactly whatever its neighbours; a space at the end of a fixed part is a token of its own
there, where the tokenizer would join it to the next word (write `Dear{name:1-3}` to leave
the space to the blank). The text is each part's decoding in turn, so an end-of-text token
drawn in a blank ends that blank's fill only.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass

from cdd_cli.errors import InputError

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
RANGE = re.compile(r"(\d+)(?:-(\d+))?")
MAX_TEMPLATE_CHARS = 100_000


@dataclass(frozen=True)
class Blank:
    name: str
    low: int  # tokens, at least
    high: int  # tokens, at most


@dataclass(frozen=True)
class Template:
    """A template read: fixed texts around its blanks (`len(fixed) == len(blanks) + 1`; a
    fixed text may be empty)."""

    source: str
    fixed: tuple[str, ...]
    blanks: tuple[Blank, ...]

    def blank(self, name: str) -> int:
        """The index of the blank called `name`, or numbered so (from 1)."""
        for k, b in enumerate(self.blanks):
            if b.name == name:
                return k
        if name.isdigit() and 1 <= int(name) <= len(self.blanks):
            return int(name) - 1
        names = ", ".join(b.name for b in self.blanks)
        raise InputError(f"the template has no blank '{name}' (its blanks: {names})")


def parse_template(source: str) -> Template:
    """The template `source` says (InputError, one line, for an empty one, one without a
    blank, an unclosed or stray brace, a malformed range or a name given twice)."""
    if not source.strip():
        raise InputError("--template: the template is empty")
    if len(source) > MAX_TEMPLATE_CHARS:
        raise InputError(f"--template: longer than {MAX_TEMPLATE_CHARS:,} characters")
    fixed, blanks, part, k = [], [], [], 0
    while k < len(source):
        char = source[k]
        if source.startswith(("{{", "}}"), k):
            part.append(char)
            k += 2
        elif char == "}":
            raise InputError(f"--template: '}}' at character {k + 1} closes no blank (write }}}})")
        elif char == "{":
            end = source.find("}", k)
            if end < 0:
                raise InputError(f"--template: the blank at character {k + 1} is not closed")
            blanks.append(read_blank(source[k + 1 : end], len(blanks) + 1, k + 1))
            fixed.append("".join(part))
            part, k = [], end + 1
        else:
            part.append(char)
            k += 1
    fixed.append("".join(part))
    if not blanks:
        raise InputError("--template: no blank to fill (write one as {LOW-HIGH} tokens)")
    names = [b.name for b in blanks]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InputError(f"--template: blank name {twice[0]!r} is given twice")
    return Template(source, tuple(fixed), tuple(blanks))


def read_blank(inside: str, number: int, where: int) -> Blank:
    """A blank's `NAME:LOW-HIGH`, `LOW-HIGH` or `N` (tokens)."""
    where_text = f"--template: blank {number} (character {where})"
    name, colon, length = inside.rpartition(":")
    name = name.strip()
    if colon and not name:
        raise InputError(
            f"{where_text}: the name before ':' is empty (name it, or write {{{length.strip()}}} "
            "for an unnamed blank)"
        )
    if colon and not NAME.fullmatch(name):
        raise InputError(
            f"{where_text}: the name {name!r} is not a name (letters, digits and _, not first "
            "a digit)"
        )
    found = RANGE.fullmatch(length.strip())
    if found is None:
        raise InputError(
            f"{where_text}: {{{inside}}} is not {{LOW-HIGH}}, {{N}} or {{NAME:LOW-HIGH}} "
            "(token counts)"
        )
    low = int(found[1])
    high = int(found[2]) if found[2] is not None else low
    if low < 1:
        raise InputError(f"{where_text}: a blank takes at least 1 token, not {low}")
    if high < low:
        raise InputError(f"{where_text}: {low}-{high} is not a range (LOW must not exceed HIGH)")
    return Blank(name or str(number), low, high)


def tokens(count: int) -> str:
    """`count` tokens, in words ("1 token", "3 tokens")."""
    return f"{count} token" if count == 1 else f"{count} tokens"


def blank_lengths(template: Template, seed: int) -> tuple[int, ...]:
    """Each blank's length in tokens, drawn uniformly in its range once per run from `seed`
    (its own stream: the same at any batch size, shard or sample)."""
    stream = random.Random(f"cdd-template/{seed}")
    return tuple(stream.randint(b.low, b.high) for b in template.blanks)


@dataclass(frozen=True)
class Layout:
    """A template in token positions: its fixed parts' ids and each blank's span."""

    template: Template
    fixed_ids: tuple[tuple[int, ...], ...]
    lengths: tuple[int, ...]  # each blank's tokens

    @property
    def segments(self) -> list[tuple[int, int, bool]]:
        """(start, end, kept) of each part in order: fixed, blank, fixed, ..., fixed."""
        out, start = [], 0
        for k, ids in enumerate(self.fixed_ids):
            out.append((start, start + len(ids), True))
            start += len(ids)
            if k < len(self.lengths):
                out.append((start, start + self.lengths[k], False))
                start += self.lengths[k]
        return out

    @property
    def length(self) -> int:
        return sum(map(len, self.fixed_ids)) + sum(self.lengths)

    def span(self, blank: int) -> tuple[int, int]:
        """Blank `blank`'s token positions, start and end."""
        return self.segments[2 * blank + 1][:2]

    def ids_and_kept(self) -> tuple[list[int], list[bool]]:
        """The canvas's ids (0 in the blanks) and which are kept (the fixed parts')."""
        ids: list[int] = []
        kept: list[bool] = []
        for k, fixed in enumerate(self.fixed_ids):
            ids += fixed
            kept += [True] * len(fixed)
            if k < len(self.lengths):
                ids += [0] * self.lengths[k]
                kept += [False] * self.lengths[k]
        return ids, kept

    def holds_fixed(self, text: str) -> bool:
        """Whether `text` holds the fixed parts, in order, exactly as written (with anything
        between them): a string check of the text alone, whatever made it."""
        pattern = "(?:.*?)".join(re.escape(part) for part in self.template.fixed)
        return re.fullmatch(pattern, text, re.DOTALL) is not None

    def fills(self, text: FilledTemplate) -> dict[str, str]:
        """Each blank's fill by name: the decoding of its own token positions."""
        return {b.name: fill for b, fill in zip(self.template.blanks, text.fills, strict=True)}


def lay_out(
    template: Template, encode: Callable[[str], list[int]], lengths: tuple[int, ...]
) -> Layout:
    """`template` with its fixed parts tokenised each on its own and its blanks `lengths`
    tokens long."""
    return Layout(template, tuple(tuple(encode(part)) for part in template.fixed), lengths)


class FilledTemplate(str):
    """A template's text as drawn, carrying each blank's fill (`fills`, in blank order): the
    decoding of that blank's own token positions. The text alone cannot say where one blank
    ends and the next begins; the positions can."""

    fills: tuple[str, ...]

    def __new__(cls, text: str, fills: tuple[str, ...] = ()) -> FilledTemplate:
        made = super().__new__(cls, text)
        made.fills = fills
        return made


class TemplateText:
    """The text of a sequence laid out by `layout`: each part decoded on its own, in turn
    (an end-of-text token ends its own part); what judges read and records show."""

    def __init__(self, layout: Layout, decode: Callable[[list[int]], str]):
        self.decode = decode
        self.segments = [(a, b) for a, b, _ in layout.segments]
        self.check = None  # text has no syntax to read it by

    def __call__(self, ids: list[int]) -> FilledTemplate:
        parts = [self.decode(ids[a:b]) for a, b in self.segments]
        return FilledTemplate("".join(parts), tuple(parts[1::2]))

    def readable(self, ids: list[int]) -> bool:
        return True
