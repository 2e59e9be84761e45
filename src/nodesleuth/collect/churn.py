"""Who creates cgroup churn: perf on cgroup:cgroup_mkdir / cgroup_rmdir / cgroup_release.

The tracepoints fire in the calling task (runc/dockerd with cgroupfs, systemd with the systemd
driver), so creators are grouped by comm and by path pattern; rmdir -> release of one id is a
zombie's lifetime, and an rmdir with no release is a zombie still dying.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time

from ..node.children import spawn, spawn_reaped
from ..model.churn import parse_script, summarise
from ..model.records import ChurnSummary
from ..node.kube import name_creators

EVENTS = ("cgroup:cgroup_mkdir", "cgroup:cgroup_rmdir", "cgroup:cgroup_release")


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

    def start(self, ready_timeout: float = 20.0) -> bool:
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
        # perf opens the tracepoints on every CPU and writes its header before it traces: on a busy or
        # emulated machine that takes seconds, and a window stopped before then traced nothing. Wait for
        # the data file (its header is written once the events are open), bounded.
        deadline = time.monotonic() + ready_timeout
        while not os.path.exists(self.data) and time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = (self.proc.stderr.read() if self.proc.stderr else b"").decode(errors="replace").strip()
                self.error = (err.splitlines()[-1:] or [f"perf exited {self.proc.returncode} before tracing"])[0]
                return False
            time.sleep(0.05)
        return True

    def stop(self, seconds: float, root=None) -> ChurnSummary | None:
        """The trace's summary; creators under a Kubernetes pod are named from the node at `root`."""
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
            self.error = ((err or b"").decode(errors="replace").strip().splitlines()[-1:]
                          or [f"perf wrote no data (exit {self.proc.returncode})"])[0]
            shutil.rmtree(self.dir, ignore_errors=True)
            return None
        p = spawn([self.perf, "script", "-i", self.data, "-F", "comm,pid,tid,cpu,time,event,trace"],
                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)
        out, _ = p.communicate(timeout=120)
        shutil.rmtree(self.dir, ignore_errors=True)
        summary = summarise(parse_script(out), seconds)
        name_creators(summary.creators, root or "/")
        return summary
