"""systemd unit health: NRestarts, states, enablement, via `systemctl show`.

Read only when systemd is PID 1 of the namespace being inspected (the host, or a PID namespace
entered with nsenter -t PID). Restarts are counted from NRestarts, not journal text (NPD counts
"Started ..." lines, which misses restarts when journald rate-limits).
On a fixture tree the recorded `systemctl show` output is read from ROOT/run/nodesleuth/systemctl-show.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time

from ..model import Unit  # noqa: F401  (record types live in model.py)
from ..children import spawn
from ..errors import InputError
from .root import Root

PROPS = ("Id", "NRestarts", "ActiveState", "SubState", "UnitFileState", "Result", "ExecMainStatus",
         "ExecMainCode", "MainPID", "Restart", "RestartUSec", "FragmentPath", "ControlGroup",
         "ExecMainStartTimestampMonotonic", "ExecMainExitTimestampMonotonic")


def parse_show(text: str, path: str) -> list[Unit]:
    units = []
    for block in text.split("\n\n"):
        kv = {}
        for line in block.splitlines():
            k, sep, v = line.partition("=")
            if sep:
                kv[k] = v
        if not kv.get("Id"):
            continue

        def num(key: str) -> int:
            v = kv.get(key, "0") or "0"
            try:
                return int(v)
            except ValueError:
                if key == "RestartUSec":
                    return _usec(v)
                raise InputError(path, f"{kv['Id']}: {key}={v!r} is not an integer") from None

        units.append(Unit(kv["Id"], num("NRestarts"), kv.get("ActiveState", ""), kv.get("SubState", ""),
                          kv.get("UnitFileState", ""), kv.get("Result", ""), num("ExecMainStatus"),
                          num("MainPID"), kv.get("Restart", ""), num("RestartUSec"),
                          kv.get("FragmentPath", ""), kv.get("ControlGroup", "")))
    return units


def _usec(v: str) -> int:
    """systemd prints RestartUSec as '100ms' or '10s' or '1min 30s'."""
    total = 0.0
    mult = {"us": 1, "ms": 1e3, "s": 1e6, "min": 60e6, "h": 3600e6}
    for tok in v.split():
        num = "".join(c for c in tok if c.isdigit() or c == ".")
        unit = tok[len(num):]
        if num and unit in mult:
            total += float(num) * mult[unit]
    return int(total)


def systemd_available(root: Root, ns_pid: int | None) -> bool:
    if not root.live and not ns_pid:
        return root.exists("/run/nodesleuth/systemctl-show")
    if not shutil.which("systemctl"):
        return False
    pid = ns_pid or 1
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip() == "systemd"
    except OSError:
        return False


def nsenter(ns_pid: int | None) -> list[str]:
    """Prefix that runs a command in the mount and PID namespace of `ns_pid` (a systemd's namespace)."""
    return ["nsenter", "-t", str(ns_pid), "-m", "-p", "--"] if ns_pid else []


def systemctl(ns_pid: int | None) -> list[str]:
    return nsenter(ns_pid) + ["systemctl", "--no-pager"]


def enabled_services(root: Root, ns_pid: int | None = None) -> list[str]:
    """Enabled service unit files. `list-unit-files` scans the unit directories inside PID 1 (over a
    second on some hosts, while systemd handles nothing else), so only snapshots ask for it."""
    if not systemd_available(root, ns_pid) or (not root.live and not ns_pid):
        return []
    files = subprocess.run(systemctl(ns_pid) + ["list-unit-files", "--type=service", "--no-legend",
                                                 "--state=enabled"], capture_output=True, text=True, timeout=30)
    return [ln.split()[0] for ln in files.stdout.splitlines() if ln.strip() and "@" not in ln.split()[0]]


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    """subprocess.run through children.spawn: a systemctl still waiting on a busy systemd dies with us."""
    with spawn(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            raise
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def read_units(root: Root, ns_pid: int | None = None, timeout: float = 30) -> list[Unit] | None:
    """Service units that can be crash-looping (loaded and not dead), or None when no systemd runs
    this namespace (not an error). Dead units are skipped: they cannot be restarting, and asking
    systemd about every unit file costs PID 1 real time (a crash loop it must serve meanwhile)."""
    if not systemd_available(root, ns_pid):
        return None
    if not root.live and not ns_pid:
        p = root.join("/run/nodesleuth/systemctl-show")
        with open(p) as f:
            return parse_show(f.read(), p)
    cmd = systemctl(ns_pid)
    try:
        lst = _run(cmd + ["list-units", "--type=service", "--all", "--no-legend", "--plain",
                          "--state=active,activating,deactivating,reloading,failed"], timeout)
        names = [ln.split()[0] for ln in lst.stdout.splitlines() if ln.strip()]
        if not names:
            return []
        show = _run(cmd + ["show", "-p", ",".join(PROPS)] + names, timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise InputError("systemctl", str(e)) from None
    if show.returncode != 0 and not show.stdout:
        raise InputError("systemctl show", show.stderr.strip().splitlines()[-1] if show.stderr.strip() else "failed")
    return parse_show(show.stdout, "systemctl show")


class UnitWatcher:
    """Reads units on its own thread, so a systemd too busy to answer (a crash loop is what makes it
    busy) delays the answer, not the recorder's ticks. `poll()` starts a read when none is pending and
    returns the newest answer not yet taken, stamped with the time it came; a fixture tree is read at once.
    The reading thread lives as long as the watcher (its systemctl children die with it)."""

    def __init__(self, root: Root, ns_pid: int | None = None, timeout: float = 120):
        self.root, self.ns_pid, self.timeout = root, ns_pid, timeout
        self._want = threading.Event()
        self._stop = False
        self._lock = threading.Lock()
        self._ready: tuple[float, list[Unit] | None, str | None] | None = None
        self.pending = False
        self._thread: threading.Thread | None = None

    def _read(self) -> tuple[float, list[Unit] | None, str | None]:
        try:
            return time.time(), read_units(self.root, self.ns_pid, self.timeout), None
        except InputError as e:
            return time.time(), None, str(e)

    def _loop(self) -> None:
        while True:
            self._want.wait()
            self._want.clear()
            if self._stop:
                return
            got = self._read()
            with self._lock:
                self._ready, self.pending = got, False

    def poll(self, ask: bool = True) -> tuple[float, list[Unit] | None, str | None] | None:
        """(when answered, units or None when no systemd runs here, error or None), or None while no new
        answer is in. `ask`: start a read now unless one is pending."""
        if not self.root.live and not self.ns_pid:
            return self._read() if ask else None
        with self._lock:
            got, self._ready = self._ready, None
            if ask and not self.pending:
                self.pending = True
                if self._thread is None:
                    self._thread = threading.Thread(target=self._loop, name="nodesleuth-units", daemon=True)
                    self._thread.start()
                self._want.set()
        return got

    def close(self) -> None:
        self._stop = True
        self._want.set()


def process_age(root: Root, pid: int, uptime: float | None = None) -> float | None:
    """Seconds since a process started, from /proc/PID/stat field 22 and /proc/uptime."""
    from .procs import clock_ticks, parse_task_stat

    p = root.join(f"/proc/{pid}/stat")
    try:
        with open(p, "rb") as f:
            t = parse_task_stat(f.read(), pid, p)
    except OSError:
        return None
    if uptime is None:
        up = root.read("/proc/uptime").split()
        uptime = float(up[0])
    return max(0.0, uptime - t.starttime / clock_ticks())

