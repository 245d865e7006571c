"""What differs between molecules and text, one small object each: the model kind a default
is chosen by, the tokenizer a model must have, the prompts (none for molecules), the fields a
record adds, and what the run's tally and summary say. The run itself is written once
(`runner.py`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

import torch

from cdd_cli.errors import InputError
from cdd_cli.evaluate.molecules import CANONICALIZER, MoleculeReport, describe, summarise
from cdd_cli.evaluate.reference import default_reference
from cdd_cli.models.chat import apply_template, read_template
from cdd_cli.models.registry import LoadedModel
from cdd_cli.models.tokenizers import TextTokenizer
from cdd_cli.prompts import PromptInput
from cdd_cli.reporting import Tally
from cdd_cli.run.drawing import Draw, Prompt

DEFAULT_LENGTH = 64  # continuation tokens, where the model's length leaves room


@dataclass(frozen=True)
class Shape:
    """What a summary says of the run's shape."""

    prompts: int
    n: int  # samples per prompt
    length: int  # continuation tokens
    steps: int
    device: str


class Domain:
    name: str  # "molecules" | "text": which shipped default a model left unnamed is
    label: str  # what the progress display counts
    default_n: int  # samples (per prompt) when none are asked for

    def check(self, loaded: LoadedModel) -> None:
        """InputError for a model of the other domain."""

    def prompts(
        self, given: list[PromptInput | None], length: int | None, loaded: LoadedModel, chat: bool
    ) -> tuple[list[Prompt], int]:
        """The prompts as the sampler sees them, and the continuation's length."""
        raise NotImplementedError

    def record_fields(self, loaded: LoadedModel, decode: str) -> Callable[[Draw], dict]:
        """What a record adds for a sample of this domain (read once per run)."""
        return lambda draw: {}

    def tally(self, constraints: list, method: str, own_draws: int = 0) -> Tally:
        return Tally(constraints, method, own_draws)

    def summary(self, tally: Tally, elapsed: float, shape: Shape) -> str:
        """The closing line."""
        raise NotImplementedError


class MoleculeTally(Tally):
    def __init__(self, constraints: list, method: str, own_draws: int = 0):
        super().__init__(constraints, method, own_draws)
        self.molecules: list[MoleculeReport] = []  # each record's molecule, described

    def add(self, row: dict) -> None:
        super().add(row)
        described = {f.name: row[f.name] for f in fields(MoleculeReport)}
        self.molecules.append(MoleculeReport(**described))

    def progress(self) -> str:
        valid = sum(m.valid for m in self.molecules)
        tally = f"valid {valid}/{self.count}"
        return tally + (f", violating {self.violating}" if self.constraints else "")


class Molecules(Domain):
    name, label, default_n = "molecules", "molecules", 16

    def check(self, loaded: LoadedModel) -> None:
        if isinstance(loaded.tokenizer, TextTokenizer):
            raise InputError(f"model {loaded.name} is a text model: use `cdd generate`")

    def prompts(
        self, given: list[PromptInput | None], length: int | None, loaded: LoadedModel, chat: bool
    ) -> tuple[list[Prompt], int]:
        return [Prompt()], loaded.config.model_length

    def record_fields(self, loaded: LoadedModel, decode: str) -> Callable[[Draw], dict]:
        # `novel` judged against what a novelty constraint calls known by default, named.
        reference, against = default_reference(loaded.directory) or (None, None)
        return lambda draw: {
            **describe(draw.text, reference).fields(),
            "novel_against": against,
            "decode": decode,
        }

    def tally(self, constraints: list, method: str, own_draws: int = 0) -> Tally:
        return MoleculeTally(constraints, method, own_draws)

    def summary(self, tally: Tally, elapsed: float, shape: Shape) -> str:
        assert isinstance(tally, MoleculeTally)
        summary = summarise(tally.molecules)
        novelty = "n/a" if summary.novelty is None else f"{summary.novelty:.1%}"
        unique = f"{summary.uniqueness:.1%}" if summary.valid else "n/a"  # as `cdd eval` says
        return (
            f"{summary.total} molecules in {elapsed:.1f}s ({summary.total / elapsed:.1f}/s, "
            f"{shape.steps} steps, {shape.device}): valid {summary.validity:.1%}, unique "
            f"{unique} of valid, novel {novelty} of unique valid; mean QED "
            f"{summary.mean_qed or 'n/a'}, mean SA {summary.mean_sa or 'n/a'} [{CANONICALIZER}]"
            f"{tally.note()}"
        )


class Text(Domain):
    name, label, default_n = "text", "samples", 4

    def check(self, loaded: LoadedModel) -> None:
        if not isinstance(loaded.tokenizer, TextTokenizer):
            raise InputError(
                f"model {loaded.name} is not a text model (its tokenizer reads SMILES)"
            )

    def prompts(
        self, given: list[PromptInput | None], length: int | None, loaded: LoadedModel, chat: bool
    ) -> tuple[list[Prompt], int]:
        return tokenize_prompts(given, length, loaded, chat)

    def summary(self, tally: Tally, elapsed: float, shape: Shape) -> str:
        return (
            f"{tally.count} samples ({shape.prompts} prompt(s) x {shape.n}, {shape.length} "
            f"tokens, {shape.steps} steps, {shape.device}) in {elapsed:.1f}s, "
            f"{tally.seconds / max(tally.count, 1):.2f}s per sample{tally.note()}"
        )


DOMAINS: dict[str, Domain] = {d.name: d for d in (Molecules(), Text())}


def tokenize_prompts(
    given: list[PromptInput | None],
    asked: int | None,
    loaded: LoadedModel,
    chat: bool = False,
) -> tuple[list[Prompt], int]:
    """Token ids of each prompt (with `chat`, wrapped in the model's chat template) and the
    continuation length; a prompt that leaves no room for `--length` tokens in the model's
    length is refused."""
    limit = loaded.config.model_length
    template = read_template(loaded.directory) if chat else None
    prompts = []
    for index, one in enumerate(given):
        if one is None:
            if template is not None:
                raise InputError(
                    "chat needs a prompt", cli="--chat needs a prompt (--prompt or --prompts)"
                )
            prompts.append(Prompt(index))
            continue
        text = one.text if template is None else apply_template(*template, one.text)
        size = len(text.encode("utf-8"))
        if size > loaded.tokenizer.longest_token_bytes * limit:  # refused before tokenizing
            raise InputError(
                f"prompt {index} ({size:,} bytes) cannot fit model {loaded.name}'s length of "
                f"{limit} tokens"
            )
        ids = torch.tensor(loaded.tokenizer.encode(text), dtype=torch.long)
        prompts.append(Prompt(index, text, ids, one.id, one.text if template else None))
    index = max(range(len(prompts)), key=lambda i: len(prompts[i].ids))
    longest = len(prompts[index].ids)
    length = asked or min(DEFAULT_LENGTH, limit - longest)
    if length <= 0 or longest + length > limit:
        need = "leaves no room in" if asked is None else f"+ length {length} exceed"
        problem = f"prompt {index} ({longest} tokens) {need} model {loaded.name}'s length of "
        problem += f"{limit} tokens"
        # The command line names the length by its flag (the first "+ length": the model's
        # name comes after it).
        raise InputError(problem, cli=problem.replace("+ length", "+ --length", 1))
    return prompts, length
