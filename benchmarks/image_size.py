"""The container image, weighed: its size (podman), and what takes the room inside it: the installed size
of every Debian package (dpkg-query Installed-Size, which path-excluded files still count in) beside
what is really on disk (du of the root by directory), the biggest Python packages and the __pycache__
share. Builds the image first when missing (deploy/image/build.sh --if-missing).

`python -m benchmarks.image_size [--no-build]`"""

from __future__ import annotations

import argparse
import json
import os
import subprocess

from benchmarks.common import emit

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(REPO, "deploy", "image", "build.sh")

# run in the image's root (podman image mount, chroot): the measures, one section per header line
SCRIPT = r"""
echo "PKG"; dpkg-query -Wf '${Installed-Size} ${Package}\n' | sort -rn | head -40
echo "DU"; du -sk /usr/lib/python3/dist-packages/* /usr/local/lib/python3*/dist-packages/* 2>/dev/null | sort -rn | head -25
echo "DIRS"; du -sk /usr/lib/python3* /usr/lib/x86_64-linux-gnu /usr/bin /usr/sbin /usr/share /usr/libexec /usr/local /var /etc /usr/lib/x86_64-linux-gnu/perl-base /usr/share/perl /usr/lib/x86_64-linux-gnu/perl 2>/dev/null
echo "PYC"; find / -xdev -name __pycache__ -type d -prune -exec du -sk {} + 2>/dev/null | awk '{s+=$1} END {print s+0, "pycache"}'
echo "TOTAL"; du -skx / 2>/dev/null
echo "END"
"""


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--name", default="image_size", help="result name (benchmarks/results/NAME.json)")
    a = ap.parse_args(argv)
    image = subprocess.run(["bash", BUILD, "--print-image"], capture_output=True, text=True, check=True).stdout.strip()
    if not a.no_build:
        subprocess.run(["bash", BUILD, "--if-missing"], check=True, stdout=subprocess.DEVNULL)
    insp = json.loads(subprocess.run(["podman", "image", "inspect", image], capture_output=True, text=True, check=True).stdout)[0]
    root = subprocess.run(["podman", "image", "mount", image], capture_output=True, text=True, check=True).stdout.strip()
    try:
        out = subprocess.run(["chroot", root, "/bin/sh", "-c", SCRIPT], capture_output=True, text=True, check=True).stdout
    finally:
        subprocess.run(["podman", "image", "unmount", image], capture_output=True)
    sec, parts = None, {}
    for ln in out.splitlines():
        if ln in ("PKG", "DU", "DIRS", "PYC", "TOTAL", "END"):
            sec = ln
            parts.setdefault(sec, [])
            continue
        if sec and ln.strip():
            kb, name = ln.split(None, 1)
            parts[sec].append({"kb": int(kb), "name": name})
    return emit({"benchmark": a.name, "image": image, "image_size_mb": round(insp["Size"] / 1e6, 1),
                 "base": insp.get("Labels", {}).get("io.nodesleuth.base", ""),
                 "packages_installed_size_kb": parts.get("PKG", []), "python_packages_du_kb": parts.get("DU", []),
                 "dirs_du_kb": parts.get("DIRS", []), "pycache_kb": (parts.get("PYC") or [{}])[0].get("kb"),
                 "root_du_kb": (parts.get("TOTAL") or [{}])[0].get("kb")})


if __name__ == "__main__":
    main()
