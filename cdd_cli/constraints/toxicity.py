"""Toxicity: a classifier's probability that the text is toxic must be at most tau (0..1).

Judge, as in the CDD paper: the shipped classifier's score on the decoded text (re-tokenized
with GPT-2, so anyone can recompute it from the text alone). Surrogate: the same classifier
reading soft tokens through its own embedding table. With `scope: continuation` (the default)
both see the continuation only; with `scope: full` the prompt too, as the reader sees it.
An independent judge (alt-profanity-check) is reported by `cdd eval`, never used here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from cdd_cli.constraints.base import DifferentiableConstraint
from cdd_cli.constraints.descriptor import NUMBER, ConstraintSpec, Descriptor, Key
from cdd_cli.constraints.surrogates import surrogate_for
from cdd_cli.models.registry import LoadedModel
from cdd_cli.models.surrogate import SoftTokenRegressor
from cdd_cli.models.tokenizers import Gpt2Tokenizer


@dataclass(frozen=True)
class ToxicityConstraint(DifferentiableConstraint):
    net: SoftTokenRegressor | None = field(default=None, compare=False, repr=False)
    tokenizer: Gpt2Tokenizer | None = field(default=None, compare=False, repr=False)
    scope: str = "continuation"
    name: str = "toxicity"
    judge_name: str = "cdd-toxicity-classifier"
    repair_unit = 0.2  # a probability: margin_step 0.25 tightens by 0.05 per redraw

    def surrogate(self, soft_tokens: torch.Tensor) -> torch.Tensor:
        if self.scope == "continuation":
            soft_tokens = soft_tokens[:, self.prompt_length :]
        return torch.sigmoid(self.net(soft_tokens))

    def judge(self, texts: list[str]) -> list[float | None]:
        if self.scope == "full":
            texts = [self.prompt + t for t in texts]
        limit = self.net.config.max_length
        device = self.net.embedding.device
        ids, mask = self.tokenizer.encode_padded(texts, limit)
        with torch.inference_mode():
            scores = torch.sigmoid(self.net(ids.to(device), mask.to(device)))
        return [round(v, 4) for v in scores.tolist()]


def build(
    entry: ConstraintSpec, model: LoadedModel, device: str, words: str
) -> list[ToxicityConstraint]:
    net = surrogate_for(
        entry, model, device, train="`cdd train toxicity-surrogate --model {name} --out DIR`"
    )
    return [
        ToxicityConstraint(
            tau=float(entry.tau),
            margin=float(entry.options["margin"]),
            net=net,
            tokenizer=model.tokenizer,
            scope=entry.options["scope"],
        )
    ]


DESCRIPTOR = Descriptor(
    name="toxicity",
    domain="text",
    description="the shipped classifier's probability that the text is toxic at most tau",
    keys={
        "tau": Key(NUMBER, required=True),
        "surrogate": Key((str,)),
        "margin": Key(NUMBER),
        # What is judged: the continuation alone (default: a fixed toxic prompt cannot make
        # the constraint infeasible) or the prompt and continuation as the reader sees them.
        "scope": Key((str,), choices=("continuation", "full")),
    },
    # margin: a probability, 0 as every family's: the surrogate aims at tau itself, and only a
    # repair redraw aims further inside. 0.05 aimed a 0.05 bound at 0 and drew fills far less
    # toxic than the model's own satisfying ones (9x rejection's null on the score; margin 0:
    # 2.2x; bench/README.md "How close to rejection's fills").
    defaults={"margin": 0.0, "scope": "continuation"},
    tau_range=(0.0, 1.0),
    needs_tau=True,
    build=build,
)
