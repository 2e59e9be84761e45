"""The recorder's memory outside its tables stays bounded (issue 38, the soak with --profile): the
store's zstd compression contexts do not keep the tables of the largest record they ever compressed,
and glibc's malloc hands big transient blocks back to the kernel instead of keeping them in its heap."""

from __future__ import annotations

import os
import random
import subprocess
import sys

from nodesleuth.store.segment import KEEP_CONTEXT_BYTES, SegmentReader, SegmentWriter


def _payload(n: int, seed: int) -> bytes:
    rng = random.Random(seed)
    words = [f"{rng.getrandbits(40):010x}" for _ in range(3000)]
    return " ".join(rng.choice(words) for _ in range(n // 11 + 1)).encode()[:n]


def test_a_big_record_does_not_leave_a_big_compression_context(tmp_path):
    w = SegmentWriter(str(tmp_path), "s", level=6)
    small = [_payload(2000, i) for i in range(5)]
    big = _payload(4 << 20, 99)  # a profile aggregate's size on a busy node
    t = 1000.0
    w.append(t, small[0])
    held_small = w.cctx.memory_size()
    for i, p in enumerate([big] + small[1:]):
        t += 1
        w.append(t, p)
        # the old writer kept the context that compressed 4 MB: 3.4 MB of tables, for good
        assert w.cctx is None or w.cctx.memory_size() < 2 * held_small + (1 << 20), w.cctx.memory_size()
    assert held_small < 1 << 20
    w.close()
    seg = [f for f in os.listdir(tmp_path / "s") if f.endswith(".seg")]
    got = [p for _, p in SegmentReader(str(tmp_path / "s" / seg[0])).frames()]
    assert got == small[:1] + [big] + small[1:]  # the records read back the same
    assert len(big) > KEEP_CONTEXT_BYTES


PROBE = r"""
import ctypes, sys
from nodesleuth.record.recorder import bound_heap
class MI(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MI
if sys.argv[1] == "bound":
    assert bound_heap()
x = bytearray(16 << 20)  # a big transient block (a fork storm's ring read, a big binary's symbols)
del x
before = libc.mallinfo2().hblkhd
blocks = [bytearray(1 << 20) for _ in range(32)]  # then many blocks smaller than it, some kept
mapped = libc.mallinfo2().hblkhd - before
print(mapped >> 20)
"""


def test_big_blocks_stay_mapped_after_a_bigger_one_was_freed(tmp_path):
    """glibc raises its mmap threshold to each mmapped block freed: after one 16 MB block, 1 MB blocks
    came from the heap (where they fragment it and stay in RSS). With bound_heap they are mappings."""
    if not hasattr(os, "confstr") or "glibc" not in (os.confstr("CS_GNU_LIBC_VERSION") or ""):
        import pytest

        pytest.skip("not glibc")
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="", MALLOC_ARENA_MAX="")
    env.pop("MALLOC_MMAP_THRESHOLD_")
    env.pop("MALLOC_ARENA_MAX")

    def mapped(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", PROBE, mode], env=env, check=True, capture_output=True,
                             text=True).stdout
        return int(out.split()[-1])

    assert mapped("default") < 8  # glibc's own behaviour, the one this bound changes
    assert mapped("bound") >= 32
