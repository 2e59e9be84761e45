"""The recorder's memory outside its tables stays bounded (issue 38, the soak with --profile): the
store's zstd compression contexts do not keep the tables of the largest record they ever compressed,
and glibc's malloc hands big transient blocks back to the kernel instead of keeping them in its heap."""

from __future__ import annotations

import os
import subprocess
import sys



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
