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
        self._interrupted = False

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
        """Start perf and return once it traces (launch(), then ready())."""
        return self.launch(ready_timeout) and self.ready()

    def launch(self, ready_timeout: float = 60.0) -> bool:
        """Start perf without waiting for it to trace: ready() waits. A caller with work to do before its
        window (check builds its sampler meanwhile) overlaps perf's start-up with it; False when perf
        could not be started (self.error says why). Traced from ready()'s return, not from here.

        Why ready() is needed: perf writes its data file's header before it opens the tracepoints on
        every CPU and synthesises the running tasks, and only then enables the events: a wait for the
        file returned seconds before anything was traced (measured in the 6.12 v2 guest under TCG: file
        at 0.8-1.6 s, first traced mkdir at 3.9-7.1 s after perf started; on this host 0.1 s and 0.4 s),
        so a 5 s check traced at most its last second and named no creator. perf
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
        except OSError as e:
            self.error = f"{self.dir}: {e.strerror}"
            self._close_fds()
            return False
        self._deadline, self._base, self._ready_timeout = time.monotonic() + ready_timeout, base, ready_timeout
        # --no-bpf-event: perf otherwise runs a side-band thread for BPF program events that polls with a
        # 1 s timeout, and on SIGINT perf joins it: every stop waited up to 1 s for nothing (measured on this
        # host: stop 1.06 s with it, 0.01-0.15 s without; check --npd spent it after its window). The
        # cgroup tracepoints need no BPF events. A perf old enough to lack it lacks --control too, and the
        # fallback below starts it without either
        return self._spawn(base + ["--no-bpf-event", "-D", "-1", "--control", f"fifo:{ctl},{ack}"])

    def ready(self) -> bool:
        """Wait until the perf that launch() started traces; False when it failed (self.error)."""
        if self.proc is None:
            return False
        deadline, base, ready_timeout = self._deadline, self._base, self._ready_timeout
        # enabled now, not at launch: perf traces from here, what the caller did meanwhile is not in it.
        # Whether perf is still starting or already waiting, the FIFO keeps the command until it reads it
        try:
            os.write(self._fds[0], b"enable\n")
        except OSError as e:
            self.error = f"{self.dir}: {e.strerror}"
            self._close_fds()
            return False
        got = b""
        while time.monotonic() < deadline:
            r = readable([self._fds[1]], 0.05)
            if r:
                got += os.read(self._fds[1], 64)
                if b"ack" in got:
                    return True  # the FIFOs stay open: interrupt() disables the events through them
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

    def interrupt(self) -> None:
        """End the trace now and let perf write out its data without waiting for it: the window is over.
        perf takes a while to finish (0.01-0.15 s here); a caller with other work does it meanwhile and
        then calls stop(), which waits. The events are disabled first over the control FIFO (perf acks
        within milliseconds), so nothing the caller does next (check's probes make cgroups) is traced
        while perf winds down. Once: a second SIGINT is not sent."""
        if self.proc is not None and not self._interrupted and self.proc.poll() is None:
            if self._fds:
                self._command(b"disable", 5.0)
            self.proc.send_signal(signal.SIGINT)
        self._interrupted = True
        self._close_fds()

    def _command(self, cmd: bytes, timeout: float) -> bool:
        """Send perf a --control command and wait for its ack (or its exit, or `timeout`)."""
        try:
            os.write(self._fds[0], cmd + b"\n")
        except OSError:
            return False
        got, deadline = b"", time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            if readable([self._fds[1]], 0.05):
                got += os.read(self._fds[1], 64)
                if b"ack" in got:
                    return True
        return False

    def cancel(self) -> None:
        """Stop perf and drop its trace (the window it was for never ran to its end)."""
        self._close_fds()
        if self.proc is not None:
            self.interrupt()
            try:
                self.proc.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.communicate()
        shutil.rmtree(self.dir, ignore_errors=True)

    def stop(self, seconds: float, root=None) -> ChurnSummary | None:
        """The trace's summary; creators under a Kubernetes pod are named from the node at `root`."""
        if self.proc is None:
            return None
        self.interrupt()
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
