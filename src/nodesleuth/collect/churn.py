"""Who creates cgroup churn: perf on cgroup:cgroup_mkdir / cgroup_rmdir / cgroup_release.

The tracepoints fire in the calling task (runc/dockerd with cgroupfs, systemd with the systemd
driver), so creators are grouped by comm and by path pattern; rmdir -> release of one id is a
zombie's lifetime, and an rmdir with no release is a zombie still dying.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field

from ..children import spawn, spawn_reaped

LINE = re.compile(r"^\s*(?P<comm>.+?)\s+(?P<pid>-?\d+)(?:/(?P<tid>\d+))?\s+(?:\[(?P<cpu>\d+)\]\s+)?"
                  r"(?P<time>\d+\.\d+):\s+cgroup:(?P<ev>cgroup_\w+):\s+root=(?P<root>\d+)\s+id=(?P<id>\d+)\s+"
                  r"level=(?P<level>\d+)\s+path=(?P<path>.*)$")
_HEX = re.compile(r"[0-9a-f]{12,}|\d+")
EVENTS = ("cgroup:cgroup_mkdir", "cgroup:cgroup_rmdir", "cgroup:cgroup_release")


def path_pattern(path: str) -> str:
    """Group churn by shape: /docker/<64 hex> -> /docker/*, /lab/ecs-123 -> /lab/ecs-*."""
    return "/".join(_HEX.sub("*", p) for p in path.split("/"))


def unit_of_path(path: str) -> str | None:
    """The systemd unit a cgroup path sits under (deepest .service/.scope component)."""
    for comp in reversed(path.split("/")):
        if comp.endswith((".service", ".scope")):
            return comp
    return None


@dataclass(frozen=True)
class CgEvent:
    time: float  # perf clock seconds
    event: str  # mkdir | rmdir | release
    comm: str
    pid: int
    hierarchy: int
    cg_id: int
    path: str


@dataclass
class Creator:
    comm: str
    pattern: str
    hierarchy: int
    mkdir: int = 0
    rmdir: int = 0
    pids: set = field(default_factory=set)
    unit: str | None = None
    freed: int = 0  # removed and released during the trace
    still_dying: int = 0  # removed and not released by the end of the trace


@dataclass
class ChurnSummary:
    seconds: float
    creators: list[Creator]
    released: int  # rmdir'd cgroups freed within the trace
    still_dying: int  # rmdir'd in the trace, not released by its end
    lifetimes: list[float]  # rmdir -> release seconds
    events: int


def parse_script(text: str) -> list[CgEvent]:
    out = []
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            out.append(CgEvent(float(m["time"]), m["ev"][len("cgroup_"):], m["comm"].strip(), int(m["pid"]),
                               int(m["root"]), int(m["id"]), m["path"].strip()))
    return out


def summarise(events: list[CgEvent], seconds: float) -> ChurnSummary:
    creators: dict[tuple, Creator] = {}
    rmdir_at: dict[tuple[int, int], float] = {}
    mkdir_by: dict[tuple[int, int], tuple] = {}
    lifetimes = []
    released = 0
    for e in events:
        key = (e.hierarchy, e.cg_id)
        if e.event == "mkdir":
            ck = (e.comm, path_pattern(e.path), e.hierarchy)
            c = creators.get(ck)
            if c is None:
                c = creators[ck] = Creator(e.comm, ck[1], e.hierarchy, unit=unit_of_path(e.path))
            c.mkdir += 1
            c.pids.add(e.pid)
            mkdir_by[key] = ck
        elif e.event == "rmdir":
            rmdir_at[key] = e.time
            ck = mkdir_by.get(key)
            if ck:
                creators[ck].rmdir += 1
        elif e.event == "release":
            t0 = rmdir_at.pop(key, None)
            if t0 is not None:
                lifetimes.append(e.time - t0)
                released += 1
                ck = mkdir_by.get(key)
                if ck:
                    creators[ck].freed += 1
    for key in rmdir_at:
        ck = mkdir_by.get(key)
        if ck:
            creators[ck].still_dying += 1
    ranked = sorted(creators.values(), key=lambda c: -c.mkdir)
    return ChurnSummary(seconds, ranked, released, len(rmdir_at), lifetimes, len(events))


class ChurnTracer:
    """Runs perf on the cgroup tracepoints in the background for the length of a window."""

    def __init__(self, workdir: str | None = None):
        self.perf = shutil.which("perf")
        self.dir = workdir or tempfile.mkdtemp(prefix="nodesleuth-churn-")
        self.data = os.path.join(self.dir, "churn.data")
        self.proc: subprocess.Popen | None = None
        self.error: str | None = None

    @staticmethod
    def unavailable() -> str | None:
        """Why this host cannot be traced, or None. tracefs need not be mounted yet: perf mounts it
        on /sys/kernel/tracing itself (a fresh node without systemd has none mounted at boot, and
        treating that as "no tracepoints" skipped the trace without a word)."""
        if not shutil.which("perf"):
            return "perf is not installed"
        if os.geteuid() != 0:
            return "not root"
        if any(os.path.exists(p) for p in ("/sys/kernel/tracing/events/cgroup",
                                           "/sys/kernel/debug/tracing/events/cgroup")):
            return None
        if os.path.isdir("/sys/kernel/tracing") and not os.path.exists("/sys/kernel/tracing/events"):
            return None  # tracefs not mounted yet: perf mounts it
        return "the kernel has no cgroup tracepoints (tracefs events/cgroup)"

    def start(self) -> bool:
        if not self.perf:
            self.error = "perf not installed"
            return False
        cmd = [self.perf, "record", "-q", "-a", "-o", self.data]
        for ev in EVENTS:
            cmd += ["-e", ev]
        try:
            self.proc = spawn_reaped(cmd, self.dir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        except OSError as e:
            self.error = str(e)
            return False
        return True

    def stop(self, seconds: float) -> ChurnSummary | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        if not os.path.exists(self.data):
            self.error = (err or b"").decode(errors="replace").strip().splitlines()[-1:] or ["perf failed"]
            self.error = self.error[0]
            shutil.rmtree(self.dir, ignore_errors=True)
            return None
        p = spawn([self.perf, "script", "-i", self.data, "-F", "comm,pid,tid,cpu,time,event,trace"],
                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)
        out, _ = p.communicate(timeout=120)
        shutil.rmtree(self.dir, ignore_errors=True)
        return summarise(parse_script(out), seconds)
