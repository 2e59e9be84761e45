"""Structured remediation actions: the one home of what nodesleuth may do to a node, and of the remedy text
every finding and report shows.

A detector or an explained incident proposes actions (`disable_unit`, `reclaim`, `investigate`); `command_lines`
turns one into the exact commands (for the host, or through a prefix such as node/systemd.py `nsenter` for the
systemd of another PID namespace) and `text` into the lines a person reads, so what a finding says to run and
what `remedy` plans are the same lines. `protected` says which units are never touched unless named explicitly.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

# Units whose loss takes the node off the network or out of the cluster. `remedy --apply` refuses
# them unless the user names them with --unit.
PROTECTED = ("kubelet.service", "containerd.service", "docker.service", "crio.service", "cri-docker.service",
             "sshd.service", "ssh.service", "systemd-*", "dbus.service", "dbus-broker.service",
             "NetworkManager.service", "networking.service", "network.service", "wpa_supplicant.service",
             "cloud-init*.service", "chronyd.service", "chrony.service", "amazon-ssm-agent.service", "getty@*")

RECLAIM_V1 = "sync; echo 3 > /proc/sys/vm/drop_caches"
REBOOT = "# if the dying count does not fall: reboot (mapped or in-use cache keeps them pinned)"


def protected(unit: str) -> bool:
    return any(fnmatch.fnmatch(unit, p) for p in PROTECTED)


@dataclass
class Action:
    kind: str  # disable_unit | reclaim | investigate
    target: str  # unit name; for reclaim the v2 cgroup the zombies were removed from ("/..."), or "" (the node)
    why: str
    protected: bool = False
    commands: list[str] = field(default_factory=list)  # investigate: what to run by hand

    def command_lines(self, via: list[str] | None = None) -> list[str]:
        """The commands, each run through `via` (a prefix such as `nsenter -t PID -m -p --`) when given."""
        pre = " ".join(via) + " " if via else ""
        if self.kind == "disable_unit":
            return [f"{pre}systemctl disable --now {self.target}", f"{pre}systemctl mask {self.target}"]
        if self.kind == "reclaim":
            if self.target.startswith("/"):  # cgroup v2: the parent the zombies were removed from
                cg = f"/sys/fs/cgroup{self.target.rstrip('/')}"
                return [f"echo \"$(cat {cg}/memory.current)\" > {cg}/memory.reclaim   # or: {RECLAIM_V1}", REBOOT]
            return [f"{RECLAIM_V1}   # evicts all clean page cache: expect a burst of reads", REBOOT]
        return list(self.commands)

    def text(self) -> list[str]:
        """The remediation lines a finding or report shows: the command lines, a comment-only line said as prose."""
        return [c.lstrip("# ") if c.startswith("#") else c for c in self.command_lines()]

    def to_dict(self) -> dict:
        return {"kind": self.kind, "target": self.target, "why": self.why, "protected": self.protected,
                "commands": self.command_lines()}


# the investigate commands more than one finding or explanation proposes: written once here, so a hot-core finding,
# a zombie finding and explain's remediation say the same command for the same thing

def profile_cpu(cpu: int, why: str) -> str:
    """Profile one CPU for 10 s with call stacks (what runs there)."""
    return f"perf record -C {cpu} -g -- sleep 10   # {why}"


def unit_status(unit: str, why: str) -> str:
    return f"systemctl status {unit}   # {why}"


def owner_commands(pod: dict, container: str) -> list[str]:
    """What a pod's owner runs to see why its container keeps restarting (never run by nodesleuth)."""
    ns, name = pod.get("namespace") or "<namespace>", pod.get("pod") or "<pod>"
    return [f"kubectl -n {ns} logs {name} -c {container} --previous   # why the last run ended",
            f"kubectl -n {ns} describe pod {name}   # exit codes, probes, back-off",
            "fix the container's command, config or probe, or remove the workload if nobody needs it: "
            "every restart makes a new cgroup on this node"]


def remedy_text(actions: list[Action]) -> list[str]:
    """The remediation lines of several actions, in order, each line once."""
    return list(dict.fromkeys(line for a in actions for line in a.text()))
