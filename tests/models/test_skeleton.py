"""A checkpoint's shapes come from a meta build without torch's reference implementations
(models/skeleton.py): their first use costs a second or more of every start."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn

from cdd_cli.models.a2d import A2DConfig, A2DModel
from cdd_cli.models.skeleton import meta_build


def test_a_meta_build_has_the_real_builds_shapes_and_allocates_nothing():
    config = A2DConfig(
        vocab_size=64, hidden_dim=16, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=32
    )
    skeleton = meta_build(lambda: A2DModel(config))
    real = A2DModel(config).state_dict()
    shapes = {k: (tuple(v.shape), v.dtype) for k, v in skeleton.state_dict().items()}
    assert shapes == {k: (tuple(v.shape), v.dtype) for k, v in real.items()}
    assert all(v.is_meta for v in skeleton.state_dict().values())
    # Random fills on the CPU, outside a meta build, still draw.
    embedding = nn.Embedding(8, 4)
    assert embedding.weight.std() > 0
    assert torch.empty(100).normal_(std=2.0).std() > 1


@pytest.mark.slow
def test_loading_the_shipped_surrogates_and_models_leaves_torchs_compiler_unimported():
    # A fresh interpreter: this test process may have imported it for other reasons.
    code = (
        "import sys\n"
        "from cdd_cli.constraints.surrogates import SHIPPED_SURROGATES\n"
        "from cdd_cli.models.surrogate import load_surrogate\n"
        "from cdd_cli.models import registry\n"
        "for name in ('sa', 'toxicity'):\n"
        "    load_surrogate(SHIPPED_SURROGATES[name])\n"
        "registry.load('default-molecules', 'molecules', 'cpu', None)\n"
        "from cdd_cli.models.a2d import A2DConfig, A2DModel\n"
        "from cdd_cli.models.skeleton import meta_build\n"
        "config = A2DConfig(vocab_size=64, hidden_dim=16, n_layers=1, n_heads=4, n_kv_heads=2,"
        " ffn_dim=32)\n"
        "meta_build(lambda: A2DModel(config))  # nn.Embedding's fill goes through nn.init\n"
        "print(sorted(m for m in ('torch._dynamo', 'sympy') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
