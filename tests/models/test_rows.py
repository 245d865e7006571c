"""A sample's numbers do not depend on who shares its batch (models/rows.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cdd_cli.constraints.surrogates import SHIPPED_SURROGATES
from cdd_cli.models import registry
from cdd_cli.models.rows import MIN_ROWS, floor_rows, linear_rows, with_rows
from cdd_cli.models.surrogate import load_surrogate


def in_batches(fn, x: torch.Tensor, size: int) -> torch.Tensor:
    return torch.cat([fn(x[i : i + size]) for i in range(0, len(x), size)])


def test_a_linear_layer_gives_each_row_the_same_bits_in_any_batch():
    torch.manual_seed(0)
    layer = floor_rows(nn.Linear(96, 384))
    x = torch.randn(40, 96)
    with torch.no_grad():
        whole = layer(x)
        for size in (1, 3, 7, MIN_ROWS - 1, MIN_ROWS, 17):
            assert torch.equal(in_batches(layer, x, size), whole), size
    # Leading axes are rows too; what comes back has x's own shape, bias included.
    few = x[:2].view(2, 1, 96)
    expected = torch.nn.functional.linear(few, layer.weight, layer.bias)
    assert torch.allclose(linear_rows(few, layer.weight, layer.bias), expected, atol=1e-5)
    assert with_rows(lambda t: t @ torch.ones(96), x[:3]).shape == (3,)
    assert with_rows(lambda t: t * 2, x[:3, :1]).shape == (3, 1)  # one feature: still 3 rows
    # Wrapping twice does not wrap twice.
    forward = layer.forward
    assert floor_rows(layer) is layer and layer.rows_floored and layer.forward is forward


@pytest.mark.slow
def test_the_shipped_model_and_surrogate_predict_a_sample_alike_in_any_batch():
    loaded = registry.load(None, "molecules")
    model = floor_rows(loaded.model)
    length, vocab = loaded.config.model_length, loaded.config.vocab_size
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, vocab, (24, length), generator=generator)
    sigma = torch.rand(24, generator=generator)
    masked = torch.rand(24, length, generator=generator) < 0.1  # late in sampling: few rows
    surrogate = load_surrogate(SHIPPED_SURROGATES["sa"])
    soft = torch.randn(24, length, vocab, generator=generator).softmax(-1)
    with torch.no_grad():
        whole = model(tokens, sigma, where=masked)
        scores = surrogate(soft)
        for size in (1, 5, 7):
            parts = [
                model(tokens[i : i + size], sigma[i : i + size], where=masked[i : i + size])
                for i in range(0, 24, size)
            ]
            assert torch.equal(torch.cat(parts), whole), size
            assert torch.equal(in_batches(surrogate, soft, size), scores), size
