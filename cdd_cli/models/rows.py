"""The same sample, the same numbers, whoever shares its batch.

A matrix product's rows are computed independently, but the kernel a BLAS library picks
depends on the number of rows: on this project's CPUs (oneDNN/MKL through torch) products of
fewer than about 13 rows take another path whose sums round differently in the last bit,
while every product of 16 rows or more gives each row the same bits. A sample's numbers
therefore changed with its batch-mates wherever a product's row count does: the noise-level
conditioning of a DiT ([B, d]: one row a sample), the logits of the few positions still
masked late in sampling, a surrogate's head on pooled sequences, and the ALM, which projects
only the samples still violating. Its iterations amplify a last-bit difference into another
token, so the same seed gave other records at another batch size, shard count or resume.

`floor_rows` makes every linear layer of a model compute at least `MIN_ROWS` rows, padding
with zero rows that are dropped again, so each product takes the path a full batch takes.
The cost is only where products are tiny (latency-bound anyway). A GPU's BLAS also picks by
row count above 16 (split-K kernels), so there this is not a guarantee: see bench/README.md.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

MIN_ROWS = 16


def with_rows(product: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """`product(x)` for a product over x's last axis, computed on at least MIN_ROWS rows (the
    leading axes flattened): x's own rows are what comes back."""
    rows = x[..., 0].numel()
    if rows >= MIN_ROWS:
        return product(x)
    flat = x.reshape(rows, x.shape[-1])
    padded = torch.cat([flat, flat.new_zeros(MIN_ROWS - rows, flat.shape[-1])])
    out = product(padded)[:rows]
    return out.reshape(*x.shape[:-1], *out.shape[1:])


def linear_rows(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """F.linear on at least MIN_ROWS rows (for a product not made by an nn.Linear, e.g. an
    output layer tied to the embedding table)."""
    return with_rows(lambda rows: F.linear(rows, weight, bias), x)


def floor_rows(model: nn.Module) -> nn.Module:
    """Every nn.Linear of `model` computes at least MIN_ROWS rows (in place; returns it)."""
    for layer in model.modules():
        if isinstance(layer, nn.Linear) and not getattr(layer, "rows_floored", False):
            forward = layer.forward
            layer.forward = lambda x, forward=forward: with_rows(forward, x)
            layer.rows_floored = True
    return model
