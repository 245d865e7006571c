"""A run of molecules designed from parts (`cdd design`): the parts' designs
(`constraints/kept.py`) laid on canvases, sampled as `cdd molecules` samples, every record
certified by the `kept` constraint; an edit may take several rounds.

A canvas is laid out as the models were trained, `<bos> tokens <eos> <pad>...`. A part kept
anywhere (scaffold, motif) keeps `<bos>` and one of its writings, after a blank, with blanks
at its attachment points and, by chance, a one-token blank after an aliphatic atom (a ring
bond's place); the model writes the rest, its end included. A link or an edit keeps every
position but its blanks', then `<eos>` and `<pad>`. The layout is drawn per sample from a
stream of its own, derived from (seed, prompt, sample), so a sample's canvas does not
depend on its batch or shard. Editing runs one prompt per lead (its canonical SMILES); with
`rounds` K > 1 each round's best edit of a lead (the highest QED among its satisfied
records) is the next round's lead, and the records of the last round are written.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import torch
from rdkit import Chem

from cdd_cli.constraints.kept import (
    Blank,
    Design,
    KeptConstraint,
    Segment,
    edit,
    is_atom,
    is_label,
    read_fragment,
)
from cdd_cli.diffusion.sampler import Canvas
from cdd_cli.errors import InputError, Interrupted, Terminated
from cdd_cli.evaluate.molecules import parse
from cdd_cli.evaluate.reference import read_smiles
from cdd_cli.models.registry import LoadedModel
from cdd_cli.models.tokenizers import SmilesTokenizer
from cdd_cli.prompts import PromptInput
from cdd_cli.reporting import Display
from cdd_cli.run.domains import Molecules
from cdd_cli.run.drawing import Draw, Prompt
from cdd_cli.run.runner import Compiled, Output, Run, plan, write

# The chance that an aliphatic atom of a part kept anywhere is followed by a blank of one
# token, where the model may open or close a ring bond: most of the model's own molecules
# that hold a small ring hold it fused or bridged (bench/README.md, "Molecules from parts").
RING_BOND_SHARE = 0.35
DESIGN_ATTEMPTS = 64  # draws of a sample of a part kept anywhere, its only constraint kept
# A sample of a part kept anywhere is first drawn whole this many times, as the model writes
# by itself, and kept if it holds the part: those samples are the model's law given the part
# exactly (rejection's), which no layout is. A layout places the part where a writing's blanks
# can reach it, not fused or bridged as the model's own molecules mostly hold a small ring:
# `[*]C1CC1` on QM9, 256 layouts against rejection, KS 1.7-2.8x the null on QED, SA, heavy
# atoms and weight over three seeds (bench/README.md, "How close to the model's own").
# Worth it only where the model's own molecules often hold the part: where at least
# OWN_SHARE of its held-out molecules do (`[*]C1CC1` 25% of QM9's, `c1ccc([*])cc1` 0.3%: four
# draws whole cost a benzene ring on QM9 4.5x the time for nothing), judged on OWN_SAMPLE
# of them spread over the file.
OWN_DRAWS, OWN_SHARE, OWN_SAMPLE = 4, 0.1, 4000
# A sample keeps a layout for this many draws, then is laid out again. One layout for all its
# draws left a sample whose layout its fills cannot keep failing every redraw (`[*]C1CCNCC1`
# under SA <= 3.5: 30 of 64 satisfied in 16 draws); a new layout every draw favours the
# layouts easiest to fill over those the model's own molecules hold (58 of 64, but `[*]C1CC1`
# 2.25-2.85x the null on SA over two of three seeds); every 4 draws: 41 of 64, and every
# measure within 2x on the three seeds (bench/README.md, "How close to the model's own").
LAYOUT_DRAWS = 4


def own_draws(design: Design, directory: Path) -> int:
    """How many times each sample of `design` is first drawn whole (`Prompt.own_draws`):
    OWN_DRAWS for a part kept anywhere that at least OWN_SHARE of the model's held-out
    molecules (`heldout.smi.gz` beside it) hold; none where the folder ships none."""
    path = Path(directory) / "heldout.smi.gz"
    if not design.writings or not design.queries or not path.is_file():
        return 0
    smiles = read_smiles(path)[1]
    spread = smiles[:: max(1, len(smiles) // OWN_SAMPLE)]
    molecules = [m for s in spread if (m := Chem.MolFromSmiles(s)) is not None]
    holding = sum(all(m.HasSubstructMatch(q) for q in design.queries) for m in molecules)
    return OWN_DRAWS if molecules and holding >= OWN_SHARE * len(molecules) else 0


def layout_stream(seed: int, prompt: int, sample: int, layout: int = 0) -> random.Random:
    """The stream a sample's `layout`-th layout is drawn from (`LAYOUT_DRAWS`): its own,
    whatever its batch."""
    again = f"/{layout}" if layout else ""  # (a first layout's stream as it always was)
    return random.Random(f"blanks/{seed}/{prompt}/{sample}{again}")


def is_aromatic(token: str) -> bool:
    return token.lstrip("[")[:1].islower()


def atom_ends(writing: tuple[Segment, ...]) -> set[int]:
    """The index of each aliphatic atom's last token in `writing`: the atom's, or its last
    ring-bond label's (a blank before a label the model mostly fills with an atom, in the
    ring). Not an aromatic atom's: a fill there mostly breaks the ring (QM9's model)."""
    ends: set[int] = set()
    for k, token in enumerate(writing):
        if isinstance(token, str) and is_atom(token) and not is_aromatic(token):
            ends.add(k)
        elif isinstance(token, str) and is_label(token) and k - 1 in ends:
            ends.discard(k - 1)
            ends.add(k)
    return ends


def placed(design: Design, length: int, stream: random.Random) -> list[str | int]:
    """One sample's layout of a part kept anywhere, drawn from `stream`: one of its writings,
    each blank (an attachment point's, a ring bond's after some aliphatic atoms, and one
    before the part where the writing does not start with one) as the number of positions
    the model writes there, drawn within its range as far as `length` leaves room."""
    writing = stream.choice(design.writings)
    blanks = [s for s in writing if isinstance(s, Blank)]
    room = length - 1 - (len(writing) - len(blanks)) - sum(b.low for b in blanks)
    row: list[str | int] = []
    sites = atom_ends(writing)
    for k, segment in enumerate(writing):
        if isinstance(segment, Blank):
            size = stream.randint(segment.low, min(segment.high, segment.low + room))
            room -= size - segment.low
            row.append(size)
            continue
        row.append(segment)
        if k in sites and room > 0 and stream.random() < RING_BOND_SHARE:
            row.append(1)  # where the model may write a ring bond's label
            room -= 1
    if not isinstance(writing[0], Blank):
        row.insert(0, stream.randint(0, min(max(b.high for b in design.blanks), room)))
    return row


def canvas_row(
    design: Design, tokenizer: SmilesTokenizer, length: int, stream: random.Random
) -> tuple[list[int], list[bool]]:
    """One sample's canvas (ids, kept): a part kept anywhere placed as drawn from `stream`,
    the positions after it the model's (`<eos>` and `<pad>` too); otherwise the design's
    segments, their blanks' lengths drawn from `stream`, then `<eos>`."""
    ids, kept = [tokenizer.bos_id], [True]
    if design.writings:
        for segment in placed(design, length, stream):
            if isinstance(segment, int):
                ids += [tokenizer.mask_id] * segment
                kept += [False] * segment
            else:
                ids.append(tokenizer.index[segment])
                kept.append(True)
        free = length - len(ids)
        return ids + [tokenizer.mask_id] * free, kept + [False] * free
    for segment in design.segments:
        if isinstance(segment, Blank):
            size = stream.randint(segment.low, segment.high)
            ids += [tokenizer.mask_id] * size
            kept += [False] * size
        else:
            ids.append(tokenizer.index[segment])
            kept.append(True)
    ids.append(tokenizer.eos_id)
    kept.append(True)
    if len(ids) > length:
        raise InputError(f"a canvas of {len(ids)} tokens exceeds the model's length of {length}")
    pad = length - len(ids)
    return ids + [tokenizer.pad_id] * pad, kept + [True] * pad


@dataclass(frozen=True)
class Layouts:
    """The canvas of each draw of a prompt's samples (`Canvases`), its layout drawn from the
    draw's own stream."""

    design: Design
    tokenizer: SmilesTokenizer
    length: int
    seed: int
    prompt: int

    def __call__(self, index: int, attempt: int) -> Canvas:
        stream = layout_stream(self.seed, self.prompt, index, attempt // LAYOUT_DRAWS)
        ids, kept = canvas_row(self.design, self.tokenizer, self.length, stream)
        return Canvas(torch.tensor([ids]), torch.tensor([kept]))


def canvases(
    design: Design, tokenizer: SmilesTokenizer, length: int, seed: int, prompt: int
) -> Canvas | Layouts:
    """What a prompt's samples are drawn on: a layout per draw, or one shared row where no
    layout varies."""
    layouts = Layouts(design, tokenizer, length, seed, prompt)
    varies = bool(design.writings) or any(b.low != b.high for b in design.blanks)
    return layouts if varies else layouts(0, 0)


class Designs(Molecules):
    """`cdd molecules` on canvases: one prompt per design (an edit's: per lead), each record
    saying what was kept (`kept`), certified by the `kept` constraint."""

    def __init__(
        self,
        designs: list[Design],
        seed: int,
        kept: dict | None = None,
        origins: list[str] | None = None,
        fragment: Chem.Mol | None = None,
    ):
        self.designs, self.seed = designs, seed
        self.fragment = fragment  # an edit's re-masked SMARTS: records say if it is gone
        self.kept = kept  # what records say was kept (None: the design's own)
        self.origins = origins  # each prompt's id: an edited lead as it was given

    def prompts(
        self, given: list[PromptInput | None], length: int | None, loaded: LoadedModel, chat: bool
    ) -> tuple[list[Prompt], int]:
        tokenizer = loaded.tokenizer
        assert isinstance(tokenizer, SmilesTokenizer)
        size = loaded.config.model_length
        prompts = []
        for index, design in enumerate(self.designs):
            canvas = canvases(design, tokenizer, size, self.seed, index)
            shown = ", ".join(f"{k} {v}" for k, v in design.kept.items())
            if design.mode != "edit":  # (an edit's tokens show its blanks)
                ranges = dict.fromkeys(f"{b.low}-{b.high}" for b in design.blanks)
                shown += f", blanks {' '.join(ranges)}"
            origin = self.origins[index] if self.origins is not None else None
            # An edit's lead is its text: the kept constraint is told it (`with_prompt`).
            lead = design.kept.get("lead")
            own = own_draws(design, loaded.directory)
            prompts.append(
                Prompt(index, lead, id=origin, given=shown, canvas=canvas, own_draws=own)
            )
        return prompts, size

    def record_fields(self, loaded: LoadedModel, decode: str) -> Callable[[Draw], dict]:
        describe = super().record_fields(loaded, decode)
        kept = self.kept if self.kept is not None else self.designs[0].kept
        if self.designs[0].mode != "edit":
            return lambda draw: {"kept": kept, **describe(draw)}
        leads = {d.kept["lead"] for d in self.designs}
        fragment = self.fragment

        def edited(draw: Draw) -> dict:
            parsed = parse(draw.text)
            # An edit may write its lead again: said, not redrawn (docs/design.md).
            said = {"same_as_lead": None if parsed is None else parsed[0] in leads}
            if fragment is not None:
                gone = None if parsed is None else not parsed[1].HasSubstructMatch(fragment)
                said["fragment_rewritten"] = gone
            return {"kept": kept, **describe(draw), **said}

        return edited


def kept_constraint(designs: list[Design]) -> KeptConstraint:
    """The certification of `designs`: one for the run, or one per lead (edits)."""
    by_prompt = {d.kept["lead"]: d for d in designs if "lead" in d.kept}
    first = designs[0]
    return KeptConstraint(design=first, judge_name=first.judge_name, by_prompt=by_prompt)


def best_edits(
    records: list[dict], leads: list[str], editable: Callable[[str], bool] = lambda _: True
) -> list[str]:
    """Per lead (prompt index), the canonical SMILES of its best edit: the highest QED among
    its satisfied, valid records that the next round can edit; the lead itself where none
    is."""
    best: dict[int, tuple[float, str]] = {}
    for row in records:
        index = int(row["id"].split("-")[0])
        if not row["satisfied"] or not row["valid"] or row["qed"] is None:
            continue
        if (index not in best or row["qed"] > best[index][0]) and editable(row["canonical"]):
            best[index] = (row["qed"], row["canonical"])
    return [best[k][1] if k in best else lead for k, lead in enumerate(leads)]


def on_canvases(
    compiled: Compiled,
    designs: list[Design],
    seed: int,
    method_named: bool = False,
    **domain: Any,
) -> Compiled:
    """`compiled` drawing on `designs`' canvases, certified by their kept constraint; where
    the run names no method (`method_named` False) and a part RDKit judges (scaffold, motif,
    link) is its only constraint, by rejection against the kept judge."""
    others = [c for c in compiled.constraints if not isinstance(c, KeptConstraint)]
    spec = compiled.spec
    if not method_named and not others and all(d.queries for d in designs):
        # A fill may break a kept part (a branch or ring bond opened in a blank and closed by
        # a kept token: 4 of 18 readable drug-sized links drawn once, bench/README.md
        # "GenMol's fragment tasks"): with the kept judge the run's one constraint, such a
        # sample is drawn again, as rejection would, rather than written as a violation.
        # A layout a fill rarely keeps (a ring bond's place the model mostly fills with an
        # atom) is worth more draws than a sample drawn whole. A method the run names runs
        # as named, with its own settings: `--method unconstrained` draws each sample once
        # and its record says where the fill broke the part (kept 0.0, exit 3).
        attempts = max(spec.reject.max_attempts, DESIGN_ATTEMPTS)
        spec = replace(spec, method="reject", reject=replace(spec.reject, max_attempts=attempts))
    return replace(
        compiled,
        spec=spec,
        domain=Designs(designs, seed, **domain),
        constraints=[*others, kept_constraint(designs)],
    )


def resolved_n_seed(compiled: Compiled, n: int | None, seed: int | None) -> tuple[int, int]:
    """The run's n and seed, as `plan` resolves them (the canvases are drawn for them)."""
    n = n or compiled.spec.sampling.n or compiled.domain.default_n
    return n, seed if seed is not None else compiled.spec.sampling.seed


def write_parts(
    compiled: Compiled,
    design: Design,
    output: Output,
    blank: Blank | None = None,
    n: int | None = None,
    seed: int | None = None,
    display: Display | None = None,
    say: Callable[[str], None] = print,
    method_named: bool = False,
) -> tuple[int, str]:
    """A run on `design`'s canvases (its blanks `blank` tokens long, by default as long as
    the model leaves room for) appended to `output`: its exit code and summary.
    `method_named`: the run names its method (`on_canvases` then keeps it)."""
    n, seed = resolved_n_seed(compiled, n, seed)
    fitted = design.fitted(blank, compiled.loaded.config.model_length)
    drawing = on_canvases(compiled, [fitted], seed, method_named)
    run = plan(drawing, n, None, None, seed)
    started = time.perf_counter()
    code = write(run, output, display, say)
    return code, run.summary(time.perf_counter() - started)


def can_edit(
    smiles: str,
    fraction: float,
    seed: int,
    tokenizer: SmilesTokenizer,
    round_: int,
    query: Any,
    length: int,
) -> bool:
    """Whether round `round_` can edit `smiles`: its design fits the model's `length` (an
    edit may grow a lead) and a fragment `query` still matches it."""
    try:
        edit(smiles, fraction, seed, tokenizer, round_, query).fitted(None, length)
    except InputError:
        return False
    return True


def earlier_round(run: Run, number: int, rounds: int, output: Output) -> list[dict]:
    """Round `number`'s records, drawn whole before the last round's are written; Ctrl-C or
    SIGTERM here stops the run as it would stop a single one: what the output holds and how
    to finish it (`--resume` draws the earlier rounds again, from the same seeds)."""
    try:
        return list(run.records())
    except KeyboardInterrupt as exc:
        how, code = ("terminated", 143) if isinstance(exc, Terminated) else ("interrupted", 130)
        where = "stdout" if output.path == "-" else output.path
        finish = "" if output.path == "-" else f"; finish it with: {output.finish_hint()}"
        last = run.n * len(run.prompts)
        raise Interrupted(
            f"{how} in round {number} of {rounds}, before the last round's {last} records: "
            f"nothing written to {where}{finish}",
            code,
        ) from None


def write_edits(
    compiled: Compiled,
    leads: list[str],
    fraction: float,
    output: Output,
    rounds: int = 1,
    n: int | None = None,
    seed: int | None = None,
    display: Display | None = None,
    say: Callable[[str], None] = print,
    fragment: str | None = None,
) -> tuple[int, str]:
    """Edits of `leads` (a `fraction` of each one's tokens re-masked, or the atoms a
    `fragment` SMARTS matches) over `rounds` rounds, each round's best edit of a lead the
    next one's lead; the last round's records appended to `output`: the exit code and
    summary."""
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise InputError(f"--rounds: expected a positive integer, got {rounds!r}")
    n, seed = resolved_n_seed(compiled, n, seed)
    tokenizer = compiled.loaded.tokenizer
    assert isinstance(tokenizer, SmilesTokenizer)
    query = read_fragment(fragment) if fragment is not None else None
    remask: dict = {"remask": fraction} if query is None else {"fragment": fragment}
    origins = list(leads)
    current = list(leads)
    size = compiled.loaded.config.model_length
    for number in range(1, rounds + 1):
        designs = [edit(lead, fraction, seed, tokenizer, number, query) for lead in current]
        designs = [d.fitted(None, size) for d in designs]  # each lead must fit
        kept = {**remask, "round": number, "rounds": rounds}
        drawing = on_canvases(compiled, designs, seed, kept=kept, origins=origins, fragment=query)
        run = plan(drawing, n, None, None, seed)
        if number < rounds:
            started = time.perf_counter()
            records = earlier_round(run, number, rounds, output)
            say(f"round {number}: {run.summary(time.perf_counter() - started)}")
            editable = partial(can_edit, fraction=fraction, seed=seed, tokenizer=tokenizer,
                               round_=number + 1, query=query, length=size)  # fmt: skip
            before = [d.kept["lead"] for d in designs]
            current = best_edits(records, before, editable)
            for lead, after in zip(before, current, strict=True):
                if after == lead:  # (an edit grows: one may not leave the next round room)
                    say(f"round {number}: {lead} stays the lead of round {number + 1}: no "
                        "other edit of it is satisfied, valid and fits the model's length")
            continue
        started = time.perf_counter()
        code = write(run, output, display, say)
        return code, run.summary(time.perf_counter() - started)
    raise AssertionError("unreachable: rounds >= 1")
