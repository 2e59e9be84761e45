"""systemd unit health collected over time: NRestarts, states, enablement (node/systemd.py asks).

Restarts are counted from NRestarts, not journal text (NPD counts "Started ..." lines, which misses
restarts when journald rate-limits).
"""

from __future__ import annotations

import threading
import time

from ..model.errors import InputError
from ..model.records import Unit, Units
from ..node.root import Root
from ..node.systemd import read_units
from .registry import Collector, collector


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
        self._ready: tuple[float, list[Unit] | None, InputError | None] | None = None
        self.pending = False
        self._thread: threading.Thread | None = None

    def _read(self) -> tuple[float, list[Unit] | None, InputError | None]:
        try:
            return time.time(), read_units(self.root, self.ns_pid, self.timeout), None
        except InputError as e:
            return time.time(), None, e

    def _loop(self) -> None:
        while True:
            self._want.wait()
            self._want.clear()
            if self._stop:
                return
            got = self._read()
            with self._lock:
                self._ready, self.pending = got, False

    def poll(self, ask: bool = True) -> tuple[float, list[Unit] | None, InputError | None] | None:
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



@collector("units", options=("ns_pid", "units_every", "units_timeout"))
class UnitsReader(Collector):
    """The units every `units_every` ticks (0: never), read on the watcher's thread: a systemd slow to answer
    delays the answer, never the tick (a tick without one has no units). No systemd here: asked again once a
    minute (a namespace's systemd may come up later)."""

    recovers = True

    def __init__(self, root: Root, reader, ns_pid: int | None = None, units_every: int = 5,
                 units_timeout: float = 120.0):
        super().__init__(root, reader)
        self.every, self.n, self.seen = units_every, 0, True
        self.watcher = UnitWatcher(root, ns_pid, units_timeout) if units_every else None

    def read(self, interval: float, seen=None) -> Units | None:
        if self.watcher is None:
            return None
        got = self.watcher.poll(self.n % (self.every if self.seen else 60) == 0)
        self.n += 1
        if got is None:
            return None
        _, units, err = got
        self.seen = units is not None or err is not None
        if err is not None:
            raise err
        return None if units is None else Units(units)

    def close(self) -> None:
        if self.watcher is not None:
            self.watcher.close()

def process_age(root: Root, pid: int, uptime: float | None = None) -> float | None:
    """Seconds since a process started, from /proc/PID/stat field 22 and /proc/uptime."""
    from .procs import clock_ticks
    from ..model.procfs import parse_task_stat

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

