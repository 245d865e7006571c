"""Constraint types from plugins (`cdd_cli.plugins`) as constraints like cdd's own.

A plugin becomes a `Descriptor` like a built-in type's (`descriptor`): its keys are tau,
margin, surrogate and its own options. A judge-only plugin becomes an `ExactConstraint`: the
engine's search stages ask its judge directly. A plugin with a surrogate (its own, or one
trained on its judge by `cdd train surrogate` and named by the entry's `surrogate:` key)
becomes a `DifferentiableConstraint` and is projected by the ALM as well. A text plugin's
judge reads the continuation, and so does its surrogate (the prompt's rows are cut off).

The judge and surrogate are the plugin author's code, so every call is guarded: an exception,
a wrong number of scores, a score that is not a number, NaN, a surrogate of the wrong shape all
become a `PluginError` that names the plugin and its package, and so do a `sys.exit` and a
plugin's own `KeyboardInterrupt` (a real Ctrl-C stays the user's: `plugins_fault`). A judge
slower than `SLOW_JUDGE_SECONDS` a text is told once as a `PluginWarning` (the search may ask
it thousands of texts a sample).
"""

from __future__ import annotations

import contextlib
import math
import numbers
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from cdd_cli.constraints.base import DifferentiableConstraint, ExactConstraint
from cdd_cli.constraints.descriptor import NUMBER, ConstraintSpec, Descriptor, Key
from cdd_cli.constraints.surrogates import surrogate_for
from cdd_cli.errors import InputError, one_line
from cdd_cli.models.registry import LoadedModel
from cdd_cli.models.rows import with_rows
from cdd_cli.models.surrogate import SparseTokens, Tokens
from cdd_cli.plugins import ConstraintPlugin, PluginError, PluginWarning, plugins_fault, raised

SLOW_JUDGE_SECONDS = 0.05


class SoftTokens:
    """What a plugin's surrogate reads: per sample and position, a distribution over the
    model's vocabulary ([B, L, V]), held densely, sparsely (a support of K tokens a position)
    or as token ids (one-hot). `expect` reads it at the cost of its own form."""

    def __init__(self, tokens: Tokens, vocab_size: int):
        self.tokens, self.vocab_size = tokens, vocab_size

    @property
    def shape(self) -> tuple[int, int, int]:
        ids = self.tokens.ids if isinstance(self.tokens, SparseTokens) else self.tokens
        return (ids.shape[0], ids.shape[1], self.vocab_size)

    def expect(self, table: torch.Tensor) -> torch.Tensor:
        """The expectation of a per-token `table` ([V] or [V, D]) at each position: [B, L] or
        [B, L, D], differentiable in the probabilities."""
        tokens = self.tokens
        if isinstance(tokens, SparseTokens):
            picked = table[tokens.ids]  # [B, L, K(, D)]
            weights = tokens.weights.to(table.dtype)
            return (
                (weights * picked).sum(-1)
                if table.dim() == 1
                else (weights[..., None] * picked).sum(-2)
            )
        if not tokens.is_floating_point():
            return table[tokens]
        return with_rows(lambda t: t @ table, tokens.to(table.dtype))

    def probs(self) -> torch.Tensor:
        """The dense [B, L, V] tensor (for a large vocabulary, `expect` costs far less)."""
        tokens = self.tokens
        if isinstance(tokens, SparseTokens):
            dense = tokens.weights.new_zeros(self.shape)
            return dense.scatter_add(-1, tokens.ids, tokens.weights)
        if not tokens.is_floating_point():
            return F.one_hot(tokens, self.vocab_size).float()
        return tokens


@dataclass
class Guarded:
    """A plugin's calls, each checked; problems name the plugin and its package."""

    plugin: ConstraintPlugin
    package: str
    options: dict[str, Any]
    texts: int = 0
    seconds: float = 0.0
    warned: bool = False

    def fail(self, what: str) -> PluginError:
        return PluginError(f"plugin '{self.plugin.name}' ({self.package}): {what}")

    def judge(self, texts: list[str]) -> list[float | None]:
        started = time.perf_counter()
        try:
            with contextlib.redirect_stdout(sys.stderr):  # stdout carries the records
                scores = list(self.plugin.judge(list(texts), self.options))
        except BaseException as exc:
            if not plugins_fault(exc):
                raise
            raise self.fail(f"its judge raised {raised(exc)}") from None
        self.timed(len(texts), time.perf_counter() - started)
        if len(scores) != len(texts):
            raise self.fail(f"its judge gave {len(scores)} scores for {len(texts)} texts")
        return [self.number(text, score) for text, score in zip(texts, scores, strict=True)]

    def number(self, text: str, score: Any) -> float | None:
        """A score as a float: any real number (Python's, numpy's, a 0-d tensor) or None."""
        if score is None:
            return None
        if isinstance(score, torch.Tensor) and score.numel() == 1:
            score = score.item()
        if isinstance(score, bool) or not isinstance(score, numbers.Real):
            raise self.fail(f"its judge scored {text!r} as {score!r}, not a number or None")
        try:
            value = float(score)
        except OverflowError:  # an integer past any float: not a score a record can hold
            value = math.inf if score > 0 else -math.inf
        if not math.isfinite(value):
            # A record holds strict JSON (no NaN or infinity), and an infinite score says
            # no more than None does.
            shown = "NaN" if math.isnan(value) else "infinity" if value > 0 else "-infinity"
            raise self.fail(f"its judge scored {text[:60]!r} as {shown} (None: cannot be scored)")
        return value

    def timed(self, texts: int, seconds: float) -> None:
        self.texts += texts
        self.seconds += seconds
        mean = self.seconds / self.texts
        # From the first call on, as the README promises: a run of one sample may ask the
        # judge only once, and is no less slow for that.
        if not self.warned and mean > SLOW_JUDGE_SECONDS:
            self.warned = True
            warnings.warn(
                PluginWarning(
                    f"plugin '{self.plugin.name}' ({self.package}): its judge takes "
                    f"{mean:.2f} s a text; the search may ask it thousands of texts a sample "
                    "(search.max_nodes bounds them)"
                ),
                stacklevel=2,
            )

    def surrogate(
        self, read: Callable[[SoftTokens], torch.Tensor], vocab_size: int
    ) -> Callable[[Tokens], torch.Tensor]:
        def guarded(tokens: Tokens) -> torch.Tensor:
            soft = SoftTokens(tokens, vocab_size)
            try:
                with contextlib.redirect_stdout(sys.stderr):
                    score = read(soft)
            except BaseException as exc:
                if not plugins_fault(exc):
                    raise
                raise self.fail(f"its surrogate raised {raised(exc)}") from None
            if not isinstance(score, torch.Tensor) or tuple(score.shape) != soft.shape[:1]:
                got = tuple(score.shape) if isinstance(score, torch.Tensor) else type(score)
                raise self.fail(f"its surrogate gave {got}, not one score a sample")
            if not torch.isfinite(score).all():
                raise self.fail("its surrogate gave a score that is not finite")
            return score

        return guarded


def repair_unit(plugin: ConstraintPlugin, tau: float) -> float:
    """How far one repair redraw tightens the surrogate's aim: a tenth of the tau range (SA's
    [1, 10]: 0.9, near its own 1.0), or of tau's size where the range is open."""
    low, high = plugin.tau_range
    width = high - low if math.isfinite(high - low) else max(abs(tau), 1.0)
    return 0.1 * width


class FromPlugin:
    """What a plugin's constraint takes from it, exact or differentiable: the guarded judge
    and the repair step."""

    guarded: Guarded
    tau: float

    @property
    def repair_unit(self) -> float:
        return repair_unit(self.guarded.plugin, self.tau)

    def judge(self, texts: list[str]) -> list[float | None]:
        return self.guarded.judge(texts)


@dataclass(frozen=True)
class JudgedPlugin(FromPlugin, ExactConstraint):
    guarded: Guarded | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class SurrogatePlugin(FromPlugin, DifferentiableConstraint):
    guarded: Guarded | None = field(default=None, compare=False, repr=False)
    read: Callable[[Tokens], torch.Tensor] | None = field(default=None, compare=False, repr=False)

    def surrogate(self, soft_tokens: Tokens) -> torch.Tensor:
        return self.read(soft_tokens[:, self.prompt_length :])


def plugin_constraint(
    plugin: ConstraintPlugin,
    package: str,
    options: dict[str, Any],
    vocabulary: Callable[[], list[str]],
    trained: Callable[[Tokens], torch.Tensor] | None = None,
) -> JudgedPlugin | SurrogatePlugin:
    """The constraint of one spec entry of `plugin` (`options`: the entry's, defaults filled).
    `trained`: a surrogate trained on the judge, used instead of the plugin's own.
    `vocabulary`: the model's token texts in id order (asked only for the plugin's surrogate)."""
    guarded = Guarded(plugin, package, options)
    common = {
        "tau": float(options["tau"]),
        "margin": float(options.get("margin", 0.0)),
        "name": plugin.name,
        "judge_name": f"plugin {package}",
        "upper_bound": plugin.bound == "upper",
        "guarded": guarded,
    }
    if trained is None and plugin.surrogate is None:
        return JudgedPlugin(**common)
    if trained is not None:
        return SurrogatePlugin(**common, read=trained)
    texts = vocabulary()
    try:
        with contextlib.redirect_stdout(sys.stderr):
            read = plugin.surrogate(options, texts)
    except BaseException as exc:
        if not plugins_fault(exc):
            raise
        raise guarded.fail(
            f"its surrogate builder raised {raised(exc)} (given this "
            f"model's vocabulary of {len(texts):,} tokens)"
        ) from None
    return SurrogatePlugin(**common, read=guarded.surrogate(read, len(texts)))


def descriptor(plugin: ConstraintPlugin, package: str) -> Descriptor:
    """The plugin as a constraint type of the one table (`constraints/table.py`)."""
    keys = {
        "tau": Key(NUMBER, required=plugin.tau_default is None),
        "margin": Key(NUMBER),
        # A surrogate trained on the plugin's judge (`cdd train surrogate`).
        "surrogate": Key((str,)),
        **{k: Key(o.types, o.required) for k, o in plugin.options.items()},
    }
    tau = {} if plugin.tau_default is None else {"tau": plugin.tau_default}

    def check(entry: ConstraintSpec) -> None:
        """The plugin's own check of an entry's values (it raises ValueError with the
        problem); anything else it raises is its defect."""
        if plugin.check is None:
            return
        try:
            with contextlib.redirect_stdout(sys.stderr):
                plugin.check(dict(entry.options))
        except ValueError as exc:
            # A spec entry's place (FILE:LINE) does not name its type; a flag's or an API
            # call's does ("--constraint x", "constraint 'x'"): named once either way.
            named = entry.where.startswith(("--constraint", "constraint "))
            where = entry.where if named else f"{entry.where}: constraint '{entry.type}'"
            raise InputError(f"{where}: {one_line(exc)}") from None
        except BaseException as exc:
            if not plugins_fault(exc):
                raise
            raise PluginError(
                f"{entry.where}: plugin '{entry.type}' ({package}) failed checking its options "
                f"({raised(exc)})"
            ) from None

    def build(
        entry: ConstraintSpec, model: LoadedModel, device: str, words: str
    ) -> list[JudgedPlugin | SurrogatePlugin]:
        options = entry.options
        trained = surrogate_for(entry, model, device) if "surrogate" in options else None
        return [plugin_constraint(plugin, package, options, model.tokenizer.token_texts, trained)]

    return Descriptor(
        name=plugin.name,
        domain=plugin.domain,
        description=plugin.description,
        keys=keys,
        defaults={**tau, "margin": 0.0},
        tau_range=plugin.tau_range,
        needs_tau=plugin.tau_default is None,
        check=check,
        build=build,
        source=package,
    )
