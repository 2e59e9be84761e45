"""Which tasks ran on which CPU: /proc/PID/task/TID/stat, field 39 (processor) and utime+stime.

Threads are read, not just processes: a Go daemon like kubelet spreads work over many threads
and the main thread's field 39 says nothing about where the hot thread ran.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import InputError
from .root import Root


@dataclass(frozen=True)
class Task:
    tid: int
    pid: int
    comm: str
    ticks: int  # utime + stime, in USER_HZ
    processor: int  # CPU it last ran on (field 39)
    starttime: int  # jiffies after boot (field 22)


def parse_task_stat(data: bytes, pid: int, path: str) -> Task:
    """Parse one stat line; comm may hold spaces and parentheses, so split at the last ')'."""
    try:
        text = data.decode(errors="replace")
        lp = text.index("(")
        rp = text.rindex(")")
        tid = int(text[:lp])
        comm = text[lp + 1:rp]
        rest = text[rp + 2:].split()
        # rest[0] is field 3 (state): field n is rest[n - 3]
        ticks = int(rest[11]) + int(rest[12])
        return Task(tid, pid, comm, ticks, int(rest[36]), int(rest[19]))
    except (ValueError, IndexError):
        raise InputError(path, f"malformed stat line {data[:80]!r}") from None


def _read(path: str) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None  # the task exited between listdir and open: normal churn
    try:
        return os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_tasks(root: Root, threads: bool = True) -> dict[int, Task]:
    """All tasks now, keyed by tid. Vanishing tasks are skipped; malformed files raise."""
    proc = root.join("/proc")
    out: dict[int, Task] = {}
    try:
        names = os.listdir(proc)
    except OSError as e:
        raise InputError(proc, e.strerror or str(e)) from None
    for name in names:
        if not name.isdigit():
            continue
        pid = int(name)
        if threads:
            tdir = f"{proc}/{name}/task"
            try:
                tids = os.listdir(tdir)
            except OSError:
                tids = None
            if tids:
                for tid in tids:
                    path = f"{tdir}/{tid}/stat"
                    data = _read(path)
                    if data:
                        t = parse_task_stat(data, pid, path)
                        out[t.tid] = t
                continue
        path = f"{proc}/{name}/stat"
        data = _read(path)
        if data:
            t = parse_task_stat(data, pid, path)
            out[t.tid] = t
    return out


@dataclass(frozen=True)
class ProcUse:
    """CPU a process used on one CPU over an interval."""

    pid: int
    comm: str
    cpu: int
    pct: float  # percent of that one CPU


def per_cpu_usage(prev: dict[int, Task], cur: dict[int, Task], interval_ticks: float) -> list[ProcUse]:
    """Attribute each task's tick delta to the CPU it was last seen on, summed per (pid, cpu).

    The attribution is approximate for tasks that migrate within the interval, which is why it
    is sampled every second: a pinned hot loop or a per-CPU kthread is attributed exactly.
    """
    acc: dict[tuple[int, int], list] = {}
    for tid, t in cur.items():
        p = prev.get(tid)
        if p is None or p.starttime != t.starttime:
            continue  # new task: no baseline (its lifetime ticks would be over-attributed)
        d = t.ticks - p.ticks
        if d <= 0:
            continue
        key = (t.pid, t.processor)
        slot = acc.get(key)
        if slot is None:
            comm = cur[t.pid].comm if t.pid in cur else t.comm
            acc[key] = [comm, d]
        else:
            slot[1] += d
    if interval_ticks <= 0:
        return []
    return [ProcUse(pid, comm, cpu, 100.0 * d / interval_ticks) for (pid, cpu), (comm, d) in acc.items()]


def clock_ticks() -> int:
    return os.sysconf("SC_CLK_TCK")
