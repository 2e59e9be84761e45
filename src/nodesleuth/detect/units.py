"""Crash-looping systemd units: each restart can leak a cgroup, a container, page cache."""

from __future__ import annotations

from ..model.records import Unit
from ..model.actions import Action, protected
from .findings import Finding
from .registry import detector
from .window import Window


def findings(first: list[Unit] | None, last: list[Unit] | None, seconds: float,
             main_age=None) -> list[Finding]:
    """`main_age(pid)` gives a main process's age from /proc (None inside another PID namespace)."""
    if not last:
        return []
    before = {u.id: u for u in first or []}
    out = []
    for u in last:
        b = before.get(u.id)
        grew = u.n_restarts - b.n_restarts if b else (u.n_restarts if first is not None else 0)
        if not (u.crash_looping or grew > 0):
            continue
        ev = [f"{u.id}: NRestarts={u.n_restarts} ({grew:+d} in {seconds:.0f} s), state {u.active}/{u.sub}, "
              f"last result {u.result}, exit status {u.exit_status}",
              f"Restart={u.restart}, RestartSec={u.restart_usec / 1e6:g}s, enabled={u.enabled}"
              + (f", unit file {u.fragment}" if u.fragment else "")]
        if u.enabled == "enabled":
            ev.append(f"{u.id} is enabled: it will come back at every boot")
        age = main_age(u.main_pid) if main_age and u.main_pid else None
        if age is not None:
            ev.append(f"its main process (pid {u.main_pid}) started {age:.1f} s ago")
        # said, not proposed: disabling is proposed only by the zombie finding, when this unit is tied to them
        off = Action("disable_unit", u.id, f"{u.id} is crash-looping", protected=protected(u.id))
        rem = [f"if this node does not need it: {' && '.join(off.command_lines())}",
               *Action("investigate", u.id, "why it fails", commands=[
                   f"journalctl -u {u.id} -n 50   # otherwise find why it fails; fix its config"]).text()]
        if protected(u.id):
            ev.append(f"{u.id} is node-critical (protected): remedy will not disable it unless named")
        sev = "warning" if u.n_restarts >= 3 or grew > 0 else "info"
        out.append(Finding("crash_loop", sev, f"unit {u.id} is crash-looping: {u.n_restarts} restarts", ev, rem,
                           {"unit": u.id, "n_restarts": u.n_restarts, "restarts_delta": grew,
                            "active": u.active, "sub": u.sub, "enabled": u.enabled, "result": u.result,
                            "exit_status": u.exit_status, "restart_usec": u.restart_usec},
                           []))
    return out


@detector("crash_loop")
def from_window(w: Window) -> list[Finding]:
    return findings(w.units0, w.units1, w.seconds, w.process_age)
