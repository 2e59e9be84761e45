"""Configuration facts as low-cardinality info metrics, and the one feature vocabulary of fleet analysis.

A host's facts (the snapshot's kernel, os_image, cgroup_versions, cloud, sysctls, packages, units)
become `*_info` series (value 1, the fact in the labels, Prometheus's info convention), and every
info series becomes the features the drift ranking counts. The exporter, the snapshot path and the
Prometheus path all go through `info_series` and `features_of`, so `fleet DIR` and
`fleet --prometheus URL` rank the very same features.

Bounds (what keeps the label sets low-cardinality; a longer value is cut, entries past a count are
left out, crash-looping units never before the others):
- every label value at most MAX_VALUE (128) characters;
- sysctls: only snapshot.SYSCTLS (14 names);
- packages: only names matching snapshot.PACKAGES, at most MAX_PACKAGES (32);
- units: only service units that are enabled or crash-looping, at most MAX_UNITS (64), crash-looping
  ones first; `unit_file_state` is systemd's UnitFileState (enabled, disabled, static, masked...),
  `state` one of crash-looping, running, failed, inactive, other.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..model.metrics import METRICS

MAX_VALUE = 128
MAX_PACKAGES = 32
MAX_UNITS = 64
INFO = ("nodesleuth_node", "nodesleuth_unit", "nodesleuth_sysctl", "nodesleuth_package")


def _v(x) -> str:
    s = str(x if x is not None else "")
    return s if len(s) <= MAX_VALUE else s[:MAX_VALUE - 1] + "…"


def unit_state(u: dict) -> str:
    if u.get("crash_looping"):
        return "crash-looping"
    if u.get("active") == "active":
        return "running"
    if u.get("active") in ("failed", "inactive"):
        return u["active"]
    return "other"


def info_series(s: dict) -> Iterator[tuple[str, tuple[str, ...]]]:
    """(metric family, label values in METRICS order) for every info series of one host's facts."""
    cloud = s.get("cloud") or {}
    yield "nodesleuth_node", (_v(cloud.get("zone")), _v(cloud.get("instance_type")), _v(s.get("kernel")),
                              _v(s.get("os_image")), _v("+".join(sorted(s.get("cgroup_versions") or []))))
    units = [u for u in s.get("units") or [] if u.get("enabled") == "enabled" or u.get("crash_looping")]
    units.sort(key=lambda u: (not u.get("crash_looping"), u.get("unit", "")))
    for u in units[:MAX_UNITS]:
        yield "nodesleuth_unit", (_v(u.get("unit")), _v(u.get("enabled")), unit_state(u))
    for k, v in sorted((s.get("sysctls") or {}).items()):
        yield "nodesleuth_sysctl", (_v(k), _v(v))
    for k, v in sorted((s.get("packages") or {}).items())[:MAX_PACKAGES]:
        yield "nodesleuth_package", (_v(k), _v(v))


def features_of(name: str, labels: dict[str, str]) -> list[str]:
    """The features one info series stands for (zone is not one: it is what hosts are grouped by)."""
    g = labels.get
    if name == "nodesleuth_node":
        out = [f"kernel {g('kernel', '')}"]
        if g("os_image"):
            out.append(f"os_image {g('os_image')}")
        out += [f"cgroup {v}" for v in (g("cgroup") or "").split("+") if v]
        if g("instance_type"):
            out.append(f"cloud instance_type={g('instance_type')}")
        return out
    if name == "nodesleuth_unit":
        u, enabled, state = g("unit", ""), g("unit_file_state") == "enabled", g("state")
        out = [f"unit {u} enabled"] if enabled else []
        if state == "crash-looping":
            out.append(f"unit {u} enabled+crash-looping" if enabled else f"unit {u} crash-looping")
        elif state == "running":
            out.append(f"unit {u} running")
        return out
    if name == "nodesleuth_sysctl":
        return [f"sysctl {g('sysctl')}={g('value')}"]
    if name == "nodesleuth_package":
        return [f"package {g('package')}={g('version')}", f"package {g('package')} installed"]
    return []


def labels_of(name: str, values: tuple[str, ...]) -> dict[str, str]:
    return dict(zip(METRICS[name].labels, values))


def host_features(s: dict) -> set[str]:
    return {f for name, vals in info_series(s) for f in features_of(name, labels_of(name, vals))}
