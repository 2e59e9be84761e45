"""Per-CPU utilisation from a single read of /proc/stat per tick (sysstat PR #439: read it once).

The arithmetic is mpstat's (sysstat 12.x: mpstat.c get_global_cpu_mpstats / write_plain_cpu_stats,
rd_stats.c get_per_cpu_interval, common.c ll_sp_value), so our figures equal `mpstat -P ALL` to
its 2 decimals, including the awkward cases a node really has:
- the kernel already folds guest into user and guest_nice into nice: %usr = user - guest,
  %nice = nice - guest_nice, and the interval leaves the guest columns out;
- a CPU taken offline vanishes from /proc/stat: its row is hidden and its last counters are kept
  as the reference, so when it comes back its idle/iowait (which restart from 0) are rebased
  instead of making a false 100% busy; a CPU with no reference at all is hidden and left out of
  "all";
- any other counter that goes backwards prints 0, and a negative interval wraps modulo 2^64 like
  C's unsigned long long (the whole row prints 0.00);
- "all" is the sum of the shown CPUs' counters over the sum of their intervals (not the aggregate
  `cpu` line, except on a one-CPU machine);
- one snapshot gives since-boot figures (the reference is all zeros), as `mpstat` with no interval.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import sub
from typing import TYPE_CHECKING

from .errors import InputError
from .procfs import numbers

if TYPE_CHECKING:
    import numpy as np

FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")
U, N, S, I, W, HI, SI, ST, G, GN = range(10)  # /proc/stat column order
WRAP = 1 << 64  # sysstat's counters are unsigned long long
LIM = WRAP - 1 - 0x7ffff  # get_per_cpu_interval: above this a counter is taken to have overflowed
COLUMNS = ("usr", "nice", "sys", "iowait", "irq", "soft", "steal", "guest", "gnice", "idle")  # mpstat's, in its order


@dataclass(slots=True, unsafe_hash=True)
class CpuUtil:
    """One CPU's mpstat columns over an interval, in percent (0..100). Treated as immutable but not
    frozen: ~100 are made every second, and a frozen dataclass's __init__ costs several times a slotted
    one's."""

    cpu: int  # -1 means all CPUs
    usr: float
    nice: float
    sys: float
    iowait: float
    irq: float
    soft: float
    steal: float
    guest: float
    gnice: float
    idle: float

    @property
    def busy(self) -> float:
        """Time the CPU was running something: the sum of mpstat's non-idle, non-iowait columns.

        Summed rather than 100 - idle - iowait: when counters went backwards mpstat prints those
        columns as 0.00 (idle too), and 100 - 0 would be a false 100% busy, a false hot core.
        """
        return self.usr + self.nice + self.sys + self.irq + self.soft + self.steal + self.guest + self.gnice

    def row(self) -> tuple[float, ...]:
        return tuple(getattr(self, c) for c in COLUMNS)

    def mpstat(self) -> str:
        """The row's ten columns as mpstat prints them (`%7.2f` each)."""
        return "".join(" %7.2f" % v for v in self.row())

    def to_dict(self) -> dict:
        """mpstat's columns, 2 decimals, and busy: a CPU's row in dump, check and the web."""
        return {**{k: round(v, 2) for k, v in zip(COLUMNS, self.row())}, "busy": round(self.busy, 2)}


@dataclass(frozen=True)
class CpuTimes:
    """Jiffies counters of one /proc/stat read: key -1 is the all-CPU line, N is cpuN."""

    cpus: dict[int, tuple[int, ...]]
    btime: int
    # cpu0..cpuN-1 as an int64 array when /proc/stat lists them all in order with 10 columns each and
    # no counter near 2^63 (the usual node): interval() then does a tick's per-CPU arithmetic at once
    mat: np.ndarray | None = field(default=None, compare=False, repr=False)


WI, UN, GGN = [W, I], [U, N], [G, GN]
BUSY_COLS = [U, N, S, HI, SI, ST, G, GN]  # _busy_d's order
# CPUs from which the one-pass parse (16) and the array arithmetic (32) cost less than the per-line,
# per-CPU Python (benchmarks/results/summary.md, design measurements); numpy is imported only then, so small hosts never load it
PARSE_AT_ONCE, ARRAYS_AT_ONCE = 16, 32
SAFE = 1 << 62  # below this, int64 differences of counters are exact and no mod-2^64 case can arise


def _fast_rows(text: str) -> "np.ndarray | None":
    """The cpuN lines as an (N, 10) int64 array in one parse (splitting 96 lines one by one every tick
    is the dearer part of a read), or None where the block is not the usual one: a CPU missing (offline), fewer columns, a
    huge counter. parse_stat then reads it line by line, which also says what is malformed."""
    i = text.find("\ncpu0 ")
    last = text.rfind("\ncpu")
    if i < 0 or last < i or text.find(f"\ncpu{PARSE_AT_ONCE - 1} ", i) < 0:
        return None
    import numpy as np

    j = text.find("\n", last + 1)
    block = text[i + 1:j if j >= 0 else len(text)]
    n = block.count("\n") + 1
    a = numbers(block.replace("cpu", " "))
    if a is None or a.size != n * 11:
        return None
    a = a.reshape(n, 11)
    if int(a.max(initial=0)) >= SAFE or not np.array_equal(a[:, 0], np.arange(n, dtype=np.uint64)):
        return None
    return a[:, 1:].astype(np.int64)


def parse_btime(text: str, path: str = "/proc/stat") -> int | None:
    """/proc/stat's `btime` (boot time, epoch seconds; it follows the long intr line); None without one."""
    i = -1 if text.startswith("btime ") else text.find("\nbtime ")
    if i < 0 and not text.startswith("btime "):
        return None
    j = text.find("\n", i + 1)
    line = text[i + 1:j if j >= 0 else None]
    try:
        return int(line.split()[1])
    except (IndexError, ValueError):
        raise InputError(path, f"malformed btime line {line!r}") from None


def parse_stat(text: str, path: str = "/proc/stat", fast: bool = True) -> CpuTimes:
    mat = _fast_rows(text) if fast else None
    if mat is not None:
        head = text[:text.find("\n")].split()
        if head[:1] == ["cpu"] and len(head) == 11 and all(x.isdigit() for x in head[1:]):
            cpus = {-1: tuple(map(int, head[1:]))}
            cpus.update(enumerate(map(tuple, mat.tolist())))
            btime = parse_btime(text, path)
            if btime is not None:
                return CpuTimes(cpus=cpus, btime=btime, mat=mat)
    cpus: dict[int, tuple[int, ...]] = {}
    for line in text.splitlines():
        if line.startswith("cpu"):
            parts = line.split()
            name = parts[0]
            try:
                vals = tuple(map(int, parts[1:11]))
            except ValueError:
                raise InputError(path, f"malformed line {line[:60]!r}") from None
            if len(vals) < 4:
                raise InputError(path, f"too few columns in {name!r}")
            vals = vals + (0,) * (10 - len(vals))
            if name == "cpu":
                cpus[-1] = vals
            else:
                try:
                    cpus[int(name[3:])] = vals
                except ValueError:
                    raise InputError(path, f"malformed cpu name {name!r}") from None
        elif line.startswith("intr"):
            break  # everything after is irrelevant here; the intr line is long
    if -1 not in cpus:
        raise InputError(path, "no aggregate 'cpu' line")
    return CpuTimes(cpus=cpus, btime=parse_btime(text, path) or 0)


def _tot(c) -> int:
    """Jiffies of one CPU without guest/guest_nice (user and nice already include them), mod 2^64."""
    return (c[U] + c[N] + c[S] + c[I] + c[W] + c[HI] + c[ST] + c[SI]) % WRAP


def _rebase(scc, scp) -> list[int]:
    """rd_stats.c get_per_cpu_interval(): the reference with idle/iowait rebased where they went back
    (iowait mis-accounting when idle grew; otherwise the CPU came back online and restarted them)."""
    p = list(scp)
    if scc[W] < p[W] and p[W] < LIM:
        p[W] = scc[W] if (scc[I] > p[I] or p[I] >= LIM) else 0
    if scc[I] < p[I] and p[I] < LIM:
        p[I] = 0
    return p


def _itv(c, p) -> int:
    """get_per_cpu_interval()'s result for current c against the rebased reference p: the jiffies
    between them, mod 2^64, with a drop of (user-guest) or (nice-guest_nice) shifted out."""
    ishift = 0
    for x, g in ((U, G), (N, GN)):
        cu, pu = (c[x] - c[g]) % WRAP, (p[x] - p[g]) % WRAP
        if cu < pu:
            ishift += pu - cu
    return (_tot(c) - _tot(p) + ishift) % WRAP


def _row(cpu: int, c, p, itv: int) -> CpuUtil:
    """write_plain_cpu_stats(): ll_sp_value() is 0 where a counter went back, else
    (double)(c - p) / itv * 100 in that order (so the last digit rounds as mpstat's does)."""
    def pc(a: int, b: int) -> float:
        a, b = a % WRAP, b % WRAP
        return 0.0 if b < a else float(b - a) / float(itv) * 100

    return CpuUtil(cpu=cpu, usr=pc(p[U] - p[G], c[U] - c[G]), nice=pc(p[N] - p[GN], c[N] - c[GN]), sys=pc(p[S], c[S]),
                   iowait=pc(p[W], c[W]), irq=pc(p[HI], c[HI]), soft=pc(p[SI], c[SI]), steal=pc(p[ST], c[ST]),
                   guest=pc(p[G], c[G]), gnice=pc(p[GN], c[GN]), idle=pc(p[I], c[I]))


def _plain(c, p) -> bool:
    """Counters for which _rebase changes nothing and no value needs the mod-2^64 wrap: every column
    in [0, LIM), idle and iowait not gone back, guest within user and guest_nice within nice in both
    reads. Then the deltas alone give _itv and _row exactly (what from_deltas computes)."""
    return (c[W] >= p[W] and c[I] >= p[I] and c[U] >= c[G] and c[N] >= c[GN] and p[U] >= p[G]
            and p[N] >= p[GN] and min(p) >= 0 and max(c) < LIM)


def _from_d(cpu: int, d, itv: int) -> CpuUtil:
    """from_deltas() for a full 10-column delta and its interval, inlined (96+ CPUs every second)."""
    if not itv:
        return CpuUtil(cpu, *TICKLESS)
    f = float(itv)
    return CpuUtil(cpu, *[0.0 if x < 0 else float(x) / f * 100 for x in (
        d[U] - d[G], d[N] - d[GN], d[S], d[W], d[HI], d[SI], d[ST], d[G], d[GN], d[I])])


def _busy_d(d, itv: int) -> float:
    """CpuUtil.busy of _from_d(cpu, d, itv) without making the row: the same per-column floats added
    in the same order, so the same double (the recorder needs only this; it stores the jiffies)."""
    if not itv:
        return 0.0
    f = float(itv)
    usr, nice, sys_, hi, si, st, g, gn = [0.0 if x < 0 else float(x) / f * 100 for x in (
        d[U] - d[G], d[N] - d[GN], d[S], d[HI], d[SI], d[ST], d[G], d[GN])]
    return usr + nice + sys_ + hi + si + st + g + gn


TICKLESS = (0.0,) * 9 + (100.0,)  # a CPU present but with no counter moved: mpstat prints 100 %idle


@dataclass(frozen=True)
class Interval:
    """What mpstat shows for one pair of reads.

    `deltas`: per shown CPU (-1 = "all"), the column deltas against the rebased reference; they can
    be negative where a counter went backwards (from_deltas turns them into mpstat's row again).
    `carry`: the next reference, with offline CPUs' last counters carried forward.
    """

    deltas: dict[int, tuple[int, ...]]
    util: dict[int, CpuUtil]
    carry: CpuTimes
    busy: dict[int, float] | None = None  # per shown CPU (not "all"), with busy_only

def interval(prev: CpuTimes | None, cur: CpuTimes, ncpu: int | None = None, busy_only: bool = False) -> Interval:
    """mpstat's report between two reads (`mpstat -P ALL N`), or since boot when prev is None.

    `busy_only` (the recorder, which stores the deltas): `util` holds only "all" and `busy` each
    shown CPU's CpuUtil.busy, the same figures without ~100 rows made a second.

    `ncpu`: the CPUs mpstat counts (cpuN directories in /sys/devices/system/cpu);
    without it, every CPU seen in either read (what `mpstat -H` does when CPUs are hot-added)."""
    if busy_only and prev is not None:
        fast = _busy_all_plain(prev, cur, ncpu)
        if fast is not None:
            return fast
    since_boot = prev is None
    pc = {} if prev is None else prev.cpus
    ids = sorted({c for c in cur.cpus if c >= 0} | {c for c in pc if c >= 0}) if ncpu is None else range(ncpu)
    zero = (0,) * 10
    carry = dict(cur.cpus)
    deltas: dict[int, tuple[int, ...]] = {}
    util: dict[int, CpuUtil] = {}
    call, pall = [0] * 10, [0] * 10
    deltot = 0
    shown_c, shown_p = [], []
    busy: dict[int, float] | None = {} if busy_only else None
    for c in ids:
        scc, scp = cur.cpus.get(c, zero), pc.get(c, zero)
        if not _tot(scc):  # offline now: hidden, and its last counters stay the reference
            carry[c] = scp
            continue
        if not _tot(scp) and not since_boot:  # back online with no reference: hidden, not in "all"
            continue
        if _plain(scc, scp):  # the usual case, same figures (see _plain) at a third of the cost
            d = deltas[c] = tuple(map(sub, scc, scp))
            itv = _d_itv(d)
            if busy is not None:
                busy[c] = _busy_d(d, itv)
            else:
                util[c] = _from_d(c, d, itv)
            p = scp
        else:
            p = _rebase(scc, scp)
            deltas[c] = tuple(a - b for a, b in zip(scc, p))
            itv = _itv(scc, p)
            u = _row(c, scc, p, itv) if itv else CpuUtil(c, *TICKLESS)
            if busy is not None:
                busy[c] = u.busy
            else:
                util[c] = u
        deltot += itv
        shown_c.append(scc)
        shown_p.append(p)
    deltot %= WRAP
    # the sums mod 2^64 once rather than per CPU: the same residues
    call = [sum(col) % WRAP for col in zip(*shown_c)] if shown_c else [0] * 10
    pall = [sum(col) % WRAP for col in zip(*shown_p)] if shown_p else [0] * 10
    if len(ids) <= 1 and -1 in cur.cpus:  # a one-CPU machine: mpstat keeps the aggregate line
        call = list(cur.cpus[-1])
        pall = _rebase(call, pc.get(-1, zero))
        deltot = _itv(call, pall)
    deltas[-1] = tuple(a - b for a, b in zip(call, pall))
    util[-1] = _row(-1, call, pall, deltot or 1)  # "all" cannot be tickless: 0.00 everywhere, %idle too
    return Interval(deltas, util, CpuTimes(carry, cur.btime), busy)


def _busy_all_plain(prev: CpuTimes, cur: CpuTimes, ncpu: int | None) -> Interval | None:
    """interval(prev, cur, ncpu, busy_only=True) at once for all CPUs, when both reads hold the same
    CPUs 0..N-1 (N > 1, none offline, N = ncpu if given) and every CPU is _plain: the same deltas,
    intervals and busy doubles (each column's float(x) / itv * 100 added left to right, as _busy_d),
    the same "all" row and carry. None: the per-CPU loop decides (offline CPUs, rebasing, wraps)."""
    c, p = cur.mat, prev.mat
    if (c is None or p is None or c.shape != p.shape or c.shape[0] < max(2, ARRAYS_AT_ONCE)
            or (ncpu is not None and ncpu != c.shape[0])):
        return None
    import numpy as np  # mat exists: numpy is loaded already

    if not ((c[:, :8].sum(axis=1) > 0).all() and (p[:, :8].sum(axis=1) > 0).all()):
        return None  # a CPU with no counters at all (offline now, or back with no reference)
    # _plain for every CPU (mat holds no counter near 2^63, so nothing wraps)
    if not ((c[:, WI] >= p[:, WI]).all() and (c[:, UN] >= c[:, GGN]).all() and (p[:, UN] >= p[:, GGN]).all()):
        return None
    d = c - p
    itv = d[:, :8].sum(axis=1) + np.maximum(0, d[:, G] - d[:, U]) + np.maximum(0, d[:, GN] - d[:, N])
    if (itv < 0).any():
        return None  # an interval that wraps modulo 2^64
    x = d[:, BUSY_COLS]
    x[:, :2] -= d[:, GGN]  # usr = user - guest, nice - guest_nice
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.where(x < 0, 0.0, x.astype(np.float64) / itv.astype(np.float64)[:, None] * 100)
    busy = v[:, 0] + v[:, 1]  # added left to right, as _busy_d's Python floats
    for k in range(2, v.shape[1]):
        busy += v[:, k]
    busy[itv == 0] = 0.0
    ids = range(c.shape[0])
    deltas: dict[int, tuple[int, ...]] = dict(zip(ids, map(tuple, d.tolist())))
    call = [int(x) % WRAP for x in c.sum(axis=0).tolist()]
    pall = [int(x) % WRAP for x in p.sum(axis=0).tolist()]
    deltot = int(itv.sum()) % WRAP
    deltas[-1] = tuple(a - b for a, b in zip(call, pall))
    util = {-1: _row(-1, call, pall, deltot or 1)}
    return Interval(deltas, util, CpuTimes(dict(cur.cpus), cur.btime, cur.mat), dict(zip(ids, busy.tolist())))


def utilisation(prev: CpuTimes | None, cur: CpuTimes, ncpu: int | None = None) -> dict[int, CpuUtil]:
    """Percent per CPU between two reads, as mpstat prints them; since boot when prev is None."""
    return interval(prev, cur, ncpu).util


def unchanged(a: CpuTimes, b: CpuTimes) -> bool:
    """Two reads with identical per-CPU counters: a recorded tree, not a live /proc."""
    return {c: v for c, v in a.cpus.items() if c >= 0} == {c: v for c, v in b.cpus.items() if c >= 0}


def _d_itv(d) -> int:
    return (sum(d[:8]) + max(0, d[G] - d[U]) + max(0, d[GN] - d[N])) % WRAP


def from_deltas(cpu: int, deltas: tuple[int, ...], itv: int | None = None) -> CpuUtil:
    """Percentages from one interval's jiffy deltas (what the store keeps; see Interval.deltas).

    The same row as interval() gave, except for counters within a few jiffies of 2^64 (the deltas
    do not keep the absolute values the unsigned comparisons need)."""
    d = tuple(deltas) + (0,) * (10 - len(deltas))
    itv = _d_itv(d) if itv is None else itv
    if not itv and cpu >= 0:
        return CpuUtil(cpu, *TICKLESS)
    itv = float(itv or 1)

    def pc(x: int) -> float:
        return 0.0 if x < 0 else float(x) / itv * 100

    return CpuUtil(cpu=cpu, usr=pc(d[U] - d[G]), nice=pc(d[N] - d[GN]), sys=pc(d[S]), iowait=pc(d[W]), irq=pc(d[HI]),
                   soft=pc(d[SI]), steal=pc(d[ST]), guest=pc(d[G]), gnice=pc(d[GN]), idle=pc(d[I]))
