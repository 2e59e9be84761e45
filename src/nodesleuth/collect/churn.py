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
from ..node.wait import readable

EVENTS = ("cgroup:cgroup_mkdir", "cgroup:cgroup_rmdir", "cgroup:cgroup_release")


class ChurnTracer:
    """Runs perf on the cgroup tracepoints in the background for the length of a window."""

    def __init__(self, workdir: str | None = None):
        self.perf = shutil.which("perf")
        self.dir = workdir or tempfile.mkdtemp(prefix="nodesleuth-churn-")
        self.data = os.path.join(self.dir, "churn.data")
        self.proc: subprocess.Popen | None = None
        self.error: str | None = None
        self.note: str | None = None  # the trace ran, but may have missed the window's start: why
        self._fds: list[int] = []

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

    def start(self, ready_timeout: float = 60.0) -> bool:
        """Start perf and return once it traces. perf writes its data file's header before it opens the
        tracepoints on every CPU and synthesises the running tasks, and only then enables the events: a
        wait for the file returned seconds before anything was traced (measured in the 6.12 v2 guest
        under TCG: file at 0.8-1.6 s, first traced mkdir at 3.9-7.1 s after perf started; on this host
        0.1 s and 0.4 s), so a 5 s check traced at most its last second and named no creator. perf
        starts with its events disabled (-D -1) and is told to enable them over a control FIFO; its
        "ack" comes after they are enabled. A perf without --control (before 5.10) is waited for by its
        data file as before, with a note that the window's first seconds may be missed."""
        if not self.perf:
            self.error = "perf not installed"
            return False
        # -B -N: no build-ids. perf collects them when it stops, reading every DSO its samples' processes had
        # mapped, and copies them into ~/.debug: a tracepoint's text needs none of it, and on a cold cache
        # (a fresh node, the v2 guest) that took longer than stop() waits, so perf was killed before it had
        # finished its data file and the trace read as empty
        base = [self.perf, "record", "-q", "-a", "-B", "-N", "-o", self.data]
        for ev in EVENTS:
            base += ["-e", ev]
        ctl, ack = os.path.join(self.dir, "ctl"), os.path.join(self.dir, "ack")
        try:
            os.mkfifo(ctl)
            os.mkfifo(ack)
            # O_RDWR never blocks on a FIFO and keeps what is written in it until perf reads it
            self._fds = [os.open(ctl, os.O_RDWR | os.O_NONBLOCK), os.open(ack, os.O_RDWR | os.O_NONBLOCK)]
            os.write(self._fds[0], b"enable\n")
        except OSError as e:
            self.error = f"{self.dir}: {e.strerror}"
            self._close_fds()
            return False
        deadline = time.monotonic() + ready_timeout
        if not self._spawn(base + ["-D", "-1", "--control", f"fifo:{ctl},{ack}"]):
            return False
        got = b""
        while time.monotonic() < deadline:
            r = readable([self._fds[1]], 0.05)
            if r:
                got += os.read(self._fds[1], 64)
                if b"ack" in got:
                    self._close_fds()
                    return True
            if self.proc.poll() is not None:
                err = self._stderr()
                if not any(w in err for w in ("unknown option", "control", "delay")):
                    self.error = (err.splitlines()[-1:] or [f"perf exited {self.proc.returncode} before tracing"])[0]
                    self._close_fds()
                    return False
                break  # an old perf that has no --control or -D -1: started as before, below
        else:
            self.note = (f"perf had not started tracing {ready_timeout:.0f} s after it was started: the trace "
                         "may miss the window's first seconds")
            self._close_fds()
            return True
        self._close_fds()
        self.note = "this perf has no --control: tracing may have started after the window's first second"
        if os.path.exists(self.data):
            os.unlink(self.data)
        if not self._spawn(base):
            return False
        while not os.path.exists(self.data) and time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self._stderr()
                self.error = (err.splitlines()[-1:] or [f"perf exited {self.proc.returncode} before tracing"])[0]
                return False
            time.sleep(0.05)
        return True

    def _spawn(self, cmd: list[str]) -> bool:
        try:
            self.proc = spawn_reaped(cmd, self.dir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        except OSError as e:
            self.error = str(e)
            self._close_fds()
            return False
        return True

    def _stderr(self) -> str:
        return (self.proc.stderr.read() if self.proc.stderr else b"").decode(errors="replace").strip()

    def _close_fds(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = []

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
            self.note = "perf did not stop within 20 s and was killed: its trace may be incomplete"
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
