"""Readers of /proc and /sys text formats: text in, records out (no file is opened here, so a
recorded tree, a live /proc and a test string read alike). Each raises InputError naming the file
and the problem when the text is not shaped as the kernel writes it."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from .errors import InputError

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class Mount:
    fstype: str  # "cgroup" (v1) or "cgroup2"
    path: str  # host-absolute mount point
    controllers: tuple[str, ...]  # v1 controllers (super options); empty for cgroup2
    read_only: bool = False  # mounted ro (the per-mount options, mountinfo's 6th field)


class MountEntry(NamedTuple):
    """One line of /proc/PID/mountinfo (proc_pid_mountinfo(5)): the fields nodesleuth reads."""

    path: str  # mount point (5th field, octal escapes of spaces undone)
    fstype: str  # first field after " - "
    read_only: bool  # "ro" among the per-mount options (6th field)
    super_options: str  # third field after " - " ("" when absent)


def parse_mount_table(text: str, path: str) -> list[MountEntry]:
    """Every mount of a mountinfo file, in its order."""
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            left, right = line.split(" - ", 1)
            lf = left.split()
            rf = right.split()
            out.append(MountEntry(lf[4].replace("\\040", " "), rf[0], "ro" in lf[5].split(","),
                                  rf[2] if len(rf) > 2 else ""))
        except (ValueError, IndexError):
            raise InputError(path, f"malformed line {line[:80]!r}") from None
    return out


def mount_holding(mounts: list[MountEntry], path: str) -> MountEntry | None:
    """The mount that holds the absolute `path`: the longest mount point above it, the last mounted of
    equals (the one on top)."""
    best: MountEntry | None = None
    for m in mounts:
        if (path == m.path or path.startswith(m.path.rstrip("/") + "/")) and (best is None
                                                                              or len(m.path) >= len(best.path)):
            best = m
    return best


def parse_mountinfo(text: str, path: str) -> list[Mount]:
    """The cgroup (v1) and cgroup2 mounts of a mountinfo file."""
    out = []
    for m in parse_mount_table(text, path):
        if m.fstype == "cgroup":
            ctrls = tuple(o for o in m.super_options.split(",") if o not in ("rw", "ro") and "=" not in o)
            out.append(Mount("cgroup", m.path, ctrls, m.read_only))
        elif m.fstype == "cgroup2":
            out.append(Mount("cgroup2", m.path, (), m.read_only))
    return out


def parse_proc_cgroups(text: str, path: str) -> list[tuple[str, int, int, int]]:
    rows = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 4:
            raise InputError(path, f"expected 4 columns, got {len(parts)} in {line!r}")
        name = parts[0]
        rows.append((name, parse_int(path, parts[1], f"hierarchy of {name}"),
                     parse_int(path, parts[2], f"num_cgroups of {name}"),
                     parse_int(path, parts[3], f"enabled of {name}")))
    if not rows:
        raise InputError(path, "no controller rows")
    return rows


def parse_cgroup_stat(text: str, path: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2:
            raise InputError(path, f"malformed line {line!r}")
        out[parts[0]] = parse_int(path, parts[1], parts[0])
    if "nr_dying_descendants" not in out:
        raise InputError(path, "no nr_dying_descendants line")
    return out


def parse_meminfo(text: str, path: str = "/proc/meminfo", keys: tuple[str, ...] | None = None) -> dict[str, int]:
    """Values in bytes (the kernel writes kB). With `keys`, only those lines are parsed (the recorder
    keeps six of ~55, every second); MemTotal is always required."""
    lines = text.splitlines()
    if keys is not None:
        body = "\n" + text
        lines = []
        for k in dict.fromkeys(("MemTotal",) + tuple(keys)):
            i = body.find(f"\n{k}:")
            if i >= 0:
                j = body.find("\n", i + 1)
                lines.append(body[i + 1:j if j >= 0 else len(body)])
    out = {}
    for line in lines:
        if not line.strip():
            continue
        try:
            key, rest = line.split(":", 1)
            parts = rest.split()
            val = int(parts[0])
        except (ValueError, IndexError):
            raise InputError(path, f"malformed line {line!r}") from None
        out[key] = val * 1024 if len(parts) > 1 and parts[1] == "kB" else val
    if "MemTotal" not in out:
        raise InputError(path, "no MemTotal line")
    return out


class Task(NamedTuple):
    """One /proc/PID/stat (a tuple: made ~100 times a second on a busy node, cheaper than a frozen
    dataclass)."""

    tid: int
    pid: int
    comm: str
    ticks: int  # utime + stime, in USER_HZ
    processor: int  # CPU it last ran on (field 39)
    starttime: int  # jiffies after boot (field 22)
    nthreads: int = 1  # field 20


def parse_task_stat(data: bytes, pid: int, path: str) -> Task:
    """Parse one stat line; comm may hold spaces and parentheses, so split at the last ')'."""
    try:
        lp = data.index(b"(")
        rp = data.rindex(b")")
        tid = int(data[:lp])
        comm = data[lp + 1:rp].decode(errors="replace")
        rest = data[rp + 2:].split(None, 37)  # up to field 39; the ~13 fields after it stay unsplit
        # rest[0] is field 3 (state): field n is rest[n - 3]
        return Task(tid, pid, comm, int(rest[11]) + int(rest[12]), int(rest[36]), int(rest[19]), int(rest[17]))
    except (ValueError, IndexError):
        raise InputError(path, f"malformed stat line {data[:80]!r}") from None


def _ints(path: str, fields: list[str], n: int, line: str) -> list[int]:
    try:
        return list(map(int, fields[:n]))
    except ValueError:
        raise InputError(path, f"malformed line {line[:60]!r}") from None


AT_ONCE = 8  # CPUs from which one parse of the table costs less than int() per count (benchmarks/results/summary.md, design measurements)


def parse_softirqs(text: str, path: str = "/proc/softirqs", fast: bool = True) -> dict[str, list[int]]:
    lines = text.splitlines()
    if not lines or not lines[0].split() or not lines[0].split()[0].startswith("CPU"):
        raise InputError(path, "no CPU header line")
    n = len(lines[0].split())
    rows = [(line, *line.partition(":")) for line in lines[1:]]
    rows = [(name.strip(), rest, line) for line, name, sep, rest in rows if sep]
    # all rows in one parse when each has exactly the header's n counts (96 CPUs: 0.36 -> 0.05 ms);
    # otherwise row by row, which keeps only the first n and names a malformed line
    a = numbers(" ".join(r[1] for r in rows)) if rows and fast and n >= AT_ONCE else None
    if a is not None and a.size == n * len(rows) and int(a.max(initial=0)) < 1 << 62:
        return dict(zip((r[0] for r in rows), a.reshape(len(rows), n).tolist()))
    return {name: _ints(path, rest.split(), n, line) for name, rest, line in rows}


def parse_interrupts(text: str, keys: list[str], path: str = "/proc/interrupts") -> dict[str, list[int]]:
    """Per-CPU counts of the IRQ lines whose description contains one of `keys`."""
    lines = text.splitlines()
    if not lines:
        raise InputError(path, "empty file")
    n = len(lines[0].split())
    out = {}
    for line in lines[1:]:
        if not any(k in line for k in keys):  # most lines are not the NIC's: skip without splitting
            continue
        irq, sep, rest = line.partition(":")
        if not sep:
            continue
        fields = rest.split()
        desc = " ".join(fields[n:])
        if any(k in desc for k in keys):
            name = fields[-1] if fields else irq.strip()
            out[f"{irq.strip()}:{name}"] = _ints(path, fields, n, line)
    return out


def online_columns(text: str) -> list[int]:
    """The CPU numbers of /proc/interrupts' columns (its header: online CPUs only, "CPU0 CPU1 ...")."""
    head = text.split("\n", 1)[0].split()
    try:
        return [int(h[3:]) for h in head]
    except ValueError:
        return []


def _psi_some(text: str, key: str, kind=int):
    for line in text.splitlines():
        if line.startswith("some "):
            for tok in line.split():
                if tok.startswith(key + "="):
                    try:
                        return kind(tok[len(key) + 1:])
                    except ValueError:
                        return None
    return None


def parse_psi_some_total(text: str) -> int | None:
    """The `some ... total=N` microseconds of a /proc/pressure/* file."""
    return _psi_some(text, "total")


def parse_psi_some_avg10(text: str) -> float | None:
    """The `some avg10=X` percentage (of the last 10 s some task stalled) of a /proc/pressure/* file."""
    return _psi_some(text, "avg10", float)


def parse_int(path: str, text: str, what: str) -> int:
    """int() that names the file and the field when the kernel file is malformed."""
    try:
        return int(text)
    except ValueError:
        raise InputError(path, f"malformed {what}: {text!r} is not an integer") from None


def numbers(text: str) -> "np.ndarray | None":
    """The whitespace-separated unsigned integers of a kernel table's text, parsed in one C pass
    (an order of magnitude cheaper than int() on each at 96 CPUs); None where something else
    stands among them (the caller then reads it line by line and names what is malformed)."""
    import numpy as np

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # numpy < 2.3 warns instead of raising
        try:
            a = np.fromstring(text, dtype=np.uint64, sep=" ")
        except ValueError:
            return None
    return a


def cpu_list_count(text: str, path: str) -> int:
    """How many CPUs a kernel CPU list names ("0-15", "0-3,8-11"; /sys/devices/system/cpu/possible)."""
    n = len(parse_cpu_list(text, path))
    if not n:
        raise InputError(path, f"malformed CPU list {text.strip()!r}")
    return n


SOFTNET_COLS = {"processed": 0, "dropped": 1, "time_squeeze": 2, "received_rps": 9, "flow_limit_count": 10,
                "backlog_len": 11}  # 0-based columns of /proc/net/softnet_stat (net/core/net-procfs.c)


def parse_processes(text: str, path: str = "/proc/stat") -> int:
    """/proc/stat's `processes` line: forks (and clones: threads too) since boot, node-wide
    (fs/proc/stat.c, total_forks)."""
    at = text.find("\nprocesses ")
    if at < 0:
        raise InputError(path, "no 'processes' line")
    try:
        return int(text[at + 11:text.index("\n", at + 1)])
    except ValueError:
        raise InputError(path, "the 'processes' line is not a number") from None


def parse_softnet(text: str, online: list[int] | None, path: str = "/proc/net/softnet_stat") -> dict[int, dict]:
    """Per CPU, the columns this kernel prints: {cpu: {"processed": n, ...}}.

    One row per *online* CPU, every field hex u32, no header; the width says the generation: 9 (2.6:
    processed, dropped, time_squeeze, 5 zeros, cpu_collision), 10 (+received_rps, 2.6.35; RHEL 7),
    11 (+flow_limit_count, 3.11), 13 (+backlog_len and the CPU's id, 5.10; RHEL 8.5), 15
    (+input_qlen, process_qlen, 6.4). Width 12 is a vendor's (Android 4.19: gro_coalesced), so
    columns past 11 are trusted only from 13. The CPU is column 13 where printed, else the i-th
    online CPU (`online`, from /sys/devices/system/cpu/online read at the same moment), never the
    row number (node_exporter before 1.6 mislabels every CPU after an offline one)."""
    rows = [line.split() for line in text.splitlines() if line.strip()]
    if not rows:
        raise InputError(path, "no rows")
    out: dict[int, dict] = {}
    for i, r in enumerate(rows):
        if len(r) < 9:
            raise InputError(path, f"row {i + 1} has {len(r)} columns, a kernel prints at least 9")
        try:
            vals = [int(x, 16) for x in r]
        except ValueError:
            raise InputError(path, f"row {i + 1} is not hex: {' '.join(r)[:60]!r}") from None
        if len(vals) >= 13:
            cpu = vals[12]
        elif online is not None and i < len(online):
            cpu = online[i]
        else:
            cpu = i
        if cpu in out:  # a kernel prints each online CPU once (hand-made fixtures repeat an index)
            raise InputError(path, f"CPU {cpu} appears twice (row {i + 1}): not a kernel's softnet_stat")
        out[cpu] = {k: vals[c] for k, c in SOFTNET_COLS.items()
                    if c < len(vals) and (c < 11 or len(vals) >= 13)}
    return out


def parse_cpu_list(text: str, path: str) -> list[int]:
    """The CPUs a kernel CPU list names, in order ("0-3,8-11" -> [0, 1, 2, 3, 8, 9, 10, 11])."""
    out: list[int] = []
    try:
        for part in text.strip().split(","):
            if part.strip():
                a, _, b = part.partition("-")
                out += range(int(a), int(b or a) + 1)
    except ValueError:
        raise InputError(path, f"malformed CPU list {text.strip()!r}") from None
    return out


def parse_netstat(text: str, path: str, want: set[str] | None = None) -> dict[str, int]:
    """/proc/net/netstat and /proc/net/snmp (and /proc/PID/net/*): pairs of lines `Prefix: Name1 Name2 ...`
    / `Prefix: v1 v2 ...` (net/ipv4/proc.c snmp_seq_show, netstat_seq_show), read by name, never by
    position (TcpExt has 102 names in 3.10 and 135 in 6.18). Keys are node_exporter's `Prefix_Name`
    (Tcp_RetransSegs, TcpExt_TCPTimeouts); `want`: only those keys. Values are decimal; IpExt octets
    are 64-bit and Tcp MaxConn is signed (-1), so int() of the text, never a fixed width."""
    out: dict[str, int] = {}
    lines = [ln for ln in text.splitlines() if ln.strip()]
    i = 0
    while i + 1 < len(lines):
        head, vals = lines[i].split(), lines[i + 1].split()
        if not head or not head[0].endswith(":") or head[0] != vals[0]:
            i += 1  # a header without its value line (e.g. a truncated read): resynchronise on the next pair
            continue
        if len(head) != len(vals):
            raise InputError(path, f"{head[0]} has {len(head) - 1} names but {len(vals) - 1} values")
        pfx = head[0][:-1]
        for k, v in zip(head[1:], vals[1:]):
            key = f"{pfx}_{k}"
            if want is None or key in want:
                try:
                    out[key] = int(v)
                except ValueError:
                    raise InputError(path, f"{key} is not a number: {v[:30]!r}") from None
        i += 2
    if not out and want is None:
        raise InputError(path, "no `Prefix: names` / `Prefix: values` line pairs")
    return out
