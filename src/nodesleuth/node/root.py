"""The host root every reader of /proc and /sys takes, and what kind of root it is.

Three kinds, told apart by what is mounted, not by a flag the user must remember:
- "live": `/`, this process's own view of the running kernel;
- "host": the live host through a mount, e.g. a DaemonSet's `/host` (the host's `/` bind-mounted,
  with its procfs at /host/proc): the same running kernel, so everything that acts on it (the
  cgroup churn trace, the memcg cost probe, ethtool, systemd, perf) works as on `/`, through the
  host's namespaces (/host/proc/1/ns/*) where the container's own differ;
- "tree": a recorded fixture tree (files only): nothing is run against it.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

from ..model.errors import InputError
from ..model.procfs import MountEntry, mount_holding, parse_mount_table

LIVE, HOST, TREE = "live", "host", "tree"


def own_mounts() -> list[MountEntry]:
    """This process's mount table (/proc/self/mountinfo: the paths it opens); [] when unreadable."""
    try:
        with open("/proc/self/mountinfo") as f:
            return parse_mount_table(f.read(), "/proc/self/mountinfo")
    except (OSError, InputError):
        return []


def fstype(path: str) -> str | None:
    """The file system type of the mount that holds `path` (or its nearest existing ancestor), in this
    process's mount table; None when that cannot be read."""
    path = os.path.realpath(path)
    while not os.path.exists(path) and path not in ("/", ""):
        path = os.path.dirname(path)
    m = mount_holding(own_mounts(), path)
    return None if m is None else m.fstype


def _procfs_mounts() -> set[str]:
    """Mount points of procfs instances in this process's mount namespace."""
    return {m.path for m in own_mounts() if m.fstype == "proc"}


@functools.lru_cache(maxsize=16)
def _kind(path: str) -> str:
    real = os.path.realpath(path)
    if real == "/":
        return LIVE
    return HOST if os.path.join(real, "proc") in _procfs_mounts() else TREE


@dataclass(frozen=True)
class Root:
    """A host filesystem root; `Root("/")` is the live host."""

    path: str = "/"

    @property
    def kind(self) -> str:
        """live | host | tree (see the module's docstring)."""
        return _kind(self.path)

    @property
    def live(self) -> bool:
        """A running kernel (this one, directly or through a mount): its files regenerate on every
        read and it can be acted on (traced, probed, asked)."""
        return self.kind != TREE

    @property
    def here(self) -> bool:
        """This process's own `/`: /proc/self is us and our namespaces are the ones read."""
        return self.kind == LIVE

    def ns(self, pid: int, kind: str) -> str:
        """The namespace file of `pid` as seen through this root (`/host/proc/1/ns/net`)."""
        return self.join(f"/proc/{pid}/ns/{kind}")

    def same_ns(self, kind: str, pid: int = 1) -> bool | None:
        """Whether this process already shares `pid`'s namespace of that kind (compared by inode); None
        when PID's namespace cannot be looked at (a hardened PID 1 refuses even root: EACCES)."""
        if self.here and pid == 1:
            try:
                a, b = os.stat("/proc/self/ns/" + kind), os.stat(f"/proc/1/ns/{kind}")
            except OSError:
                return True  # our own root: our namespace is the one read
            return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
        try:
            a, b = os.stat(f"/proc/self/ns/{kind}"), os.stat(self.ns(pid, kind))
        except OSError:
            return None
        return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)

    def same_netdev(self, ifname: str) -> bool:
        """Whether interface `ifname` of this root is the one this process's network namespace has
        under that name (same ifindex and address): then asking it by name here (an ethtool ioctl)
        asks the host's, with host networking, even where PID 1's namespace cannot be looked at."""
        if self.here:
            return True
        try:
            for f in ("ifindex", "address"):
                with open(f"/sys/class/net/{ifname}/{f}") as a, open(self.join(f"/sys/class/net/{ifname}/{f}")) as b:
                    if a.read() != b.read():
                        return False
        except OSError:
            return False
        return True

    def hostname(self) -> str:
        """The host's name: ours on `/`; through a mount the host's own (/etc/hostname, not the
        container's); a recorded tree's directory name."""
        if self.here:
            import socket

            return socket.gethostname()
        name = (self.read_opt("/etc/hostname") or "").strip() if self.kind == HOST else ""
        return name or os.path.basename(os.path.abspath(self.path))

    def describe(self) -> str:
        """One line for `check` and the logs: which root, and what kind."""
        return {LIVE: "/ (live host)",
                HOST: f"{self.path} (live host through a mount: procfs at {self.join('/proc')})",
                TREE: f"{self.path} (recorded tree: files only, nothing is run against it)"}[self.kind]

    def join(self, abspath: str) -> str:
        """Map an absolute host path (e.g. /proc/stat) under this root."""
        return os.path.join(self.path, abspath.lstrip("/"))

    def read(self, abspath: str) -> str:
        """Read a whole text file, turning any OS error into a one-line InputError."""
        p = self.join(abspath)
        try:
            with open(p, "rb") as f:
                data = f.read()
        except OSError as e:
            raise InputError(p, e.strerror or str(e)) from None
        try:
            return data.decode()
        except UnicodeDecodeError:
            return data.decode("latin-1")

    def read_opt(self, abspath: str) -> str | None:
        """Like read() but None when the file does not exist (optional kernel files)."""
        p = self.join(abspath)
        if not os.path.exists(p):
            return None
        return self.read(abspath)

    def exists(self, abspath: str) -> bool:
        return os.path.exists(self.join(abspath))

    def listdir(self, abspath: str) -> list[str]:
        try:
            return os.listdir(self.join(abspath))
        except FileNotFoundError:
            return []
        except OSError as e:
            raise InputError(self.join(abspath), e.strerror or str(e)) from None


