"""A fast `perf script` parser into columns and interned stacks.

Unlike FlameScope (regex per line, comm cut at its first digit, CPU/PID/TID dropped) it keeps the
CPU, pid, tid and the full comm (kworker/3:1 stays itself, comms with spaces survive), and it runs
one regex per sample (the header), plain string splits per frame, and interns every stack once.
Frames are stored root-first; kernel frames get FlameGraph's `_[k]` suffix, `[unknown]` symbols
become `[dso basename]` as stackcollapse-perf.pl does.
"""

from __future__ import annotations

import gc
import os
import re
from dataclasses import dataclass, field

from ..errors import InputError

HEADER = re.compile(r"^\s*(?P<comm>.*?)\s+(?P<pid>-?\d+)(?:/(?P<tid>-?\d+))?\s+\[(?P<cpu>\d+)\]\s+"
                    r"(?P<time>\d+\.\d+):\s*(?:(?P<period>\d+)\s+)?(?P<event>[^\s:]+(?::[^\s:]*)*):")
# softirq/IRQ work that runs on top of the idle task is work, not idle (FlameScope #83, #143)
INTERRUPT = re.compile(r"irq|napi|net_rx_action|net_tx_action|tasklet|sysvec_|asm_common_interrupt|"
                       r"__do_softirq|handle_softirqs|apic_timer|hrtimer_interrupt|ena_io_poll|mlx5e_napi")
IDLE_FUNCS = re.compile(r"cpuidle|cpu_idle|do_idle|default_idle|native_safe_halt|safe_halt|mwait_idle|"
                        r"intel_idle|acpi_idle|poll_idle|cpu_startup_entry|xen_hypercall_sched_op")


@dataclass
class Batch:
    """Samples as columns; stacks and comms interned in tables local to the batch."""

    times: list[float] = field(default_factory=list)
    cpus: list[int] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    tids: list[int] = field(default_factory=list)
    comm_ids: list[int] = field(default_factory=list)
    stack_ids: list[int] = field(default_factory=list)
    comms: list[str] = field(default_factory=list)
    stacks: list[tuple[str, ...]] = field(default_factory=list)
    skipped: int = 0  # malformed or truncated samples
    event: str = ""

    def __len__(self) -> int:
        return len(self.times)


def frame_name(line: str) -> str | None:
    s = line.strip()
    if not s:
        return None
    addr, _, rest = s.partition(" ")
    if not rest:
        return f"[{addr}]"
    sym, sep, dso = rest.rpartition(" (")
    if not sep:
        sym, dso = rest, ""
    else:
        dso = dso[:-1] if dso.endswith(")") else dso
    plus = sym.rfind("+0x")
    if plus > 0:
        sym = sym[:plus]
    # kernel text and modules ([ena], [nf_conntrack]) live at kernel addresses
    kernel = dso.startswith("[kernel") or (dso.startswith("[") and addr.startswith("ffff"))
    if sym == "[unknown]" or not sym:
        base = os.path.basename(dso) if dso else "unknown"
        sym = f"[{base}]" if not base.startswith("[") else base
    sym = sym.replace(";", ":")
    if kernel:
        return sym + "_[k]"
    return sym


_MISS = object()


def split_header(header: str):
    """(comm, pid, tid, cpu, time, event) without a regex in the common case; None if malformed.

    perf prints `comm pid/tid [cpu] time: [period] event:`; comm may contain spaces, so the
    `[cpu]` field is found as the first bracketed token followed by a `time:` token."""
    parts = header.split()
    k = 2 if len(parts) > 3 and parts[2][:1] == "[" else next(
        (i for i in range(1, len(parts) - 1) if parts[i][:1] == "[" and parts[i][-1:] == "]"
         and parts[i + 1][-1:] == ":"), -1)
    if k < 1 or k + 1 >= len(parts):
        return None
    try:
        cpu = int(parts[k][1:-1])
        t = float(parts[k + 1][:-1])
        pidtid = parts[k - 1]
        slash = pidtid.find("/")
        if slash >= 0:
            pid, tid = int(pidtid[:slash]), int(pidtid[slash + 1:])
        else:
            pid = tid = int(pidtid)
    except ValueError:
        m = HEADER.match(header)
        if m is None:
            return None
        pid = int(m["pid"])
        return (m["comm"].strip(), pid, int(m["tid"]) if m["tid"] else pid, int(m["cpu"]), float(m["time"]),
                m["event"])
    rest = parts[k + 2:]
    event = rest[1] if len(rest) > 1 and rest[0].isdigit() else (rest[0] if rest else "")
    return " ".join(parts[:k - 1]), pid, tid, cpu, t, event.rstrip(":")


def parse_text(text: str, batch: Batch | None = None, path: str = "perf script") -> Batch:
    """Parse with the cyclic GC paused: the parser allocates millions of small acyclic objects and
    the collector would otherwise rescan them over and over."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _parse_text(text, batch)
    finally:
        if enabled:
            gc.enable()


def _parse_text(text: str, batch: Batch | None) -> Batch:
    b = batch or Batch()
    stack_ix: dict[tuple[str, ...], int] = {st: i for i, st in enumerate(b.stacks)}
    comm_ix: dict[str, int] = {c: i for i, c in enumerate(b.comms)}
    # the same frame lines recur sample after sample: the text of a stack maps straight to its id,
    # and `comm pid/tid [cpu]` to its parsed fields
    body_ix: dict[str, int] = {}
    who_ix: dict[str, tuple] = {}
    line_ix: dict[str, str | None] = {}
    callers_tab: list[tuple[str, ...]] = []
    key_ix: dict[tuple[int, str | None], int] = {}
    times, cpus, pids, tids, comm_ids, stack_ids = b.times, b.cpus, b.pids, b.tids, b.comm_ids, b.stack_ids
    blocks = text.split("\n\n")
    if text and not text.endswith("\n") and blocks:
        blocks.pop()  # the file was cut inside this sample: its stack may be incomplete
        b.skipped += 1
    for block in blocks:
        header, _, body = block.partition("\n")
        j = header.find("] ")
        who = who_ix.get(header[:j + 1]) if j > 0 else None
        if who is not None:
            try:
                t = float(header[j + 2:header.index(":", j + 2)])
            except ValueError:
                who = None
        if who is None:
            if not header.strip() or header.lstrip().startswith("#") or header[:1] == "\n":
                block = "\n".join(ln for ln in block.split("\n") if ln.strip() and not ln.lstrip().startswith("#"))
                if not block:
                    continue
                header, _, body = block.partition("\n")
            full = split_header(header)
            if full is None:
                b.skipped += 1
                continue
            comm = full[0] or "[unknown]"
            cid = comm_ix.get(comm)
            if cid is None:
                cid = comm_ix[comm] = len(b.comms)
                b.comms.append(comm)
            who = (cid, full[1], full[2], full[3])
            j = header.find("] ")
            if j > 0:
                who_ix[header[:j + 1]] = who
            t = full[4]
            if not b.event:
                b.event = full[5]
        # the leaf's address moves within its function from sample to sample; the callers do not:
        # cache the callers' text and the leaf line separately
        leaf_line, _, callers = body.partition("\n")
        cid_ = body_ix.get(callers)
        if cid_ is None:
            names = []
            for ln in callers.split("\n"):
                f = line_ix.get(ln, _MISS)
                if f is _MISS:
                    f = line_ix[ln] = frame_name(ln)
                if f is not None:
                    names.append(f)
            names.reverse()
            cid_ = body_ix[callers] = len(callers_tab)
            callers_tab.append(tuple(names))
        leaf = line_ix.get(leaf_line, _MISS)
        if leaf is _MISS:
            leaf = line_ix[leaf_line] = frame_name(leaf_line)
        key = (cid_, leaf)
        sid = key_ix.get(key)
        if sid is None:
            stack = callers_tab[cid_] + ((leaf,) if leaf is not None else ())
            sid = stack_ix.get(stack)
            if sid is None:
                sid = stack_ix[stack] = len(b.stacks)
                b.stacks.append(stack)
            key_ix[key] = sid
        times.append(t)
        comm_ids.append(who[0])
        pids.append(who[1])
        tids.append(who[2])
        cpus.append(who[3])
        stack_ids.append(sid)
    return b


def parse_file(path: str) -> Batch:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as e:
        raise InputError(path, e.strerror or str(e)) from None
    b = parse_text(text, path=path)
    if not b.times and text.strip():
        raise InputError(path, "no perf script samples found (expected 'comm pid/tid [cpu] time: ...' lines)")
    return b


def is_idle(pid: int, stack: tuple[str, ...]) -> bool:
    """The idle task doing nothing; softirq/IRQ work on top of idle is kept as work."""
    if pid != 0:
        return False
    if any(INTERRUPT.search(f) for f in stack):
        return False
    return True
