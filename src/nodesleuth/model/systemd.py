"""`systemctl show` output: blocks of KEY=VALUE per unit, separated by blank lines."""

from __future__ import annotations

from .errors import InputError
from .records import Unit


def parse_properties(text: str) -> dict[str, str]:
    """One unit's KEY=VALUE lines, each split on its first '=' only: values keep their spaces and '='
    signs (`Description=A unit`, `RestartUSec=1min 30s`, `ExecStart={ path=/bin/sh ; ... }`)."""
    kv = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            kv[k] = v
    return kv


def parse_show(text: str, path: str) -> list[Unit]:
    units = []
    for block in text.split("\n\n"):
        kv = parse_properties(block)
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

        units.append(Unit(id=kv["Id"], n_restarts=num("NRestarts"), active=kv.get("ActiveState", ""),
                          sub=kv.get("SubState", ""), enabled=kv.get("UnitFileState", ""), result=kv.get("Result", ""),
                          exit_status=num("ExecMainStatus"), main_pid=num("MainPID"), restart=kv.get("Restart", ""),
                          restart_usec=num("RestartUSec"), fragment=kv.get("FragmentPath", ""),
                          cgroup=kv.get("ControlGroup", "")))
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
