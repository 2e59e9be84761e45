"""The systemd journal's user-space lines that matter to a finding (kubelet, containerd, runc, systemd saying a
cgroup mkdir failed): read with journalctl on the live host, filtered in journalctl (--grep) so a large journal
costs one pass. The lines are matched in model/memcg_ids.py."""

from __future__ import annotations

import shutil
import subprocess

from .children import run
from .root import Root

GREP = "no space left on device|cannot allocate memory|device or resource busy"


def failure_lines(root: Root, since: float, timeout: float = 10.0) -> tuple[list[str], str | None]:
    """Journal lines since `since` (epoch s) that say ENOSPC/ENOMEM; (lines, why not read or None)."""
    if not root.live:
        return [], "journal not read: not the live host's root"
    exe = shutil.which("journalctl")
    if exe is None:
        return [], "journal not read: no journalctl"
    cmd = [exe, "--no-pager", "-q", "-o", "short-iso", f"--since=@{int(since)}", "--case-sensitive=false",
           f"--grep={GREP}"]
    try:
        p = run(cmd, timeout=timeout)
    except subprocess.TimeoutExpired:
        return [], f"journal not read: journalctl took over {timeout:.0f} s"
    except OSError as e:
        return [], f"journal not read: {e}"
    if p.returncode not in (0, 1):  # 1: nothing matched
        err = (p.stderr or "").strip().splitlines()
        return [], f"journal not read: journalctl exit {p.returncode}: {err[-1] if err else ''}"[:300]
    return p.stdout.splitlines(), None
