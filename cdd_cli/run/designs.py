"""A run of molecules designed from parts (`cdd design`): the parts' designs
(`constraints/kept.py`) laid on canvases, sampled as `cdd molecules` samples, every record
certified by the `kept` constraint; an edit may take several rounds.

A canvas is `<bos> tokens <eos> <pad>...`, as the models were trained: every position kept
but the blanks'. A blank's length is drawn per sample within its range from a stream of its
own, derived from (seed, prompt, sample), so a sample's canvas does not depend on its batch
or shard. Editing runs one prompt per lead (its canonical SMILES); with `rounds` K > 1 each
round's best edit of a lead (the highest QED among its satisfied records) is the next
round's lead, and the records of the last round are written.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

import torch

from cdd_cli.constraints.kept import Blank, Design, KeptConstraint, edit, read_fragment
from cdd_cli.diffusion.sampler import Canvas
from cdd_cli.errors import InputError
from cdd_cli.models.registry import LoadedModel
from cdd_cli.models.tokenizers import SmilesTokenizer
from cdd_cli.prompts import PromptInput
from cdd_cli.reporting import Display
from cdd_cli.run.domains import Molecules
from cdd_cli.run.drawing import Draw, Prompt
from cdd_cli.run.runner import Compiled, Output, plan, write


def blank_stream(seed: int, prompt: int, sample: int) -> random.Random:
    """The stream a sample's blank lengths are drawn from: its own, whatever its batch."""
    return random.Random(f"blanks/{seed}/{prompt}/{sample}")


def canvas_row(
    design: Design, tokenizer: SmilesTokenizer, length: int, stream: random.Random
) -> tuple[list[int], list[bool]]:
    """One sample's canvas (ids, kept), its blanks' lengths drawn from `stream`."""
    ids, kept = [tokenizer.bos_id], [True]
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


def canvases(
    design: Design, tokenizer: SmilesTokenizer, length: int, seed: int, prompt: int, n: int
) -> Canvas:
    """The canvases of samples 0..n-1 of a prompt: one row each, or one shared row where no
    blank's length varies."""
    varies = any(b.low != b.high for b in design.blanks)
    rows = [
        canvas_row(design, tokenizer, length, blank_stream(seed, prompt, k))
        for k in range(n if varies else 1)
    ]
    ids = torch.tensor([r[0] for r in rows], dtype=torch.long)
    kept = torch.tensor([r[1] for r in rows], dtype=torch.bool)
    return Canvas(ids, kept)


class Designs(Molecules):
    """`cdd molecules` on canvases: one prompt per design (an edit's: per lead), each record
    saying what was kept (`kept`), certified by the `kept` constraint."""

    def __init__(
        self,
        designs: list[Design],
        seed: int,
        n: int,
        kept: dict | None = None,
        origins: list[str] | None = None,
    ):
        self.designs, self.seed, self.n = designs, seed, n
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
            canvas = canvases(design, tokenizer, size, self.seed, index, self.n)
            shown = ", ".join(f"{k} {v}" for k, v in design.kept.items())
            if design.mode != "edit":  # (an edit's tokens show its blanks)
                ranges = dict.fromkeys(f"{b.low}-{b.high}" for b in design.blanks)
                shown += f", blanks {' '.join(ranges)}"
            origin = self.origins[index] if self.origins is not None else None
            # An edit's lead is its text: the kept constraint is told it (`with_prompt`).
            lead = design.kept.get("lead")
            prompts.append(Prompt(index, lead, id=origin, given=shown, canvas=canvas))
        return prompts, size

    def record_fields(self, loaded: LoadedModel, decode: str) -> Callable[[Draw], dict]:
        describe = super().record_fields(loaded, decode)
        kept = self.kept if self.kept is not None else self.designs[0].kept
        return lambda draw: {"kept": kept, **describe(draw)}


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
    compiled: Compiled, designs: list[Design], n: int, seed: int, **domain: Any
) -> Compiled:
    """`compiled` drawing on `designs`' canvases, certified by their kept constraint."""
    others = [c for c in compiled.constraints if not isinstance(c, KeptConstraint)]
    return replace(
        compiled,
        domain=Designs(designs, seed, n, **domain),
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
) -> tuple[int, str]:
    """A run on `design`'s canvases (its blanks `blank` tokens long, by default as long as
    the model leaves room for) appended to `output`: its exit code and summary."""
    n, seed = resolved_n_seed(compiled, n, seed)
    fitted = design.fitted(blank, compiled.loaded.config.model_length)
    run = plan(on_canvases(compiled, [fitted], n, seed), n, None, None, seed)
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
        drawing = on_canvases(compiled, designs, n, seed, kept=kept, origins=origins)
        run = plan(drawing, n, None, None, seed)
        if number < rounds:
            started = time.perf_counter()
            records = list(run.records())
            say(f"round {number}: {run.summary(time.perf_counter() - started)}")
            editable = partial(can_edit, fraction=fraction, seed=seed, tokenizer=tokenizer,
                               round_=number + 1, query=query, length=size)  # fmt: skip
            current = best_edits(records, [d.kept["lead"] for d in designs], editable)
            continue
        started = time.perf_counter()
        code = write(run, output, display, say)
        return code, run.summary(time.perf_counter() - started)
    raise AssertionError("unreachable: rounds >= 1")
