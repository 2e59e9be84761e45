"""Family kernel: one process on the core, >= half of it in kernel code that is not memcg, reclaim,
softirq or lock spinning (explain/chain.py CoreProfile.kernel_of)."""

from __future__ import annotations

from .common import Context, Hypothesis
from .registry import family
from .user import process


@family("kernel", rank=80)
def kernel(ctx: Context) -> Hypothesis:
    return process(ctx, True)
