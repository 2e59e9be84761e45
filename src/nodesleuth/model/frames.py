"""Which kernel code a stack frame is, by function name: the one home of the frame classes that
explain's hypotheses (explain/family/, explain/chain.py), the dose-response (explain/dose.py) and
the profile's per-sample families (profile/families.py) all count, so they cannot disagree. The
profile applies it once per stack (profile/samples.py `Samples.classes`, profile/families.py for the
exporter's live shares); explain reads those bits and never classifies a stack itself.

Names are matched as the kernel's symbols read in /proc/kallsyms (and so in perf's and the direct
reader's stacks); each expression lists the functions of every kernel generation still in use
(5.10's isolate_lru_pages beside 6.x's isolate_lru_folios, 6.x's handle_softirqs beside __do_softirq).
"""

from __future__ import annotations

import re

MEMCG = re.compile(r"mem_cgroup|memcg|cgroup_rstat|css_rstat|lruvec|shrink_node_memcgs|numa_stat|memory_stat|"
                   r"try_to_free_mem_cgroup_pages|drain_all_stock|obj_cgroup")
# kernel code of the other causes of a hot core (explain/family/): page reclaim (direct or kswapd) and
# lock spinning (spinlocks, optimistic mutex/rwsem spinning)
RECLAIM = re.compile(r"shrink_|try_to_free_pages|do_try_to_free_pages|__alloc_pages_slowpath|balance_pgdat|kswapd|"
                     r"try_to_free_mem_cgroup_pages|isolate_lru_folios|isolate_lru_pages|lru_gen_shrink|evict_folios")
LOCK = re.compile(r"native_queued_spin_lock_slowpath|queued_spin_lock_slowpath|__pv_queued_spin_lock_slowpath|"
                  r"osq_lock|mutex_spin_on_owner|rwsem_spin_on_owner|rwsem_down_\w+_slowpath|__mutex_lock|"
                  r"_raw_spin_lock\b|_raw_spin_lock_irq|do_raw_spin_lock|queued_read_lock_slowpath|"
                  r"queued_write_lock_slowpath")
SOFTIRQ = re.compile(r"__do_softirq|handle_softirqs|net_rx_action|net_tx_action|napi|irq_exit|sysvec_|"
                     r"asm_common_interrupt|do_IRQ|tasklet")

# what classify() says of a stack, as bits: a kernel frame (vDSO frames excluded) of each class above, and
# whether the leaf (the running function) is a kernel frame, and a vDSO one
IS_MEMCG, IS_RECLAIM, IS_LOCK, IS_SOFTIRQ, KERNEL_LEAF, VDSO_LEAF = 1, 2, 4, 8, 16, 32
VDSO = ("__vdso_", "__kernel_", "[vdso]")  # user code the kernel maps into every process
_CLASSES = ((MEMCG, IS_MEMCG), (RECLAIM, IS_RECLAIM), (LOCK, IS_LOCK), (SOFTIRQ, IS_SOFTIRQ))


def classify(stack) -> int:
    """The frame classes of one stack (root first, leaf last, kernel frames suffixed "_[k]"), as the bits
    above: the one classification of a sample, made by the profile (Samples.classes, profile/families.py)
    and read by explain's core profile (explain/chain.py) and the dose-response (explain/dose.py)."""
    kframes = [f for f in stack if f.endswith("_[k]") and not f.startswith(VDSO)]
    out = 0
    for pat, bit in _CLASSES:
        if any(pat.search(f) for f in kframes):
            out |= bit
    if stack and stack[-1].endswith("_[k]"):
        out |= KERNEL_LEAF | (VDSO_LEAF if stack[-1].startswith(VDSO) else 0)
    return out
