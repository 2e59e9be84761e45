"""A real systemd as PID 1 of a new PID namespace, for crash-loop reproductions and tests.

Booted to basic.target so the image's enabled services (postgresql, getty...) stay down, with
private /tmp, /var/tmp, /etc/systemd/system and journal, so nothing it does (tmpfiles clean-up,
enable, mask) changes the host.
Everything it starts dies with it: killing PID 1 of a PID namespace kills the namespace, and
unshare runs with --kill-child under PR_SET_PDEATHSIG, so a killed test or lab takes it along.
stop() removes the cgroups its systemd created on the host's hierarchies: only the top-level ones
systemd names (system.slice, init.scope, ...) that did not exist before it started, never other
jobs' cgroups that appeared meanwhile.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time

from ..node.cgroupfs import remove_cgroup_tree
from ..node.children import run, spawn
from ..node.systemd import nsenter

SYSTEMD = "/lib/systemd/systemd"
CGROUP_BASE = "/sys/fs/cgroup"
SYSTEMD_TOP = ("system.slice", "init.scope", "user.slice", "machine.slice", "-.slice")


def _top_cgroups() -> set[str]:
    """Top-level cgroups: the root's children on a pure v2 host (CGROUP_BASE is the unified root),
    else each v1 hierarchy's children."""
    if os.path.exists(os.path.join(CGROUP_BASE, "cgroup.controllers")):
        return {os.path.join(CGROUP_BASE, x) for x in os.listdir(CGROUP_BASE)
                if os.path.isdir(os.path.join(CGROUP_BASE, x))}
    out = set()
    for h in os.listdir(CGROUP_BASE):
        d = os.path.join(CGROUP_BASE, h)
        if os.path.isdir(d) and not os.path.islink(d):
            out |= {os.path.join(d, x) for x in os.listdir(d) if os.path.isdir(os.path.join(d, x))}
    return out


def _private_tmp(mount: str, keep: list[str]) -> str:
    """sh that replaces `mount` with a fresh tmpfs in which each path of `keep` under it stays visible,
    read-only (an interpreter or a checkout under /tmp that a unit runs): the tmpfs is made at /mnt,
    the kept paths bound into it, and the whole moved onto `mount`."""
    inside = [p for p in keep if p.startswith(mount.rstrip("/") + "/")]
    inside = [p for p in inside if not any(p.startswith(q + "/") for q in inside)]  # the outermost only
    if not inside:
        return f"mount -t tmpfs tmpfs {mount}"
    steps = ["mount -t tmpfs tmpfs /mnt"]
    for p in inside:
        dst = shlex.quote("/mnt/" + os.path.relpath(p, mount))
        steps += [f"mkdir -p {dst}", f"mount --rbind {shlex.quote(p)} {dst}", f"mount -o remount,bind,ro {dst}"]
    steps.append(f"mount --move /mnt {mount}")
    return " && ".join(steps)


class SystemdNamespace:
    """`keep`: host paths under /tmp or /var/tmp that stay visible (read-only) in the namespace's
    private /tmp and /var/tmp, e.g. the interpreter's prefix when a venv lives in /tmp."""

    def __init__(self, unit: str = "basic.target", keep: list[str] | tuple[str, ...] = ()):
        self.unit = unit
        self.keep = sorted({os.path.realpath(p) for p in keep})
        self.proc: subprocess.Popen | None = None
        self.pid: int | None = None  # systemd's host PID
        self._before: set[str] = set()

    def start(self, timeout: float = 120.0) -> int:
        self._before = _top_cgroups()
        # private /tmp and /var/tmp (the namespace's systemd-tmpfiles would otherwise empty the host's),
        # kept read-only: self.keep), a private copy of /etc/systemd/system (enable/disable/mask must not touch the host's), and
        # a private journal
        boot = (f"{_private_tmp('/tmp', self.keep)} && {_private_tmp('/var/tmp', self.keep)} && "
                "cp -a /etc/systemd/system /tmp/.etc-systemd && mount -t tmpfs tmpfs /etc/systemd/system && "
                "cp -a /tmp/.etc-systemd/. /etc/systemd/system/ && rm -rf /tmp/.etc-systemd && "
                "{ [ ! -d /var/log/journal ] || mount -t tmpfs tmpfs /var/log/journal; } && "
                f"exec {SYSTEMD} --system --unit={self.unit}")
        self.proc = spawn(["unshare", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc", "sh", "-c",
                           boot], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          start_new_session=True)
        deadline = time.time() + timeout
        while time.time() < deadline and self.pid is None:
            try:
                with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children") as f:
                    kids = f.read().split()
                if kids:
                    self.pid = int(kids[0])
            except OSError:
                pass
            time.sleep(0.05)
        if self.pid is None:
            self.stop()
            raise RuntimeError("systemd did not start in a new PID namespace")
        while time.time() < deadline:
            p = self.systemctl("is-system-running", check=False)
            if p.stdout.strip() in ("running", "degraded"):
                return self.pid
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("systemd in the namespace did not reach running state")

    def run(self, args: list[str], check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
        return run(nsenter(self.pid) + args, timeout=120, input=input, check=check)

    def systemctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return self.run(["systemctl", "--no-pager", *args], check=check)

    def install_unit(self, name: str, text: str) -> None:
        self.run(["sh", "-c", f"mkdir -p /run/systemd/system && cat > /run/systemd/system/{name}"], input=text)
        self.systemctl("daemon-reload")

    def stop(self) -> None:
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        # wait for the namespace's processes to be gone before removing their cgroups
        deadline = time.time() + 10
        while self.pid and os.path.exists(f"/proc/{self.pid}") and time.time() < deadline:
            time.sleep(0.05)
        # on a pure v2 host systemd owns the root: it also puts its .mount/.swap units there. Their
        # processes may take a while to exit (a slow VM): retry until they are gone
        new = [cg for cg in _top_cgroups() - self._before
               if os.path.basename(cg) in SYSTEMD_TOP or cg.endswith((".mount", ".swap", ".scope", ".slice"))]
        deadline = time.time() + 30
        while new:
            for cg in new:
                remove_cgroup_tree(cg)
            new = [cg for cg in new if os.path.isdir(cg)]
            if not new or time.time() > deadline:
                break
            time.sleep(0.2)
        self.pid = None

    def __enter__(self) -> "SystemdNamespace":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
