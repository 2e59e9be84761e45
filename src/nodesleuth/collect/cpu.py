"""Per-CPU utilisation from a single read of /proc/stat per tick (sysstat PR #439: read it once).

Columns and arithmetic follow mpstat: the kernel already folds guest into user and guest_nice into
nice, so %usr = user - guest and %nice = nice - guest_nice, and the total excludes guest columns.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError
from .root import Root

FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")
COLUMNS = ("usr", "nice", "sys", "iowait", "irq", "soft", "steal", "guest", "gnice", "idle")


@dataclass(frozen=True)
class CpuTimes:
    """Jiffies counters of one /proc/stat read: key -1 is the all-CPU line, N is cpuN."""

    cpus: dict[int, tuple[int, ...]]
    btime: int


@dataclass(frozen=True)
class CpuUtil:
    """One CPU's mpstat columns over an interval, in percent (0..100)."""

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
        """Time the CPU was running something: everything but idle and iowait."""
        return max(0.0, 100.0 - self.idle - self.iowait)

    def row(self) -> tuple[float, ...]:
        return tuple(getattr(self, c) for c in COLUMNS)


def parse_stat(text: str, path: str = "/proc/stat") -> CpuTimes:
    cpus: dict[int, tuple[int, ...]] = {}
    btime = 0
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
        elif line.startswith("btime "):
            try:
                btime = int(line.split()[1])
            except (IndexError, ValueError):
                raise InputError(path, f"malformed btime line {line!r}") from None
        elif line.startswith("intr"):
            break  # everything after is irrelevant here; the intr line is long
    if -1 not in cpus:
        raise InputError(path, "no aggregate 'cpu' line")
    if not btime:  # btime follows the long intr line the loop stops at
        i = text.find("\nbtime ")
        if i >= 0:
            try:
                btime = int(text[i + 7:text.index("\n", i + 7) if "\n" in text[i + 7:] else None])
            except ValueError:
                raise InputError(path, "malformed btime line") from None
    return CpuTimes(cpus=cpus, btime=btime)


def read_stat(root: Root) -> CpuTimes:
    return parse_stat(root.read("/proc/stat"), root.join("/proc/stat"))


def _util(cpu: int, a: tuple[int, ...], b: tuple[int, ...]) -> CpuUtil | None:
    d = [y - x for x, y in zip(a, b)]
    if min(d) < 0:  # a counter went backwards (hotplug): clamp, as mpstat does
        d = [max(0, x) for x in d]
    user, nice, system, idle, iowait, irq, soft, steal, guest, gnice = d
    total = user + nice + system + idle + iowait + irq + soft + steal
    if total <= 0:
        return None
    usr = max(0, user - guest)
    nic = max(0, nice - gnice)
    f = 100.0 / total
    return CpuUtil(cpu, usr * f, nic * f, system * f, iowait * f, irq * f, soft * f, steal * f,
                   guest * f, gnice * f, idle * f)


def utilisation(prev: CpuTimes, cur: CpuTimes) -> dict[int, CpuUtil]:
    """Percent per CPU between two reads; CPUs absent from either read (offline) are skipped."""
    out: dict[int, CpuUtil] = {}
    for cpu, b in cur.cpus.items():
        a = prev.cpus.get(cpu)
        if a is None:
            continue
        u = _util(cpu, a, b)
        if u is not None:
            out[cpu] = u
    return out


def from_deltas(cpu: int, deltas: tuple[int, ...]) -> CpuUtil | None:
    """Percentages from one interval's jiffy deltas (what the store keeps)."""
    return _util(cpu, (0,) * len(deltas), deltas)
