"""A fast `perf script` parser into columns and interned stacks, for every shape perf prints.

Header fields are each optional (`-F`): `comm pid/tid [cpu] time: period event: [trace args]`.
The comm may hold spaces and end in a number (`busy worker 1 21273 ...`): the pid is the leftmost
integer after which the rest parses as perf's fields, so the comm is kept whole (stackcollapse-perf.pl
cuts it at its first number). Samples of several events are kept apart (`event_ids`), the period is
kept per sample (0 = not printed), and an absent pid, cpu or time is -1/-1/0.0.

Frames follow stackcollapse-perf.pl's rules (its frame regex, `+0x..` offsets stripped, `->` inline
pieces marked `_[i]`, `[unknown]` named after its dso, `;` -> `:`), and carry its annotations as
suffixes: `_[k]` kernel, `_[j]` JIT (perf-PID.map). Kernel frames are recognised as stackcollapse
does (dso `[...]` or ending in `vmlinux`) and also by address (>= 0xffff800000000000) with a kernel
image or module path (`vmlinux-5.4...`, `/lib/modules/...`, `*.ko`). Name tidying (C++ argument
lists, Java `L`) depends on the comm, so it is applied when folding (folded.tidy), not here.
tests/test_profile.py checks the folded result against stackcollapse-perf.pl's outputs recorded on this
machine (tests/data/perf-script/stackcollapse-outputs.md), byte for byte, on the whole corpus.
"""

from __future__ import annotations

import gc
import re
from dataclasses import dataclass, field

import numpy as np

from ..model.errors import InputError
from .arrays import intern

# a frame line as stackcollapse-perf.pl accepts it: `addr symbol (dso)` (its recorded outputs are the test)
FRAME = re.compile(r"^\s*(\w+)\s*(.+) \((.*)\)")
FRAME_NO_DSO = re.compile(r"^\s+([0-9a-f]+)\s+(\S.*?)\s*$")  # `-F ip,sym`: no dso column
# a frame line cut inside its dso column (`start_thread (/lib/x86_64-linux-gnu`): stackcollapse-perf.pl's frame regex
# wants the closing paren, so it warns "Unrecognized line" and drops the line; so does this parser
CUT_DSO = re.compile(r" \([^()]*$")
OFFSET = re.compile(r"\+0x[\da-f]+$")
KERNEL_BASE = 0xFFFF800000000000
KERNEL_PATH = re.compile(r"(?:^|/)vmlinux(?:[-.][^/]*)?$|\.ko(?:\.(?:xz|gz|zst))?$|^/lib/modules/|^/usr/lib/debug/")
JIT_MAP = re.compile(r"/tmp/perf-\d+\.map")
PIDTID = re.compile(r"^-?\d+(?:/-?\d+)?$")
TIME = re.compile(r"^\d+\.\d+:$")
SUFFIXES = ("_[k]", "_[j]", "_[i]")
UNNAMED = "[unnamed]"  # a frame perf script had not named when its sample had to be stored (profile/perfdata.py)
# softirq/IRQ work that runs on top of the idle task is work, not idle (FlameScope #83, #143)
INTERRUPT = re.compile(r"irq|napi|net_rx_action|net_tx_action|tasklet|sysvec_|asm_common_interrupt|"
                       r"__do_softirq|handle_softirqs|apic_timer|hrtimer_interrupt|ena_io_poll|mlx5e_napi")
CLOCK_EVENTS = ("cpu-clock", "task-clock")


def is_clock(event: str) -> bool:
    """A clock event samples time (idle or busy alike); cycles & co. sample what a CPU executes."""
    return event.split(":", 1)[0] in CLOCK_EVENTS


@dataclass
class Batch:
    """Samples as columns; stacks, comms and events interned in tables local to the batch."""

    times: list[float] = field(default_factory=list)
    cpus: list[int] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    tids: list[int] = field(default_factory=list)
    comm_ids: list[int] = field(default_factory=list)
    stack_ids: list[int] = field(default_factory=list)
    periods: list[int] = field(default_factory=list)
    event_ids: list[int] = field(default_factory=list)
    comms: list[str] = field(default_factory=list)
    stacks: list[tuple[str, ...]] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    skipped: int = 0  # malformed or truncated samples
    cut: str | None = None  # the text's last line when the text ends inside it (no newline): its sample was dropped

    def __len__(self) -> int:
        return len(self.times)

    @property
    def event(self) -> str:
        """The event of the batch's samples (`,`-joined if several were kept together)."""
        return ",".join(self.events)

    def subset(self, keep) -> "Batch":
        """The samples at `keep` (indices), as numpy columns, with comm and stack tables cut to what they
        use (columns may be lists, from the text parser, or numpy arrays, from the perf.data reader)."""
        import numpy as np

        keep = np.asarray(keep, dtype=np.int64)

        def col(c):
            return np.asarray(c)[keep] if len(c) else c

        ucomm, cids = np.unique(col(self.comm_ids), return_inverse=True)
        ustack, sids = np.unique(col(self.stack_ids), return_inverse=True)
        return Batch(col(self.times), col(self.cpus), col(self.pids), col(self.tids), cids, sids,
                     col(self.periods), col(self.event_ids), [self.comms[c] for c in ucomm.tolist()],
                     [self.stacks[x] for x in ustack.tolist()], list(self.events), 0)

    def only(self, event: str) -> "Batch":
        """The samples of one event, sharing the stack and comm tables."""
        e = self.events.index(event)
        keep = [i for i, x in enumerate(self.event_ids) if x == e]
        cols = [[col[i] for i in keep] for col in (self.times, self.cpus, self.pids, self.tids, self.comm_ids,
                                                   self.stack_ids, self.periods)]
        return Batch(*cols, [0] * len(keep), self.comms, self.stacks, [event], self.skipped)


def pick_event(b: Batch, want: str | None = None) -> tuple[Batch, str | None]:
    """One event's samples: `want`, else the clock event if present, else the first in the file.
    Returns (batch, note) where note says what was chosen when there was a choice."""
    if want is not None:
        if want not in b.events:
            raise InputError(want, f"no samples of this event (the file has: {', '.join(b.events) or 'none'})")
        return b.only(want), None
    if len(b.events) <= 1:
        return b, None
    chosen = next((e for e in b.events if is_clock(e)), b.events[0])
    why = "the clock event" if is_clock(chosen) else "the first event (no clock event)"
    return b.only(chosen), (f"{len(b.events)} events in the input ({', '.join(b.events)}): using {chosen}, "
                            f"{why}; choose with --event")


def _is_kernel(pc: str, dso: str) -> bool:
    if "unknown" in dso:
        return False
    if dso[:1] == "[" or dso.endswith("vmlinux"):
        return True
    if dso and KERNEL_PATH.search(dso):
        try:
            return int(pc, 16) >= KERNEL_BASE
        except ValueError:
            return False
    return False


def frame_names(line: str) -> tuple[str, ...] | None:
    """The frame names of one stack line (several for `a->b` inline chains); None if it is not a
    frame line (a srcline line, noise)."""
    m = FRAME.match(line)
    if m is not None:
        pc, sym, dso = m.groups()
    else:
        if CUT_DSO.search(line):
            return None
        m = FRAME_NO_DSO.match(line)
        if m is None:
            return None
        (pc, sym), dso = m.groups(), ""
    sym = OFFSET.sub("", sym)
    if sym[:1] == "(":
        return ()
    kernel = _is_kernel(pc, dso)
    jit = JIT_MAP.search(dso) is not None
    pieces = sym.split("->")
    while len(pieces) > 1 and not pieces[-1]:
        pieces.pop()  # Perl's split drops trailing empty fields
    out = []
    for i, p in enumerate(pieces):
        if p == "[unknown]":
            p = "[" + (dso.rsplit("/", 1)[-1] if dso and dso != "[unknown]" else "unknown") + "]"
        p = p.replace(";", ":")
        if i:
            p = p if "_[i]" in p else p + "_[i]"
        elif kernel:
            p += "_[k]"
        elif jit and "_[j]" not in p:
            p += "_[j]"
        out.append(p)
    return tuple(out)


def split_header(header: str):
    """(comm, pid, tid, cpu, time, period, event) or None if the line is not a sample header.

    Tries each integer token, left to right, as `pid[/tid]` and accepts the first after which the
    rest is `[cpu]? time:? (period? event: args...)?` with nothing else left over."""
    parts = header.split()
    n = len(parts)
    for k in range(n):
        p = parts[k]
        if not PIDTID.match(p):
            continue
        i, cpu, t, period, event = k + 1, -1, 0.0, 0, ""
        if i < n and parts[i][:1] == "[" and parts[i][-1:] == "]" and parts[i][1:-1].isdigit():
            cpu = int(parts[i][1:-1])
            i += 1
        if i < n and TIME.match(parts[i]):
            t = float(parts[i][:-1])
            i += 1
        j = i + 1 if i < n and parts[i].isdigit() else i
        if j < n and parts[j][-1:] == ":" and (parts[j][:1].isalpha() or parts[j][:1] == "_") \
                and not parts[j].startswith("PERF_RECORD"):
            period = int(parts[i]) if j > i else 0
            event = parts[j][:-1]
        elif i != n:
            continue
        slash = p.find("/")
        if slash >= 0:
            pid, tid = int(p[:slash]), int(p[slash + 1:])
        else:
            pid, tid = -1, int(p)  # perf printed one number: the tid unless only `pid` was asked for
        return " ".join(parts[:k]), pid, tid, cpu, t, period, event
    return None


class FrameCache:
    """Frame-line and caller-text caches that outlive one batch: a long-lived reader sees the same
    frame lines chunk after chunk, so naming them once saves most of the parse. Bounded."""

    LIMIT = 500_000

    def __init__(self):
        self.lines: dict[str, tuple[str, ...] | None] = {}
        self.bodies: dict[str, int] = {}
        self.callers: list[tuple[str, ...]] = []

    def trim(self) -> None:
        if len(self.lines) + len(self.bodies) > self.LIMIT:
            self.__init__()


def parse_text(text: str, batch: Batch | None = None, path: str = "perf script",
               cache: FrameCache | None = None) -> Batch:
    """Parse with the cyclic GC paused: the parser allocates millions of small acyclic objects and
    the collector would otherwise rescan them over and over."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        if cache is not None:
            cache.trim()
        return _Parser(batch or Batch(), cache or FrameCache()).run(text)
    finally:
        if enabled:
            gc.enable()


_MISS = object()


class _Parser:
    def __init__(self, b: Batch, cache: FrameCache):
        self.b = b
        self.stack_ix = {st: i for i, st in enumerate(b.stacks)}
        self.comm_ix = {c: i for i, c in enumerate(b.comms)}
        self.event_ix = {e: i for i, e in enumerate(b.events)}
        self.line_ix = cache.lines
        self.who_ix: dict[str, tuple] = {}  # `comm pid/tid [cpu]` -> (comm id, pid, tid, cpu)
        self.body_ix = cache.bodies  # callers' text -> id in callers_tab
        self.callers_tab = cache.callers
        self.key_ix: dict[tuple, int] = {}
        self.tail_ix: dict[str, tuple] = {}  # `time: period event:` minus the time -> (period, event id)

    def frames(self, lines) -> tuple[str, ...]:
        names: list[str] = []
        line_ix = self.line_ix
        for ln in reversed(lines):
            f = line_ix.get(ln, _MISS)
            if f is _MISS:
                f = line_ix[ln] = frame_names(ln)
            if f:
                names.extend(f)
        return tuple(names)

    def add(self, who: tuple, t: float, period: int, eid: int, sid: int) -> None:
        b = self.b
        b.times.append(t)
        b.comm_ids.append(who[0])
        b.pids.append(who[1])
        b.tids.append(who[2])
        b.cpus.append(who[3])
        b.periods.append(period)
        b.event_ids.append(eid)
        b.stack_ids.append(sid)

    def full_header(self, header: str):
        h = split_header(header)
        if h is None:
            return None
        comm, pid, tid, cpu, t, period, event = h
        who = (intern(self.comm_ix, self.b.comms, comm), pid, tid, cpu)
        return who, t, period, intern(self.event_ix, self.b.events, event)

    def run(self, text: str) -> Batch:
        b = self.b
        blocks = text.split("\n\n")
        if text and not text.endswith("\n") and blocks:
            last = text.rsplit("\n", 1)[-1]
            # a last line that is a whole frame (`addr sym (dso)`) lacks only its newline: the sample is read as far
            # as it goes, as one whose newline is there; a line cut before its end makes the sample's stack
            # unknowable (its outer frames, and the rest of that line, are gone): dropped, and said (`cut`)
            if not (FRAME.match(last) and last.rstrip().endswith(")")):
                blocks.pop()
                b.skipped += 1
                b.cut = last
        who_ix, tail_ix, body_ix, key_ix, line_ix = self.who_ix, self.tail_ix, self.body_ix, self.key_ix, self.line_ix
        a_t, a_c, a_p, a_tid, a_cpu, a_per, a_ev, a_st = (b.times.append, b.comm_ids.append, b.pids.append,
                                                          b.tids.append, b.cpus.append, b.periods.append,
                                                          b.event_ids.append, b.stack_ids.append)
        for block in blocks:
            header, _, body = block.partition("\n")
            # fast path: `comm pid/tid [cpu] time: [period] event:` with cached prefix and tail
            j = header.find("] ")
            who = who_ix.get(header[:j + 1]) if j > 0 else None
            if who is not None:
                rest = header[j + 2:]
                c = rest.find(":")
                tail = tail_ix.get(rest[c:]) if c > 0 else None
                if tail is None:
                    who = None
                else:
                    try:
                        t = float(rest[:c])
                    except ValueError:
                        who = None
            if who is None or not body or body[:1] not in " \t":
                self.slow(block)
                continue
            leaf_line, _, callers = body.partition("\n")
            cid_ = body_ix.get(callers)
            if cid_ is None:
                lines = callers.split("\n") if callers else []
                if any(ln[:1] not in " \t" for ln in lines if ln):
                    self.slow(block)
                    continue
                cid_ = body_ix[callers] = len(self.callers_tab)
                self.callers_tab.append(self.frames(lines))
            leaf = line_ix.get(leaf_line, _MISS)
            if leaf is _MISS:
                leaf = line_ix[leaf_line] = frame_names(leaf_line)
            key = (cid_, leaf)
            sid = key_ix.get(key)
            if sid is None:
                stack = self.callers_tab[cid_] + (leaf or ())
                sid = key_ix[key] = intern(self.stack_ix, b.stacks, stack)
            a_t(t)
            a_c(who[0])
            a_p(who[1])
            a_tid(who[2])
            a_cpu(who[3])
            a_per(tail[0])
            a_ev(tail[1])
            a_st(sid)
        return b

    def slow(self, block: str) -> None:
        """Any other shape: `#` lines, side-band records before the header (the last header wins,
        as in stackcollapse-perf.pl), header-less samples (`-F ip,sym,dso`), `-G` one-line samples."""
        b = self.b
        head = None
        junk = False
        frames: list[str] = []
        for ln in block.split("\n"):
            if not ln or ln[0] == "#":
                continue
            if ln[0] not in " \t":
                h = self.full_header(ln)
                if h is not None:
                    head = h
                    self.remember_prefix(ln, h)
                elif head is not None and FRAME.match(ln):
                    frames.append(ln)  # old perf printed frames without indentation
                else:
                    junk = True
                continue
            if head is None and not frames:
                h = self.full_header(ln)  # a right-aligned comm; with `perf script -G` the leaf follows
                if h is not None:
                    ev = self.b.events[h[3]]
                    leaf = ln.split(ev + ":", 1)[1].strip() if ev else ""
                    if leaf and (FRAME.match(leaf) or FRAME_NO_DSO.match("\t" + leaf)):
                        st = self.frames(["\t" + leaf])
                        self.add(h[0], h[1], h[2], h[3], intern(self.stack_ix, b.stacks, st))
                    else:
                        head = h
                        self.remember_prefix(ln, h)
                    continue
            frames.append(ln)
        if head is None:
            if junk:
                b.skipped += 1  # text that is neither a sample header nor a frame: not perf script
                return
            if not frames:
                return
            # no header at all (`-F ip,sym,dso`): the sample is known only by its stack
            head = ((intern(self.comm_ix, b.comms, ""), -1, -1, -1), 0.0, 0,
                    intern(self.event_ix, b.events, ""))
        st = self.frames(frames)
        self.add(head[0], head[1], head[2], head[3], intern(self.stack_ix, b.stacks, st))

    def remember_prefix(self, header: str, h) -> None:
        """Cache `comm pid/tid [cpu]` and the `: period event:` tail so the next sample of the same
        thread and event takes the fast path."""
        j = header.find("] ")
        if j <= 0 or h[0][3] < 0:
            return
        rest = header[j + 2:]
        c = rest.find(":")
        if c <= 0:
            return
        try:
            float(rest[:c])
        except ValueError:
            return
        self.who_ix[header[:j + 1]] = h[0]
        self.tail_ix[rest[c:]] = (h[2], h[3])


def parse_file(path: str) -> Batch:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as e:
        raise InputError(path, e.strerror or str(e)) from None
    b = parse_text(text, path=path)
    if not b.times:
        lines = [ln for ln in text.splitlines() if ln.strip()]
        if b.cut is not None and b.skipped == 1:
            raise InputError(path, f"its only sample is cut short: the file ends inside it, in the middle of the line "
                                   f"{b.cut.strip()[:100]!r} (no newline); no complete sample to read")
        if not lines:
            raise InputError(path, "empty: no perf script samples (perf script printed nothing: did perf record "
                                   "capture any?)")
        if all(ln.startswith("#") for ln in lines):
            raise InputError(path, "only perf's header ('#' lines), no samples: the recording holds none")
        raise InputError(path, "no perf script samples found (expected 'comm pid/tid [cpu] time: ...' lines)")
    return b


def idle_stacks(stacks) -> np.ndarray:
    """is_idle(0, stack) for many stacks, each frame name matched once (an hour's stacks share ~1,000)."""
    seen: dict[str, bool] = {}
    out = np.ones(len(stacks), dtype=bool)
    for i, st in enumerate(stacks):
        for f in st:
            v = seen.get(f)
            if v is None:
                v = seen[f] = INTERRUPT.search(f) is not None
            if v:
                out[i] = False
                break
    return out


def is_idle(pid: int, stack: tuple[str, ...]) -> bool:
    """The idle task doing nothing; softirq/IRQ work on top of idle is kept as work."""
    if pid != 0:
        return False
    if any(INTERRUPT.search(f) for f in stack):
        return False
    return True
