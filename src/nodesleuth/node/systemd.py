"""systemd through the right namespace: `systemctl` for this host, for the systemd that is PID 1 of
another PID namespace (`--systemd-pid PID`: nsenter -t PID -m -p), or for the host seen through a
mount (a DaemonSet's /host: nsenter into /host/proc/1/ns/{mnt,pid}, which works without hostPID).
On a recorded tree the recorded `systemctl show` output is read from ROOT/run/nodesleuth/systemctl-show.
Every systemctl runs through node/children.py: one still waiting on a busy systemd dies with us.
"""

from __future__ import annotations

import shutil
import subprocess

from ..model.errors import InputError
from ..model.records import Unit
from ..model.systemd import parse_properties, parse_show
from .children import run
from .root import Root

PROPS = ("Id", "NRestarts", "ActiveState", "SubState", "UnitFileState", "Result", "ExecMainStatus",
         "ExecMainCode", "MainPID", "Restart", "RestartUSec", "FragmentPath", "ControlGroup",
         "ExecMainStartTimestampMonotonic", "ExecMainExitTimestampMonotonic")
RECORDED = "/run/nodesleuth/systemctl-show"


def target(root: Root, ns_pid: int | None) -> int | None:
    """The PID whose namespaces systemd is reached through: the one asked for, or the host's PID 1
    when the root is the live host through a mount; None for this process's own."""
    if ns_pid:
        return ns_pid
    return 1 if root.kind == "host" else None


def nsenter(ns_pid: int | None, root: Root | None = None) -> list[str]:
    """Prefix that runs a command in the mount and PID namespace of `ns_pid`: by PID on this host,
    through the root's /proc (/host/proc/PID/ns/...) when the root is the host through a mount."""
    if not ns_pid:
        return []
    if root is not None and root.kind == "host":
        return ["nsenter", f"--mount={root.ns(ns_pid, 'mnt')}", f"--pid={root.ns(ns_pid, 'pid')}", "--"]
    return ["nsenter", "-t", str(ns_pid), "-m", "-p", "--"]


def systemctl(ns_pid: int | None, root: Root | None = None) -> list[str]:
    return nsenter(ns_pid, root) + ["systemctl", "--no-pager"]


def systemd_available(root: Root, ns_pid: int | None) -> bool:
    if not root.live and not ns_pid:
        return root.exists(RECORDED)
    pid = target(root, ns_pid)
    if pid is None:
        pid = 1
    comm = root.join(f"/proc/{pid}/comm") if root.kind == "host" else f"/proc/{pid}/comm"
    try:
        with open(comm) as f:
            if f.read().strip() != "systemd":
                return False
    except OSError:
        return False
    if root.kind == "host":  # the host's own systemctl runs inside its mount namespace: ours need not exist
        return bool(shutil.which("nsenter")) and any(root.exists(p) for p in ("/usr/bin/systemctl", "/bin/systemctl"))
    return bool(shutil.which("systemctl") and (pid == 1 and root.here or shutil.which("nsenter")))


def enabled_services(root: Root, ns_pid: int | None = None) -> list[str]:
    """Enabled service unit files. `list-unit-files` scans the unit directories inside PID 1 (over a
    second on some hosts, while systemd handles nothing else), so only snapshots ask for it."""
    if not root.live and not ns_pid or not systemd_available(root, ns_pid):
        return []
    try:
        files = run(systemctl(target(root, ns_pid), root) + ["list-unit-files", "--type=service", "--no-legend",
                                                             "--state=enabled"], timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [ln.split()[0] for ln in files.stdout.splitlines() if ln.strip() and "@" not in ln.split()[0]]


def read_units(root: Root, ns_pid: int | None = None, timeout: float = 30) -> list[Unit] | None:
    """Service units that can be crash-looping (loaded and not dead), or None when no systemd runs
    this namespace (not an error). Dead units are skipped: they cannot be restarting, and asking
    systemd about every unit file costs PID 1 real time (a crash loop it must serve meanwhile)."""
    if not systemd_available(root, ns_pid):
        return None
    if not root.live and not ns_pid:
        p = root.join(RECORDED)
        with open(p) as f:
            return parse_show(f.read(), p)
    cmd = systemctl(target(root, ns_pid), root)
    try:
        lst = run(cmd + ["list-units", "--type=service", "--all", "--no-legend", "--plain",
                         "--state=active,activating,deactivating,reloading,failed"], timeout)
        names = [ln.split()[0] for ln in lst.stdout.splitlines() if ln.strip()]
        if not names:
            return []
        show = run(cmd + ["show", "-p", ",".join(PROPS)] + names, timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise InputError("systemctl", str(e)) from None
    if show.returncode != 0 and not show.stdout:
        raise InputError("systemctl show", show.stderr.strip().splitlines()[-1] if show.stderr.strip() else "failed")
    return parse_show(show.stdout, "systemctl show")


def unit_state(unit: str, root: Root = Root("/"), ns_pid: int | None = None) -> dict[str, str]:
    """ActiveState, SubState, UnitFileState, NRestarts of one unit (empty when systemctl fails)."""
    try:
        p = run(systemctl(target(root, ns_pid), root) + ["show", "-p",
                "ActiveState,SubState,UnitFileState,NRestarts", unit], timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return parse_properties(p.stdout)


def act(args: list[str], root: Root = Root("/"), ns_pid: int | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess:
    """Run `systemctl ARGS...` (disable, mask, start...) in the right namespace; never raises for a
    non-zero exit (callers report it), OSError/TimeoutExpired become a failed CompletedProcess."""
    cmd = systemctl(target(root, ns_pid), root) + list(args)
    try:
        return run(cmd, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return subprocess.CompletedProcess(cmd, 124 if isinstance(e, subprocess.TimeoutExpired) else 127, "", str(e))
