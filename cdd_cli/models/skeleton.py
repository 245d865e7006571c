"""A module's parameter shapes, from a build on the meta device that allocates nothing.

A checkpoint's header is compared with these shapes before any weight is read, so a config
asking for more than its file holds is refused without allocating. On the meta device a
random fill (`nn.Embedding`'s `normal_`), like any arithmetic, runs through torch's Python
reference implementations, whose first use imports `torch._dynamo` and sympy: about a
second on a quiet machine and three on a busy one, before the first progress line of every
run with a surrogate. Values on the meta device mean nothing, so here the fills are skipped
(a module's own arithmetic at build time must stay off the meta device: see dit.Rotary).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.overrides import TorchFunctionMode

# In-place random fills: on the meta device, the tensor as it is.
FILLS = {
    torch.Tensor.normal_,
    torch.Tensor.uniform_,
    torch.Tensor.bernoulli_,
    torch.Tensor.exponential_,
    torch.Tensor.geometric_,
    torch.Tensor.log_normal_,
    torch.Tensor.cauchy_,
    torch.Tensor.random_,
    # `nn.init`'s own, which modules' `reset_parameters` call (`nn.Embedding`: `normal_`);
    # they reach a mode as themselves, with the tensor as a keyword.
    torch.nn.init.uniform_,
    torch.nn.init.normal_,
    torch.nn.init.trunc_normal_,
    torch.nn.init.xavier_uniform_,
    torch.nn.init.xavier_normal_,
    torch.nn.init.kaiming_uniform_,
    torch.nn.init.kaiming_normal_,
    torch.nn.init.orthogonal_,
    torch.nn.init.sparse_,
}


class NoRandomFills(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in FILLS:
            return args[0] if args else kwargs["tensor"]
        return func(*args, **kwargs)


def meta_build(build: Callable[[], torch.nn.Module]) -> torch.nn.Module:
    """`build()` on the meta device, its random initialisation skipped."""
    with torch.device("meta"), NoRandomFills():
        return build()
