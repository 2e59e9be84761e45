#!/usr/bin/env bash
# Everything the test-suite needs on a fresh Debian machine, as root: sysstat (mpstat, sadc) for the
# cross-checks, ethtool, perf for kernel stacks and cgroup tracepoints, util-linux for unshare/nsenter,
# prometheus (server + promtool) for the fleet tests, gcc for the profiler's test program,
# Debian's chromium for the web view's browser tests (driven by Playwright from PyPI, no download),
# Debian's golang for `go tool pprof` reading the pprof export, atop for the recorder benchmark,
# podman/runc/mmdebstrap/buildah for the container image tests, prometheus-node-exporter, iproute2 and
# iptables for the softnet/TCP tests (issue 29), python3-venv where `python3 -m venv` cannot make a venv
# with pip (stock Debian: issue 36).
#
# Python packages: only what pyproject declares (`pip install -e ".[test]"`). With an argument, into a
# fresh virtual environment made there (as .ci/run does: the suite then tests the project, not what the
# machine's Python happens to have); without one, into python3 itself (a developer's own environment).
#   bash scripts/setup-tests.sh [VENV-DIR]
set -euo pipefail
venv="${1:-}"
[ -z "$venv" ] || venv="$(realpath -m "$venv")"
export DEBIAN_FRONTEND=noninteractive
need=()
command -v mpstat >/dev/null || need+=(sysstat)
command -v ethtool >/dev/null || need+=(ethtool)
command -v perf >/dev/null || need+=(linux-perf)
command -v nsenter >/dev/null || need+=(util-linux)
[ -x /lib/systemd/systemd ] || need+=(systemd)
command -v prometheus >/dev/null || need+=(prometheus)
command -v promtool >/dev/null || need+=(prometheus)
command -v gcc >/dev/null || need+=(gcc)
command -v curl >/dev/null || need+=(curl)
command -v atop >/dev/null || need+=(atop)
[ -x /usr/bin/chromium ] || need+=(chromium)
command -v go >/dev/null || need+=(golang-go)
# issue 29: the real node_exporter the exporter is compared with (Debian's 1.5.0 on bookworm), iproute2 for
# the network victims' namespaces and veths, iptables for their induced loss (this kernel has no sch_netem)
[ -x /usr/bin/prometheus-node-exporter ] || need+=(prometheus-node-exporter)
command -v ip >/dev/null || need+=(iproute2)
command -v iptables >/dev/null || need+=(iptables)
command -v ss >/dev/null || need+=(iproute2)
# issue 39: Debian's containerd, driven through its CRI API by tests/cri as kubelet drives it
command -v containerd >/dev/null || need+=(containerd)
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    apt-get install -y -qq "${need[@]}" >/dev/null
fi
# the cgroup-v2 many-CPU tests boot Debian's kernels (fetched by tests/vm/vmrun.py) under QEMU TCG; the
# suite fails under CI=true when QEMU is missing (tests/conftest.py missing()), so this must not be optional
vm=()
command -v qemu-system-x86_64 >/dev/null || vm+=(qemu-system-x86)
command -v busybox >/dev/null || vm+=(busybox-static)
command -v zstd >/dev/null || vm+=(zstd)
if [ ${#vm[@]} -gt 0 ]; then
    apt-get update -qq || true
    apt-get install -y -qq --no-install-recommends "${vm[@]}" >/dev/null
fi
# the container image tests (tests/test_image.py): podman with runc (crun refuses hybrid cgroups), and
# mmdebstrap + buildah, with which deploy/image/build.sh makes the image from Debian packages
img=()
command -v podman >/dev/null || img+=(podman)
[ -x /usr/sbin/runc ] || img+=(runc)
command -v mmdebstrap >/dev/null || img+=(mmdebstrap)
command -v buildah >/dev/null || img+=(buildah)
if [ ${#img[@]} -gt 0 ]; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${img[@]}" >/dev/null
fi
# `python3 -m venv` needs ensurepip, which Debian ships apart (python3-venv): probe it for real
probe="$(mktemp -d /var/tmp/nodesleuth-venv-probe.XXXXXX)"
if ! python3 -m venv "$probe/v" >/dev/null 2>&1 || [ ! -x "$probe/v/bin/pip" ]; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
fi
rm -rf "$probe"
cd "$(dirname "$0")/.."
if [ -n "$venv" ]; then
    python3 -m venv "$venv"
    "$venv/bin/python3" -m pip install -q -e ".[test]"
else
    python3 -m pip install -q -e ".[test]"
fi
