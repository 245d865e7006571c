"""Resumable training for the surrogates: a loop's whole state in OUT, safetensors + JSON.

`train_state.safetensors` holds the weights, AdamW's moments and step counts, the random
generators' states and any tensor the loop needs to go on (e.g. the current epoch's order);
`train_state.json` the step, AdamW's parameter groups (learning rate, betas), the scheduler's
state and the run's settings. A run started again with the same settings continues where the
last save left it and ends with the same weights as an uninterrupted run; with other settings
it refuses (an InputError), so two runs never mix in one folder. A finished run removes its
state (the toxicity classifier's would be 40 MB beside a 13 MB model): running it again
trains afresh.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from cdd_cli.errors import InputError

STATE = "train_state.safetensors"
META = "train_state.json"


@dataclass
class TrainingState:
    """What a surrogate's training loop is made of, for saving and resuming it."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    generators: dict[str, torch.Generator]
    settings: dict[str, Any]  # what must match for a resume (steps, sizes, seed, ...)
    scheduler: Any | None = None  # a torch LR scheduler, if the loop uses one
    step: int = 0
    extra: dict[str, torch.Tensor] = field(default_factory=dict)  # loop tensors to keep

    def save(self, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        tensors = {f"model.{k}": v for k, v in self.model.state_dict().items()}
        optimizer = self.optimizer.state_dict()
        for index, state in optimizer["state"].items():
            for key, value in state.items():
                tensors[f"optimizer.{index}.{key}"] = torch.as_tensor(value)
        tensors.update({f"rng.{k}": g.get_state() for k, g in self.generators.items()})
        tensors.update({f"extra.{k}": v for k, v in self.extra.items()})
        tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
        meta = {
            "step": self.step,
            "settings": self.settings,
            "param_groups": optimizer["param_groups"],
            "scheduler": None if self.scheduler is None else self.scheduler.state_dict(),
        }
        # Written aside and moved into place, so an interruption leaves the last good save.
        save_file(tensors, str(out / (STATE + ".tmp")))
        (out / (META + ".tmp")).write_text(json.dumps(meta, indent=1) + "\n")
        (out / (STATE + ".tmp")).replace(out / STATE)
        (out / (META + ".tmp")).replace(out / META)

    def resume(self, out: Path) -> bool:
        """Load the state saved in `out`; False when there is none."""
        if not (out / META).is_file() or not (out / STATE).is_file():
            return False
        meta = json.loads((out / META).read_text())
        if meta["settings"] != self.settings:
            saved = meta["settings"]
            changed = sorted(k for k in self.settings if saved.get(k) != self.settings[k])
            raise InputError(
                f"{out}: holds a run with other settings ({', '.join(changed)}); "
                "use another --out or the same settings"
            )
        tensors = load_file(str(out / STATE))
        self.model.load_state_dict(
            {k[len("model.") :]: v for k, v in tensors.items() if k.startswith("model.")}
        )
        state: dict[int, dict[str, torch.Tensor]] = {}
        for key, value in tensors.items():
            if key.startswith("optimizer."):
                _, index, name = key.split(".", 2)
                state.setdefault(int(index), {})[name] = value
        self.optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
        for name, generator in self.generators.items():
            generator.set_state(tensors[f"rng.{name}"])
        self.extra = {k[len("extra.") :]: v for k, v in tensors.items() if k.startswith("extra.")}
        if self.scheduler is not None:
            self.scheduler.load_state_dict(meta["scheduler"])
        self.step = meta["step"]
        return True

    @staticmethod
    def discard(out: Path) -> None:
        """Remove the saved state: the run is finished and its model saved."""
        for name in (STATE, META):
            (out / name).unlink(missing_ok=True)
