"""The memory controller's ID space: 65,535 IDs, and which memory cgroups hold one on which kernel.

mkdir of a memory cgroup allocates a 16-bit ID (mem_cgroup_alloc: idr_alloc / xa_alloc over
1..MEM_CGROUP_ID_MAX, MEM_CGROUP_ID_MAX = (1 << MEM_CGROUP_ID_SHIFT) - 1 = 65535, include/linux/memcontrol.h);
when none is free the mkdir fails with ENOSPC ("no space left on device"). Whether a removed (dying) memcg
still holds its ID is the kernel's rule, read in mm/memcontrol.c and measured in QEMU (tests/vm/memcg_ids.py,
benchmarks/results/memcg_ids.json, docs/memcg-ids.md):

* before 4.8 the memcg's ID was its css ID (css_alloc_id / cgroup_idr, capped at 65535 for memory): a dying
  memcg kept it until it was freed, so zombies alone exhaust the space (RHEL/CentOS 7's 3.10: runc#1725,
  kubernetes#61937).
* 4.8 (73f576c04b94 "mm: memcontrol: fix cgroup creation failure after many small jobs") gave memcg a private
  ID space: mem_cgroup_css_offline() ends with mem_cgroup_id_put(memcg), and the last put runs
  mem_cgroup_id_remove() (idr_remove; xa_erase since the xarray conversion in 6.x; mem_cgroup_private_id_put()
  in 7.x): the ID goes back at offline. "The only exception to that are records of swapped out tmpfs/shmem
  pages" (the comment above MEM_CGROUP_ID_MAX): each swap entry takes a reference
  (mem_cgroup_id_get_online / mem_cgroup_id_get_many in __mem_cgroup_try_charge_swap and
  mem_cgroup_swapout), so a memcg removed with pages in swap keeps its ID until they are swapped in or freed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ID_MAX = 65535  # MEM_CGROUP_ID_MAX; ID 0 is never handed out (alloc starts at 1)


@dataclass(frozen=True)
class IdRule:
    since: tuple[int, int]  # first kernel release (major, minor) the rule holds for
    dying_hold: str  # "all": every dying memcg keeps its ID | "swap": only those with swap entries
    source: str  # where it was read
    measured: str  # where it was measured ("" = read, not measured)


# newest first; the first whose `since` <= the running release applies
RULES: tuple[IdRule, ...] = (
    IdRule((4, 8), "swap",
           "mm/memcontrol.c 4.8..7.2: mem_cgroup_css_offline() -> mem_cgroup_id_put() (7.x: "
           "mem_cgroup_private_id_put(memcg, 1)) -> mem_cgroup_id_remove() releases the ID at offline; swap "
           "entries hold references (mem_cgroup_id_get_online/_get_many in __mem_cgroup_try_charge_swap, "
           "mem_cgroup_swapout); commit 73f576c04b94 (4.8)",
           "tests/vm/memcg_ids.py on 5.10, 6.1, 6.12, 7.2: benchmarks/results/memcg_ids.json"),
    IdRule((0, 0), "all",
           "before 4.8 the memcg ID is the css ID (mem_cgroup_id() = css.id), freed with the css: a dying "
           "memcg keeps it (commit 73f576c04b94's message; runc#1725 and kubernetes#61937 on 3.10)",
           ""),
)


def mkdir_errno(rel: tuple[int, int] | None) -> str:
    """What a memcg mkdir fails with when no ID is free: idr_alloc's -ENOSPC until the IDs moved to an xarray,
    whose xa_alloc returns -EBUSY when the range is full (measured: ENOSPC on 5.10 and 6.1, EBUSY on 6.12 and 7.2;
    tests/vm/memcg_ids.py). The xarray change was posted in August 2024 (the 6.12 cycle): releases between
    6.1 and 6.12 are not measured here."""
    return "EBUSY" if rel is not None and rel >= (6, 12) else "ENOSPC"


def release(text: str) -> tuple[int, int] | None:
    """(major, minor) of a kernel release string (`uname -r`, /proc/sys/kernel/osrelease)."""
    m = re.match(r"\s*(\d+)\.(\d+)", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def rule_for(rel: tuple[int, int] | None) -> IdRule | None:
    if rel is None:
        return None
    return next(r for r in RULES if rel >= r.since)


@dataclass(frozen=True)
class IdUse:
    """How many of the 65,535 IDs are held: `low` for certain, `high` at most (dying ones whose hold depends
    on swap entries nobody can count from /proc are between the two)."""
    live: int
    dying: int
    low: int
    high: int
    rule: IdRule | None
    swap: bool | None  # swap configured (SwapTotal > 0); None unknown

    @property
    def ratio(self) -> float:
        return self.high / ID_MAX


def id_use(live: int, dying: int, rule: IdRule | None, swap_total_kib: int | None) -> IdUse:
    """IDs held by `live` live memcgs (the root included: mem_cgroup_alloc gives it one like any other) and
    `dying` ones on a kernel with `rule`. Unknown rule or unknown swap: up to all of them."""
    if rule is not None and rule.dying_hold == "all":
        return IdUse(live, dying, live + dying, live + dying, rule, swap_total_kib and swap_total_kib > 0)
    swap = None if swap_total_kib is None else swap_total_kib > 0
    if rule is not None and swap is False:
        return IdUse(live, dying, live, live, rule, swap)
    return IdUse(live, dying, live, live + dying, rule, swap)


def node_rule(osrelease: str | None, meminfo: str | None) -> tuple[IdRule | None, int | None]:
    """(rule, SwapTotal KiB) from the texts of /proc/sys/kernel/osrelease and /proc/meminfo (None: unread)."""
    m = re.search(r"^SwapTotal:\s+(\d+) kB", meminfo or "", re.M)
    return rule_for(release(osrelease or "")), int(m.group(1)) if m else None


# --- the failures already logged: a cgroup mkdir that got ENOSPC or ENOMEM -------------------------------
# The forms, each seen in a public report (tests/data/memcg-ids/failures.json has the lines and URLs):
# kubelet:  "... failed to create container for [kubepods besteffort pod...] : mkdir /sys/fs/cgroup/memory/kubepods/...: no space left on device"
# runc (docker, containerd): "... applying cgroup configuration for process caused \"mkdir /sys/fs/cgroup/memory/docker/...: no space left on device\""
# coreutils mkdir: "mkdir: cannot create directory '/sys/fs/cgroup/memory/test/test-100': No space left on device"
# lxc:      "utils.c:mkdir_p:253 - No space left on device - failed to create directory '/sys/fs/cgroup/memory//lxc/...'"
_ERR = r"(?P<{}>no space left on device|cannot allocate memory|device or resource busy)"
FAILURE = re.compile(
    r"mkdir (?P<path>/sys/fs/cgroup/\S*?):? " + _ERR.format("err")
    + r"|cannot create directory .(?P<path2>/sys/fs/cgroup/[^'\u2019\s]*).: " + _ERR.format("err2")
    + r"|" + _ERR.format("err3") + r" - failed to create directory '(?P<path3>/sys/fs/cgroup/[^']*)'",
    re.IGNORECASE)


@dataclass(frozen=True)
class MkdirFailure:
    path: str
    errno: str  # ENOSPC | EBUSY (6.12+: the IDs' xarray is full) | ENOMEM
    who: str  # kubelet | runc | mkdir | lxc | containerd | unknown
    line: str


def mkdir_failure(line: str) -> MkdirFailure | None:
    """A log line saying a cgroup mkdir failed with ENOSPC or ENOMEM, or None."""
    m = FAILURE.search(line)
    if m is None:
        return None
    path = m.group("path") or m.group("path2") or m.group("path3") or ""
    err = (m.group("err") or m.group("err2") or m.group("err3")).lower()
    low = line.lower()
    who = ("kubelet" if "kubelet" in low or "failed to create container for [kubepods" in low
           else "mkdir" if m.group("path2") else "lxc" if m.group("path3")
           else "runc" if "applying cgroup configuration" in low or "oci runtime" in low or "runc" in low
           else "containerd" if "containerd" in low else "unknown")
    code = "ENOSPC" if err.startswith("no space") else "EBUSY" if err.startswith("device") else "ENOMEM"
    return MkdirFailure(path, code, who, line.strip())
