"""Structured remediation actions: the one home of what nodesleuth may do to a node.

A detector or an explained incident proposes actions (`disable_unit`, `reclaim`, `investigate`);
this module turns them into the exact commands, for the host or for the systemd of another PID
namespace, and knows which units are never touched unless named explicitly.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

from ..node.systemd import nsenter

# Units whose loss takes the node off the network or out of the cluster. `remedy --apply` refuses
# them unless the user names them with --unit.
PROTECTED = ("kubelet.service", "containerd.service", "docker.service", "crio.service", "cri-docker.service",
             "sshd.service", "ssh.service", "systemd-*", "dbus.service", "dbus-broker.service",
             "NetworkManager.service", "networking.service", "network.service", "wpa_supplicant.service",
             "cloud-init*.service", "chronyd.service", "chrony.service", "amazon-ssm-agent.service", "getty@*")

RECLAIM_V1 = "sync; echo 3 > /proc/sys/vm/drop_caches"


def protected(unit: str) -> bool:
    return any(fnmatch.fnmatch(unit, p) for p in PROTECTED)


@dataclass
class Action:
    kind: str  # disable_unit | reclaim | investigate
    target: str  # unit name; for reclaim the v2 cgroup the zombies were removed from ("/..."), or "" (the node)
    why: str
    protected: bool = False
    commands: list[str] = field(default_factory=list)  # investigate: what to run by hand

    def command_lines(self, ns_pid: int | None = None) -> list[str]:
        pre = " ".join(nsenter(ns_pid)) + " " if ns_pid else ""
        if self.kind == "disable_unit":
            return [f"{pre}systemctl disable --now {self.target}", f"{pre}systemctl mask {self.target}"]
        if self.kind == "reclaim":
            if self.target.startswith("/"):  # cgroup v2: the parent the zombies were removed from
                return [f"echo \"$(cat /sys/fs/cgroup{self.target.rstrip('/')}/memory.current)\" > "
                        f"/sys/fs/cgroup{self.target.rstrip('/')}/memory.reclaim   # or: {RECLAIM_V1}",
                        "# if the dying count does not fall: reboot (mapped or in-use cache keeps them pinned)"]
            return [RECLAIM_V1,
                    "# if the dying count does not fall: reboot (mapped or in-use cache keeps them pinned)"]
        return list(self.commands)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "target": self.target, "why": self.why, "protected": self.protected,
                "commands": self.command_lines()}
