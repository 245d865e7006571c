"""The kept part of a molecule designed from parts: a scaffold, two fragments, a motif or a
lead laid out as SMILES tokens (kept) and blanks (the model writes them), and the constraint
that certifies the kept part is still in the molecule the model wrote.

Every part is written as RDKit's canonical SMILES (the shipped models were trained on it),
split as the model's tokenizer splits SMILES, with each attachment point `[*]` (a dummy atom
bonded to one atom) replaced by a blank where it stands. A leaf atom of a SMILES stands at
its start, at the end of a chain or alone in a branch, so a chain written in its place is
bonded to the atom the attachment point was bonded to:

- scaffold decoration: `c1ccc([*])cc1` -> `<blank> c 1 c c c c c 1` (RDKit writes `*c1ccccc1`),
  and its other writings (`Design.writings`, one rooted at each atom), a canvas drawing one
  per sample (`cdd_cli/run/designs.py`);
- linker design: the first fragment's attachment point is replaced by a blank followed by
  the second fragment written from its attachment atom (ring-bond labels the first fragment
  holds open there renumbered), so the blank is the chain that links them;
- motif extension: the motif's writings, kept anywhere (a blank on each side, which may be
  empty);
- editing: the lead's tokens, a fraction of them re-masked (the same positions for every
  sample of a lead), each re-masked token a blank of one or two tokens.

Certification (`KeptConstraint`, judge `rdkit-substructure`): an RDKit substructure match of
the kept part on the final molecule, attachment points matching any atom (by any bond where
the bond is single; two fragments: each at its attachment point, and both on
distinct atoms); an edit's (judge `kept-tokens`): the lead's kept tokens in order in the
SMILES written, each blank's size between them. An invalid molecule certifies nothing.
"""


from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from rdkit import Chem

from cdd_cli.constraints.base import ExactConstraint
from cdd_cli.errors import InputError
from cdd_cli.evaluate.molecules import MAX_SMILES_CHARS, parse
from cdd_cli.models.tokenizers import SmilesTokenizer, split_smiles

DEFAULT_LONGEST_BLANK = 8  # tokens, where the model's length leaves room for it
BLANK_TEXT = "_"  # how a record's token template shows a blank token


@dataclass(frozen=True)
class Blank:
    """A run of tokens the model writes: between `low` and `high` of them (`high` -1: as
    many as the model's length leaves room for, `Design.fitted`)."""

    low: int
    high: int = -1


Segment = str | Blank  # a kept token, or a blank


@dataclass(frozen=True)
class Design:
    """Parts laid out as SMILES tokens: the tokens kept, blanks where the model writes, and
    what records say was kept."""

    mode: str  # scaffold | link | motif | edit
    kept: dict[str, str]  # e.g. {"scaffold": "*c1ccccc1"}: what records show
    segments: tuple[Segment, ...]
    # The kept part as substructure queries, all of which must match (dummy atoms match any
    # atom); none for an edit, whose kept tokens are checked in order (`laid_out`).
    queries: tuple[Chem.Mol, ...] = field(default=(), compare=False, repr=False)
    # A part kept anywhere (scaffold, motif): its SMILES writings, one drawn per sample and
    # placed after a blank of a drawn length, the rest of the sequence the model's. None:
    # `segments` as they stand, closed by `<eos>` (link, edit).
    writings: tuple[tuple[Segment, ...], ...] = ()

    @property
    def blanks(self) -> list[Blank]:
        return [s for s in self.segments if isinstance(s, Blank)]

    @property
    def judge_name(self) -> str:
        return "rdkit-substructure" if self.queries else "kept-tokens"

    def fitted(self, asked: Blank | None, length: int) -> Design:
        """This design with its open blanks sized for a model of `length` positions (`<bos>`
        and `<eos>` among them): `asked`'s range (its MIN for blanks that need a token), which
        must fit, or by default up to `DEFAULT_LONGEST_BLANK` tokens each, as far as the
        length leaves room. InputError where the kept part leaves no room."""
        sized = [s for s in self.segments if isinstance(s, Blank) and s.high >= 0]
        tokens = sum(isinstance(s, str) for s in self.segments)
        kept = tokens + sum(b.high for b in sized)  # with the sized blanks at their longest
        open_ = [s for s in self.segments if isinstance(s, Blank) and s.high < 0]
        room = length - 2 - kept
        if room < 0:
            blanks = f" and its blanks (up to {kept - tokens})" if sized else ""
            raise InputError(
                f"{self.mode}: the kept part ({tokens} tokens){blanks} cannot fit the model's "
                f"length of {length} tokens ({length - 2} between <bos> and <eos>)"
            )
        if room < sum(b.low for b in open_):
            raise InputError(
                f"{self.mode}: the kept part ({kept} tokens) leaves no room for its "
                f"{len(open_)} blank(s) in the model's length of {length} tokens"
            )
        if not open_:
            return self
        if asked is None:
            high = min(DEFAULT_LONGEST_BLANK, room // len(open_))
        elif asked.high * len(open_) > room:
            raise InputError(
                f"--blank {asked.low}-{asked.high}: {len(open_)} blank(s) of up to "
                f"{asked.high} tokens and the kept part ({kept} tokens) exceed the model's "
                f"length of {length}"
            )
        else:
            high = asked.high
        low = 1 if asked is None else asked.low
        high = max(high, 1)

        def sized(segments: tuple[Segment, ...]) -> tuple[Segment, ...]:
            return tuple(
                Blank(min(low, high) if s.low else 0, high)
                if isinstance(s, Blank) and s.high < 0
                else s
                for s in segments
            )

        fitting = tuple(sized(w) for w in self.writings if fits(w, length))
        return Design(self.mode, self.kept, sized(self.segments), self.queries, fitting)


def fits(segments: Sequence[Segment], length: int) -> bool:
    """Whether `segments` (their blanks at their least) fit `length` positions with `<bos>`
    and `<eos>`."""
    least = sum(s.low if isinstance(s, Blank) else 1 for s in segments)
    return least <= length - 2


def read_part(smiles: str, what: str) -> Chem.Mol:
    """A part's molecule (InputError naming `what` where RDKit cannot read it)."""
    if not isinstance(smiles, str) or not smiles.strip():
        raise InputError(f"{what}: empty SMILES")
    if len(smiles) > MAX_SMILES_CHARS:
        raise InputError(f"{what}: SMILES over {MAX_SMILES_CHARS:,} characters")
    mol = Chem.MolFromSmiles(smiles.strip())
    if mol is None or mol.GetNumAtoms() == 0:
        raise InputError(f"{what}: RDKit cannot parse {smiles.strip()!r}")
    # A numbered attachment point (`[1*]`, `[*:1]`, as RDKit's fragmenters and REINVENT
    # write them) is an attachment point: as a query, a labelled dummy would match only a
    # dummy of the same label, never the atom a decoration puts there.
    for atom in mol.GetAtoms():
        if atom.GetAtomicNum() == 0:
            atom.SetIsotope(0)
            atom.SetAtomMapNum(0)
    if all(atom.GetAtomicNum() == 0 for atom in mol.GetAtoms()):
        raise InputError(f"{what}: {smiles.strip()!r} has no atom to keep, only attachment points")
    return mol


def attachment_points(mol: Chem.Mol, what: str) -> list[int]:
    """The indices of the dummy atoms, each bonded to exactly one atom."""
    points = [a.GetIdx() for a in mol.GetAtoms() if a.GetAtomicNum() == 0]
    for index in points:
        degree = mol.GetAtomWithIdx(index).GetDegree()
        if degree != 1:
            raise InputError(
                f"{what}: an attachment point [*] must be bonded to one atom, this one is "
                f"bonded to {degree}"
            )
    return points


def is_label(token: str) -> bool:
    return token.isdigit() or token.startswith("%")


def is_atom(token: str) -> bool:
    return token[0].isalpha() or token.startswith("[")


def is_dummy(token: str) -> bool:
    """RDKit writes a dummy atom as `*`, or bracketed (`[*]`, `[1*]`, `[*:1]`)."""
    return token == "*" or (token.startswith("[") and "*" in token)


def written_tokens(mol: Chem.Mol, root: int = -1) -> list[str]:
    """The molecule's canonical SMILES (from atom `root` where given) as tokens."""
    return split_smiles(Chem.MolToSmiles(mol, rootedAtAtom=root))


def writings(mol: Chem.Mol) -> tuple[tuple[Segment, ...], ...]:
    """The molecule's SMILES writings as the model's tokens, canonical first, then one rooted
    at each atom (distinct ones), each attachment point a blank, those with the fewest
    blanks inside them (not first or last): a canvas draws one per sample. A blank inside
    a writing has the length drawn for it, where a first or last one takes what the model
    writes before or after the part; QM9's model keeps a benzene written `c1(*)ccccc1` in
    none of 64 draws, `c1ccc(*)cc1` in 70%, `*c1ccccc1` in all (bench/README.md)."""
    texts = [Chem.MolToSmiles(mol)]
    texts += [Chem.MolToSmiles(mol, rootedAtAtom=a) for a in range(mol.GetNumAtoms())]
    every = [
        tuple(Blank(1) if is_dummy(t) else t for t in split_smiles(text))
        for text in dict.fromkeys(texts)
    ]
    inside = [sum(isinstance(s, Blank) for s in w[1:-1]) for w in every]
    return tuple(w for w, count in zip(every, inside, strict=True) if count == min(inside))


def check_vocabulary(tokens: Sequence[Segment], tokenizer: SmilesTokenizer, what: str) -> None:
    """Every kept token is one the model can write."""
    for k, token in enumerate(tokens):
        if isinstance(token, Blank) or token in tokenizer.index:
            continue
        beside_blank = any(
            isinstance(tokens[j], Blank) for j in (k - 1, k + 1) if 0 <= j < len(tokens)
        )
        where = "at an attachment point " if beside_blank else ""
        raise InputError(
            f"{what}: token {token!r} {where}is not in the model's vocabulary "
            f"({len(tokenizer.vocab) - 5} SMILES tokens)"
        )


def any_atom_query(mol: Chem.Mol) -> Chem.Mol:
    """`mol` as a substructure query whose dummy atoms match any atom, by any bond where the
    bond is single (RDKit leaves it unwritten): the bond to a decoration is the decoration's
    (`[*]C1CC1` holds in `O=C1CC1`); a double or triple one (`[*]=C1CC1`) is kept."""
    params = Chem.AdjustQueryParameters.NoAdjustments()
    params.makeDummiesQueries = True
    query = Chem.RWMol(Chem.AdjustQueryProperties(mol, params))
    for bond in mol.GetBonds():
        ends = (bond.GetBeginAtom().GetAtomicNum(), bond.GetEndAtom().GetAtomicNum())
        if 0 in ends and bond.GetBondType() == Chem.BondType.SINGLE:
            query.ReplaceBond(bond.GetIdx(), Chem.BondFromSmarts("~"), preserveProps=False)
    return query.GetMol()


def scaffold(smiles: str, tokenizer: SmilesTokenizer) -> Design:
    """Scaffold decoration: each attachment point a blank, the rest kept."""
    mol = read_part(smiles, "scaffold")
    if not attachment_points(mol, "scaffold"):
        raise InputError("scaffold: no attachment point [*] to decorate")
    written = Chem.MolToSmiles(mol)
    segments = tuple(Blank(1) if is_dummy(t) else t for t in split_smiles(written))
    check_vocabulary(segments, tokenizer, "scaffold")
    every = writings(mol)
    for writing in every:
        check_vocabulary(writing, tokenizer, "scaffold")
    return Design("scaffold", {"scaffold": written}, segments, (any_atom_query(mol),), every)


def relabelled(tokens: list[str], taken: set[str]) -> list[str]:
    """`tokens` with their ring-bond labels renamed to avoid labels in `taken` (held open
    around them); labels are reused once closed, as SMILES allows."""
    free = [str(k) for k in range(1, 10) if str(k) not in taken]
    names: dict[str, str] = {}  # a label open in `tokens` -> its new name
    out = []
    for token in tokens:
        if not is_label(token):
            out.append(token)
        elif token in names:  # closes it
            out.append(names.pop(token))
        else:
            spare = [f for f in free if f not in names.values()]
            if not spare:
                raise InputError("link: the fragments hold more than nine rings open at once")
            names[token] = spare[0]
            out.append(spare[0])
    return out


def open_labels(tokens: Sequence[str]) -> set[str]:
    """The ring-bond labels left open after `tokens`."""
    held: set[str] = set()
    for token in tokens:
        if is_label(token):
            held ^= {token}
    return held


def link(first: str, second: str, tokenizer: SmilesTokenizer) -> Design:
    """Linker design: two fragments with one attachment point each, kept, a blank between."""
    mols = [read_part(first, "link: first fragment"), read_part(second, "link: second fragment")]
    dummies = []
    for mol, what in zip(mols, ("first", "second"), strict=True):
        points = attachment_points(mol, f"link: {what} fragment")
        if len(points) != 1:
            raise InputError(
                f"link: the {what} fragment needs one attachment point [*], it has {len(points)}"
            )
        dummies.append(points[0])
    # The second fragment from its attachment point, which is then dropped: its attachment
    # atom comes first, to be bonded to the linker's last atom.
    tail = written_tokens(mols[1], dummies[1])
    if not is_dummy(tail[0]):
        raise InputError("link: the second fragment cannot be written from its attachment point")
    tail = tail[1:]
    head = written_tokens(mols[0])
    at = next(k for k, t in enumerate(head) if is_dummy(t))
    if at == 0:  # from its attachment atom instead, so that the blank extends that atom
        neighbour = mols[0].GetAtomWithIdx(dummies[0]).GetNeighbors()[0].GetIdx()
        head = written_tokens(mols[0], neighbour)
        at = next(k for k, t in enumerate(head) if is_dummy(t))
    tail = relabelled(tail, open_labels(head[:at]))
    segments = (*head[:at], Blank(1), *tail, *head[at + 1 :])
    check_vocabulary(segments, tokenizer, "link")
    kept = {"fragment1": Chem.MolToSmiles(mols[0]), "fragment2": Chem.MolToSmiles(mols[1])}
    # Each fragment bonded at its attachment point, and both on distinct atoms (without
    # their attachment points, which a one-atom linker shares).
    cores = [Chem.DeleteSubstructs(m, Chem.MolFromSmarts("[#0]")) for m in mols]
    queries = (*(any_atom_query(m) for m in mols), Chem.CombineMols(*cores))
    return Design("link", kept, segments, queries)


def motif(smiles: str, tokenizer: SmilesTokenizer) -> Design:
    """Motif extension: the motif kept with a blank on each side (attachment points, if it
    has any, are blanks too)."""
    mol = read_part(smiles, "motif")
    attachment_points(mol, "motif")
    every = writings(mol)
    for writing in every:
        check_vocabulary(writing, tokenizer, "motif")
    segments = (Blank(0), *every[0], Blank(0))
    written = Chem.MolToSmiles(mol)
    return Design("motif", {"motif": written}, segments, (any_atom_query(mol),), every)


def edit(
    lead: str,
    fraction: float,
    seed: int,
    tokenizer: SmilesTokenizer,
    round_: int = 1,
    fragment: Chem.Mol | None = None,
) -> Design:
    """Editing: the lead's canonical SMILES with `fraction` of its tokens (at least one), or
    the atoms' tokens of every match of `fragment` (a SMARTS query), re-masked, each to be
    written as one or two tokens (so that a lead may grow); a fraction's positions drawn
    from (seed, round, lead): the same for every sample of it."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        raise InputError(f"--remask: expected a fraction, got {fraction!r}")
    if not 0 < fraction <= 1:
        raise InputError(f"--remask: expected a fraction in (0, 1], got {fraction:g}")
    mol = read_part(lead, "edit: lead")
    if attachment_points(mol, "edit: lead"):
        raise InputError("edit: a lead has no attachment points (use --scaffold)")
    written = Chem.MolToSmiles(mol)
    tokens = split_smiles(written)
    if fragment is not None:
        chosen = fragment_tokens(mol, tokens, fragment)
        if not chosen:
            raise InputError(f"--fragment: no match in the lead {written}")
    else:
        count = max(1, round(fraction * len(tokens)))
        stream = random.Random(f"remask/{seed}/{round_}/{written}")
        chosen = set(stream.sample(range(len(tokens)), count))
    segments = tuple(Blank(1, 2) if k in chosen else t for k, t in enumerate(tokens))
    check_vocabulary(segments, tokenizer, "edit: lead")
    template = "".join(BLANK_TEXT if isinstance(s, Blank) else s for s in segments)
    return Design("edit", {"lead": written, "tokens": template}, segments)


def read_fragment(smarts: str) -> Chem.Mol:
    """`--fragment`'s SMARTS query."""
    query = Chem.MolFromSmarts(smarts) if isinstance(smarts, str) and smarts.strip() else None
    if query is None or query.GetNumAtoms() == 0:
        raise InputError(f"--fragment: RDKit cannot parse the SMARTS {smarts!r}")
    return query


def fragment_tokens(mol: Chem.Mol, tokens: list[str], fragment: Chem.Mol) -> set[int]:
    """The positions in `tokens` (the canonical SMILES `MolToSmiles(mol)` just wrote) of the
    atoms that some match of `fragment` covers: atom tokens come in the writing's atom order."""
    order = list(mol.GetPropsAsDict(True, True)["_smilesAtomOutputOrder"])
    atoms = [k for k, t in enumerate(tokens) if is_atom(t)]
    position = dict(zip(order, atoms, strict=True))
    matched = {a for match in mol.GetSubstructMatches(fragment) for a in match}
    return {position[a] for a in matched}


def parse_blank(text: str, what: str = "--blank") -> Blank:
    """`MIN-MAX` or `N` tokens: a blank's range."""
    low, sep, high = text.strip().partition("-")
    try:
        blank = Blank(int(low), int(high if sep else low))
    except ValueError:
        raise InputError(f"{what}: expected MIN-MAX tokens (e.g. 1-6), got {text!r}") from None
    if not 1 <= blank.low <= blank.high:
        raise InputError(f"{what}: expected 1 <= MIN <= MAX, got {text!r}")
    return blank


def certified(design: Design, smiles: str) -> bool | None:
    """Whether the kept part is in the molecule `smiles` (None: the molecule is invalid):
    a substructure match, attachment points matching any atom; for an edit, the lead's kept
    tokens in order, each blank's size between them (`laid_out`)."""
    parsed = parse(smiles)
    if parsed is None:
        return None
    if design.queries:
        return all(parsed[1].HasSubstructMatch(q) for q in design.queries)
    return laid_out(design.segments, split_smiles(smiles))


def laid_out(segments: Sequence[Segment], tokens: Sequence[str]) -> bool:
    """Whether `tokens` are `segments`: each kept token in order, each blank as many tokens
    as its range allows between them (dynamic programming over both)."""
    reach = {0}  # how many tokens the segments so far can have consumed
    for segment in segments:
        if isinstance(segment, Blank):
            reach = {k + size for k in reach for size in range(segment.low, segment.high + 1)}
        else:
            reach = {k + 1 for k in reach if k < len(tokens) and tokens[k] == segment}
        reach = {k for k in reach if k <= len(tokens)}
        if not reach:
            return False
    return len(tokens) in reach


@dataclass(frozen=True)
class KeptConstraint(ExactConstraint):
    """The kept part is in the molecule: value 1.0 certified, 0.0 missing, None invalid
    (never satisfied). One design per run, or per prompt (an edit's lead: its prompt text),
    chosen when told the prompt."""

    tau: float = 1.0
    upper_bound: bool = False  # satisfied when value >= 1
    name: str = "kept"
    judge_name: str = "rdkit-substructure"
    design: Design | None = field(default=None, compare=False)
    by_prompt: dict[str, Design] = field(default_factory=dict, compare=False, repr=False)

    def with_prompt(self, prompt: str, prompt_length: int) -> KeptConstraint:
        design = self.by_prompt.get(prompt, self.design)
        judge = design.judge_name if design is not None else self.judge_name
        told = super().with_prompt(prompt, prompt_length)
        return replace(told, design=design, judge_name=judge)

    def label(self) -> str:
        return "kept part"

    def judge(self, texts: list[str]) -> list[float | None]:
        if self.design is None:
            raise ValueError("kept: judged before it was told its design")
        values: list[float | None] = []
        for text in texts:
            verdict = certified(self.design, text)
            values.append(None if verdict is None else float(verdict))
        return values
