#!/usr/bin/env python3
"""Boot a real Debian kernel (5.10, 6.1, 6.12 or 7.2) under QEMU TCG and run shell commands in it.

Stdlib only (Python 3.11); apt-get / pip are invoked as subprocesses.

    from vmrun import ensure_kernel, run_in_vm, VMUnavailable
    try:
        k = ensure_kernel()
    except VMUnavailable as e:
        missing(str(e))  # tests/conftest.py: a failure under CI=true
    rc, out, err = run_in_vm("cat /sys/fs/cgroup/cgroup.controllers", cpus=16)

Two back ends, same interface:
  * "vng"   (default): virtme-ng from PyPI (in its own venv under the cache dir).
             The host's / is shared read-only over 9p, /tmp etc. are tmpfs,
             so the host's python3 and any venv under /var/cache are usable.
  * "9p":    our own busybox initramfs that loads the 9p modules, mounts the
             host / (read-only) over virtio-9p, puts tmpfs on the writable
             places, mounts cgroup2 and chroots into the host root. Faster
             than vng and has no dependency besides busybox-static.

Kernels (`kernel=` / $NODESLEUTH_VM_KERNEL, default "6.12"): see KERNELS. Cgroup layout
(`hierarchy=`): "v2" (cgroup_no_v1=all, cgroup2 at /sys/fs/cgroup) or "v1" (systemd's hybrid
layout: tmpfs at /sys/fs/cgroup, one v1 hierarchy per controller, cgroup2 at /sys/fs/cgroup/unified).

Never uses KVM: TCG only (software emulation; no /dev/kvm on the machines this runs on).
"""
from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, asdict
from pathlib import Path

REPO = str(Path(__file__).resolve().parents[2])  # this checkout
CACHE = Path(os.environ.get("NODESLEUTH_VM_CACHE", "/var/cache/nodesleuth-vm"))
def _host_mirror() -> str:
    """The Debian archive this host's own apt uses (deb822 `URIs:` or one-line `deb` sources)."""
    import glob as _glob

    for path in sorted(_glob.glob("/etc/apt/sources.list.d/*.sources")) + ["/etc/apt/sources.list"]:
        try:
            text = open(path).read()
        except OSError:
            continue
        for line in text.splitlines():
            parts = line.split()
            if parts[:1] == ["URIs:"] and parts[1].rstrip("/").endswith("/debian"):
                return parts[1].rstrip("/")
            if parts[:1] == ["deb"]:
                uri = next((x for x in parts[1:] if "://" in x), "")
                if uri.rstrip("/").endswith("/debian"):
                    return uri.rstrip("/")
    raise RuntimeError("no Debian archive in this host's apt sources (set NODESLEUTH_VM_MIRROR)")


MIRROR = os.environ.get("NODESLEUTH_VM_MIRROR") or _host_mirror()
SUITE = "bookworm-backports"
KPKG_RE = re.compile(r"^linux-image-6\.12\.[0-9]+\+deb12(\.[0-9]+)?-amd64-unsigned$")
# kernel generations by name: Debian suite, image package pattern, apt-cache pkgnames prefix.
# The newest match is taken; an -unsigned package is preferred over the signed one with the same
# release (sid has only the signed one: its vmlinuz boots under QEMU all the same).
KERNELS = {
    "5.10": ("bullseye", re.compile(r"^linux-image-5\.10\.0-[0-9]+-amd64(-unsigned)?$"), "linux-image-5.10.0-"),
    "6.1": ("bookworm", re.compile(r"^linux-image-6\.1\.0-[0-9]+-amd64(-unsigned)?$"), "linux-image-6.1.0-"),
    "6.12": (SUITE, KPKG_RE, "linux-image-6.12"),
    "7.2": ("sid", re.compile(r"^linux-image-7\.2\.[0-9]+(\+deb[0-9]+)?-amd64(-unsigned)?$"), "linux-image-7.2"),
}
DEFAULT_KERNEL = "6.12"
HIERARCHIES = ("v2", "v1")
HOST_PKGS = {  # binary -> Debian package
    "qemu-system-x86_64": "qemu-system-x86",
    "busybox": "busybox-static",
    "zstd": "zstd",
}
# loaded by our initramfs: 9p root, overlays, and an optional ext4 scratch disk (ext4 softdep: crc32c).
# Names that a kernel builds in or does not have (netfs before 5.17, crc32c_generic after 6.14,
# virtio_pci where it is =y) are skipped; their dependencies come from that kernel's modules.dep.
INITRD_MODULES = ["virtio", "virtio_ring", "virtio_pci", "netfs", "9pnet", "9pnet_virtio", "9p", "overlay",
                  "virtio_blk", "crc32c_generic", "crc32c", "ext4"]
OPTIONAL_MODULES = {"virtio", "virtio_ring", "virtio_pci", "netfs", "crc32c_generic", "crc32c"}
START = "@@VMRUN-OUT-START@@"
END = "@@VMRUN-OUT-END@@"


class VMUnavailable(RuntimeError):
    """QEMU (or the kernel) cannot be made available: tests should skip."""


@dataclass
class Kernel:
    release: str          # e.g. 6.12.57+deb12-amd64
    package: str          # linux-image-...-unsigned
    version: str          # Debian version of that package
    root: str             # unpacked package tree (has boot/ and lib/modules/)
    vmlinuz: str          # bzImage from the package
    vmlinux: str          # uncompressed ELF (fastest to boot with -kernel)
    modules: str          # <root>/lib/modules/<release>
    qemu: str             # path to qemu-system-x86_64
    busybox: str | None
    name: str = DEFAULT_KERNEL  # generation asked for: a key of KERNELS


def _log(msg: str) -> None:
    if os.environ.get("VMRUN_QUIET") != "1":
        print(f"[vmrun] {msg}", file=sys.stderr, flush=True)


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("check", True)
    kw.setdefault("text", True)
    kw.setdefault("capture_output", True)
    try:
        return subprocess.run(cmd, **kw)
    except subprocess.CalledProcessError as e:
        raise RuntimeError(f"command failed ({e.returncode}): {shlex.join(map(str, cmd))}\n"
                           f"{(e.stdout or '')[-2000:]}{(e.stderr or '')[-2000:]}") from None


# --------------------------------------------------------------------------- locking

from contextlib import contextmanager


@contextmanager
def _cache_lock(name: str = "lock"):
    """Serialise fetch/unpack/venv work between concurrent processes (pytest-xdist, parallel CI)."""
    import fcntl
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".{name}", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# --------------------------------------------------------------------------- host packages

_apt_updated = False


def _apt_install(pkgs: list[str]) -> None:
    global _apt_updated
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    if not _apt_updated:
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, text=True)
        _apt_updated = True
    _run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *pkgs], env=env)


def ensure_host_tools(need_busybox: bool = True) -> dict[str, str | None]:
    """Install qemu-system-x86 / busybox-static / zstd if missing; return their paths."""
    missing = [pkg for binary, pkg in HOST_PKGS.items()
               if shutil.which(binary) is None and (need_busybox or binary != "busybox")]
    if missing:
        _log(f"apt-get install --no-install-recommends {' '.join(missing)}")
        try:
            _apt_install(missing)
        except Exception as e:  # noqa: BLE001
            if shutil.which("qemu-system-x86_64") is None:
                raise VMUnavailable(f"qemu-system-x86_64 is not installed and could not be installed: {e}") from e
            _log(f"warning: {e}")
    qemu = shutil.which("qemu-system-x86_64")
    if qemu is None:
        raise VMUnavailable("qemu-system-x86_64 not found after apt-get install qemu-system-x86")
    if shutil.which("zstd") is None:
        raise RuntimeError("zstd is needed to extract vmlinux (apt-get install zstd)")
    return {"qemu": qemu, "busybox": shutil.which("busybox"), "zstd": shutil.which("zstd")}


# --------------------------------------------------------------------------- kernel package

def _private_apt(suite: str = SUITE) -> list[str]:
    """apt options that use only our own sources list, lists and cache (host apt untouched)."""
    base = CACHE / "apt" if suite == SUITE else CACHE / f"apt-{suite}"
    for d in ("lists/partial", "cache/archives/partial", "etc/preferences.d", "etc/apt.conf.d"):
        (base / d).mkdir(parents=True, exist_ok=True)
    src = base / "etc" / "sources.list"
    src.write_text(f"deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] {MIRROR} {suite} main\n")
    return [
        "-o", f"Dir::Etc::sourcelist={src}",
        "-o", "Dir::Etc::sourceparts=-",
        "-o", f"Dir::Etc::preferencesparts={base / 'etc/preferences.d'}",
        "-o", f"Dir::State::Lists={base / 'lists'}",
        "-o", f"Dir::Cache={base / 'cache'}",
        "-o", "APT::Get::List-Cleanup=0",
        "-o", "Debug::NoLocking=1",
    ]


def _pick_kernel_package(opts: list[str], name: str = DEFAULT_KERNEL) -> tuple[str, str]:
    suite, pkg_re, prefix = KERNELS[name]
    out = _run(["apt-cache", *opts, "pkgnames", prefix]).stdout.split()
    cands = sorted({p for p in out if pkg_re.match(p)})
    if not cands:
        raise RuntimeError(f"no {pkg_re.pattern} in {suite}: {out[:20]}")

    def key(p: str):  # newest release first, then -unsigned before the signed package
        rel = p.removesuffix("-unsigned")
        return [int(x) if x.isdigit() else x for x in re.split(r"[.+-]", rel)] + [p.endswith("-unsigned")]

    pkg = sorted(cands, key=key)[-1]
    pol = _run(["apt-cache", *opts, "show", "--no-all-versions", pkg]).stdout
    ver = re.search(r"^Version: (.+)$", pol, re.M).group(1)
    return pkg, ver


def _extract_vmlinux(vmlinuz: Path, out: Path) -> None:
    """The bzImage's payload, uncompressed: zstd (Debian >= 6.x), xz or gzip (older builds)."""
    import lzma
    import zlib
    data = vmlinuz.read_bytes()

    def unzstd(b: bytes) -> bytes:
        # zstd complains about trailing garbage after the frame but still writes the ELF
        return subprocess.run(["zstd", "-dcq"], input=b, capture_output=True).stdout

    def unxz(b: bytes) -> bytes:
        try:
            return lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(b)
        except lzma.LZMAError:
            return b""

    def ungz(b: bytes) -> bytes:
        try:
            return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(b)
        except zlib.error:
            return b""

    for magic, fn in ((b"\x28\xb5\x2f\xfd", unzstd), (b"\xfd7zXZ\x00", unxz), (b"\x1f\x8b\x08", ungz)):
        off = data.find(magic)
        while off >= 0:
            elf = fn(data[off:])
            if elf[:4] == b"\x7fELF":
                tmp = out.with_suffix(".tmp")
                tmp.write_bytes(elf)
                tmp.rename(out)
                return
            off = data.find(magic, off + 1)
    raise RuntimeError(f"no compressed ELF payload (zstd/xz/gzip) found in {vmlinuz}")


def _kernel_name(kernel: str | None) -> str:
    name = kernel or os.environ.get("NODESLEUTH_VM_KERNEL") or DEFAULT_KERNEL
    if name not in KERNELS:
        raise ValueError(f"unknown kernel {name!r}: one of {', '.join(KERNELS)}")
    return name


def ensure_kernel(need_busybox: bool = True, kernel: str | None = None) -> Kernel:
    """Fetch (once) the newest image package of generation `kernel` (a key of KERNELS, default
    $NODESLEUTH_VM_KERNEL or "6.12": linux-image-6.12.*+deb12-amd64-unsigned from bookworm-backports),
    unpack it under CACHE, extract vmlinux, and make sure qemu is installed."""
    name = _kernel_name(kernel)
    with _cache_lock("tools"):
        tools = ensure_host_tools(need_busybox)
    CACHE.mkdir(parents=True, exist_ok=True)
    k = _cached_kernel(tools, name)
    if k is not None:
        return k
    with _cache_lock("kernel"):
        return _cached_kernel(tools, name) or _fetch_kernel(tools, name)


def _stamp(name: str) -> Path:
    return CACHE / ("kernel.json" if name == DEFAULT_KERNEL else f"kernel-{name}.json")


def _cached_kernel(tools, name: str = DEFAULT_KERNEL) -> Kernel | None:
    """The kernel unpacked by an earlier run, if its files are still there."""
    stamp = _stamp(name)
    if stamp.exists():
        k = json.loads(stamp.read_text())
        k.update(qemu=tools["qemu"], busybox=tools["busybox"], name=name)
        if Path(k["vmlinux"]).exists() and Path(k["modules"]).is_dir():
            return Kernel(**k)
    return None


def _fetch_kernel(tools, name: str = DEFAULT_KERNEL) -> Kernel:
    stamp = _stamp(name)
    suite = KERNELS[name][0]
    opts = _private_apt(suite)
    _log(f"apt-get update ({suite}, private lists under {CACHE})")
    _run(["apt-get", *opts, "update", "-qq"])
    pkg, ver = _pick_kernel_package(opts, name)
    release = pkg[len("linux-image-"):].removesuffix("-unsigned")
    # Debian >= 7.x splits the image: linux-image-<rel> is empty and depends on linux-binary-<rel>
    # (vmlinuz; linux-binary-unsigned-<rel> also exists), linux-modules-<rel> and linux-base-<rel>.
    pkgs = [pkg]
    dep = _run(["apt-cache", *opts, "show", f"{pkg}={ver}"]).stdout
    split = [d for d in re.findall(r"\b(linux-(?:binary|modules|base)-[^\s,()]+)", dep.split("\nDepends:", 1)[-1]
                                   .split("\n", 1)[0])]
    if split:
        names = set(_run(["apt-cache", *opts, "pkgnames", "linux-binary-"]).stdout.split())
        pkgs = [f"linux-binary-unsigned-{release}" if d == f"linux-binary-{release}"
                and f"linux-binary-unsigned-{release}" in names else d for d in dict.fromkeys(split)]
    debdir = CACHE / "debs"
    debdir.mkdir(exist_ok=True)
    debs = []
    for p in pkgs:
        found = list(debdir.glob(f"{p}_*.deb"))
        if not found:
            _log(f"apt-get download {p}={ver}")
            _run(["apt-get", *opts, "download", f"{p}={ver}"], cwd=debdir)
            found = list(debdir.glob(f"{p}_*.deb"))
        debs.append(found[0])
    root = CACHE / f"kernel-{release}"

    def find(*rels: str) -> Path:
        return next((root / r for r in rels if (root / r).exists()), root / rels[0])

    zs = (f"boot/vmlinuz-{release}", f"usr/lib/modules/{release}/vmlinuz.unsigned",
          f"usr/lib/modules/{release}/vmlinuz", f"lib/modules/{release}/vmlinuz")
    if not find(*zs).exists():
        tmp = Path(tempfile.mkdtemp(dir=CACHE, prefix=".unpack-"))
        for deb in debs:
            _log(f"dpkg -x {deb.name}")
            _run(["dpkg-deb", "-x", str(deb), str(tmp)])
        if root.exists():
            shutil.rmtree(root)
        tmp.rename(root)
    vmlinuz = find(*zs)
    vmlinux = vmlinuz.with_name(f"vmlinux-{release}")
    if not vmlinux.exists():
        _log("extracting uncompressed vmlinux from the compressed payload")
        _extract_vmlinux(vmlinuz, vmlinux)
    modules = find(f"lib/modules/{release}", f"usr/lib/modules/{release}")
    if not (modules / "modules.dep").exists() or (modules / "modules.dep").stat().st_size == 0:
        depmod = shutil.which("depmod") or "/sbin/depmod"
        _run([depmod, "-b", str(modules.parent.parent.parent if modules.parent.parent.name == "lib"
                                 and modules.parent.parent.parent.name == "usr" else root), release])
        if not (modules / "modules.dep").exists():
            _run([depmod, "-b", str(root), release])
    k = Kernel(release=release, package=pkg, version=ver, root=str(root), vmlinuz=str(vmlinuz),
               vmlinux=str(vmlinux), modules=str(modules), qemu=tools["qemu"], busybox=tools["busybox"], name=name)
    d = asdict(k)
    d.pop("qemu"), d.pop("busybox"), d.pop("name")
    stamp.write_text(json.dumps(d, indent=1))
    return k


# --------------------------------------------------------------------------- python side

def host_python() -> str:
    """The real interpreter behind `python3` (pyenv's shim is a bash script; resolve it)."""
    exe = os.environ.get("NODESLEUTH_VM_PYTHON")
    if exe:
        return exe
    exe = shutil.which("python3") or sys.executable
    out = _run([exe, "-c", "import sys; print(sys.executable); print(sys.prefix != sys.base_prefix)"]).stdout.split()
    if len(out) == 2 and out[1] == "True":
        # a venv's python (CI's fresh one): keep its own path, so the guest reads its pyvenv.cfg and uses
        # its site-packages (what pyproject declares), not the base interpreter's
        return os.path.join(os.path.realpath(os.path.dirname(out[0])), os.path.basename(out[0]))
    return os.path.realpath(out[0] if out else sys.executable)


def _venv(path: Path, python: str) -> Path:
    py = path / "bin" / "python"
    if not py.exists():
        _log(f"python -m venv {path}")
        _run([python, "-m", "venv", str(path)])
    return py


def _pip(py: Path, *args: str) -> None:
    _run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args])


def ensure_vng() -> str:
    """virtme-ng from PyPI in its own venv (CACHE/vng-venv); returns the vng path."""
    vng = CACHE / "vng-venv" / "bin" / "vng"
    with _cache_lock("vng"):
        py = _venv(CACHE / "vng-venv", host_python())
        if not vng.exists():
            _log("pip install virtme-ng")
            _pip(py, "virtme-ng")
    return str(vng)


def _tree_fingerprint(src: Path) -> str:
    import hashlib
    h = hashlib.sha256()
    skip = {".git", "build", "dist", "__pycache__", ".pytest_cache", "node_modules", ".venv", "venv"}
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = sorted(d for d in dirnames if d not in skip and not d.endswith(".egg-info"))
        for f in sorted(filenames):
            p = Path(dirpath, f)
            try:
                st = p.stat()
            except OSError:
                continue
            h.update(f"{p.relative_to(src)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def ensure_nodesleuth_venv(src: str = REPO, venv: str | None = None) -> str:
    """A venv (default CACHE/venv, made with the host's python3) with nodesleuth installed from a
    *copy* of `src` (pip builds in-tree and would write build/ and *.egg-info into the checkout).
    Reinstalled when the source tree changes. Returns the venv directory (visible in the guest)."""
    with _cache_lock("venv"):
        return _ensure_nodesleuth_venv(src, venv)


def _ensure_nodesleuth_venv(src: str, venv: str | None) -> str:
    vdir = Path(venv) if venv else CACHE / "venv"
    src_p = Path(src).resolve()
    fp = _tree_fingerprint(src_p)
    stamp = vdir / ".nodesleuth-src"
    py = _venv(vdir, host_python())
    if stamp.exists() and stamp.read_text() == f"{src_p}\n{fp}":
        return str(vdir)
    copy = CACHE / "src-copy"
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(src_p, copy, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", "build", "dist", "__pycache__", "*.egg-info", ".pytest_cache", "node_modules"))
    _log(f"pip install {src_p} (from a copy) into {vdir}")
    _pip(py, "--upgrade", "--force-reinstall", "--no-deps", str(copy)) if stamp.exists() else _pip(py, str(copy))
    _pip(py, str(copy))  # make sure new dependencies are present (no-op otherwise)
    stamp.write_text(f"{src_p}\n{fp}")
    return str(vdir)


def stage_source(repo: str, full: bool = False) -> str:
    """Copy `repo`/src and `repo`/tests/vm under CACHE (the guest sees the host's / read-only, but a
    clone under /tmp is hidden by the guest's own tmpfs) and return the staged directory: run the
    host's python in the guest with PYTHONPATH=<staged>/src. The host's site-packages has the deps.
    `full`: also the whole tests/ (as <staged>/tests), fixtures/ and pyproject.toml, to run the
    host's own test files in the guest with pytest (cd <staged>)."""
    src = Path(repo).resolve()
    fp = (_tree_fingerprint(src / "src")[:8] + _tree_fingerprint(src / "tests" / "vm")[:8])
    if full:
        fp += "f" + _tree_fingerprint(src / "tests")[:8] + _tree_fingerprint(src / "fixtures")[:8]
    dest = CACHE / f"stage-{fp}"
    with _cache_lock("stage"):
        if not (dest / ".done").exists():
            tmp = Path(tempfile.mkdtemp(dir=CACHE, prefix=".stage-"))
            ign = shutil.ignore_patterns("__pycache__", "*.egg-info")
            shutil.copytree(src / "src", tmp / "src", ignore=ign)
            shutil.copytree(src / "tests" / "vm", tmp / "vm", ignore=ign)
            if full:
                shutil.copytree(src / "tests", tmp / "tests", symlinks=True, ignore=shutil.ignore_patterns(
                    "__pycache__", "*.egg-info", "artifacts", "out"))  # fixture trees keep their (dangling) links
                shutil.copytree(src / "fixtures", tmp / "fixtures", ignore=ign)
                shutil.copy2(src / "pyproject.toml", tmp / "pyproject.toml")
            (tmp / ".done").write_text(str(src))
            if dest.exists():
                shutil.rmtree(dest)
            tmp.rename(dest)
        for old in CACHE.glob("stage-*"):  # keep the cache from growing with every change
            if old != dest and time.time() - old.stat().st_mtime > 86400:
                shutil.rmtree(old, ignore_errors=True)
    return str(dest)


# --------------------------------------------------------------------------- running

class VMResult(tuple):
    """(rc, stdout, stderr) that also carries .wall (s), .cmdline (qemu/vng argv), .console, .kernel
    (`uname -r` in the guest, "" if it never got that far), .kernel_name (the KERNELS key asked for)
    and .hierarchy ("v2" or "v1")."""

    def __new__(cls, rc, out, err, wall=0.0, cmdline=(), console="", kernel="", kernel_name="", hierarchy=""):
        self = super().__new__(cls, (rc, out, err))
        self.wall, self.cmdline, self.console = wall, list(cmdline), console
        self.kernel, self.kernel_name, self.hierarchy = kernel, kernel_name, hierarchy
        return self

    rc = property(lambda s: s[0])
    stdout = property(lambda s: s[1])
    stderr = property(lambda s: s[2])


def _guest_env(env: dict | None, python: str) -> str:
    base = {
        "PATH": f"{Path(python).parent}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/root", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
        "VMRUN_PYTHON": python, "VMRUN_VENV": str(CACHE / "venv"),
    }
    base.update(env or {})
    return "".join(f"export {k}={shlex.quote(str(v))}\n" for k, v in base.items())


def _smp(cpus: int, maxcpus: int | None) -> str:
    if os.environ.get("NODESLEUTH_VM_SMP"):  # full override, e.g. "2,maxcpus=96,sockets=96"
        return os.environ["NODESLEUTH_VM_SMP"]
    return f"{cpus},maxcpus={maxcpus}" if maxcpus and maxcpus > cpus else str(cpus)


def _spawn(argv: list[str], **kw) -> subprocess.Popen:
    """The VM through nodesleuth's children.spawn: killed by the kernel when the test (or make.py)
    that started it dies, SIGKILL included, so no guest outlives its run."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    from nodesleuth.node import children

    return children.spawn(argv, **kw)


def _kill_group(p: subprocess.Popen) -> None:
    import signal
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait()


def run_in_vm(cmd: str, cpus: int = 16, mem: str = "2G", timeout: float = 600, *,
              backend: str | None = None, maxcpus: int | None = None, append: list[str] | tuple = (),
              env: dict | None = None, disk_mb: int = 0, mthread: bool = False,
              kernel: str | None = None, hierarchy: str = "v2", extra_qemu: list[str] | tuple = ()) -> VMResult:
    """Boot a kernel (default 6.12, pure cgroup v2: cgroup_no_v1=all) with `cpus` vCPUs and run `cmd` with
    /bin/sh inside it, as root, over the host's root filesystem (read-only, writable overlays/tmpfs
    on top). Returns (exit code, stdout, stderr); exit code is 124 on timeout. The result's .kernel is
    the guest's `uname -r`.

    kernel: "5.10", "6.1", "6.12" or "7.2" (KERNELS; default $NODESLEUTH_VM_KERNEL or "6.12").
    hierarchy: "v2" (cgroup_no_v1=all, cgroup2 at /sys/fs/cgroup) or "v1" (9p backend only: tmpfs at
             /sys/fs/cgroup, each v1 controller at /sys/fs/cgroup/<name> (cpu,cpuacct and net_cls,net_prio
             co-mounted, with symlinks), name=systemd at /sys/fs/cgroup/systemd, cgroup2 at
             /sys/fs/cgroup/unified: systemd's hybrid layout).
    extra_qemu: more qemu arguments (9p backend), e.g. a NIC.

    backend: "vng" (virtme-ng) or "9p" (own busybox initramfs), default $NODESLEUTH_VM_BACKEND or "9p".
    maxcpus: -smp cpus,maxcpus=N. NOTE: with QEMU 7.2 + Debian 6.12 this does NOT give N possible CPUs
             ("CPU topo: Allowing 2 present CPUs plus 0 hotplug CPUs"): possible == online. Use cpus=N.
    disk_mb: (9p backend) attach an ext4 scratch disk, mounted in the guest at $VMRUN_DISK (/run/disk).
    mthread: use multi-threaded TCG (default single-threaded, faster on 2 host cores).
    """
    backend = backend or os.environ.get("NODESLEUTH_VM_BACKEND", "9p")
    if hierarchy not in HIERARCHIES:
        raise ValueError(f"hierarchy must be one of {HIERARCHIES}, not {hierarchy!r}")
    if hierarchy == "v1" and backend != "9p":
        raise ValueError("hierarchy='v1' needs the 9p backend")
    k = ensure_kernel(need_busybox=(backend == "9p"), kernel=kernel)
    python = host_python()
    # VMRUN_MODBASE: `modprobe -d $VMRUN_MODBASE NAME` loads NAME from this kernel's package tree
    modbase = str(Path(k.modules).parent.parent.parent)
    env = dict(env or {}, VMRUN_KROOT=k.root, VMRUN_MODBASE=modbase, VMRUN_HIERARCHY=hierarchy,
               VMRUN_KERNEL_NAME=k.name)
    append = (["cgroup_no_v1=all"] if hierarchy == "v2" else ["vmrun.cgroup=v1"]) + list(append)
    if backend == "vng":
        r = _run_vng(k, cmd, cpus, mem, timeout, maxcpus, append, env, python, mthread)
    elif backend == "9p":
        r = _run_9p(k, cmd, cpus, mem, timeout, maxcpus, append, env, python, disk_mb, mthread, extra_qemu)
    else:
        raise ValueError(f"unknown backend {backend!r}")
    r.kernel_name, r.hierarchy = k.name, hierarchy
    BOOTED.append({"test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0], "kernel": r.kernel or "(no boot)",
                   "hierarchy": hierarchy, "cpus": cpus, "rc": r.rc, "wall_s": round(r.wall, 1)})
    return r


BOOTED: list[dict] = []  # every boot of this process: tests/conftest.py prints them at the end of a run


def _run_vng(k: Kernel, cmd, cpus, mem, timeout, maxcpus, append, env, python, mthread) -> VMResult:
    vng = ensure_vng()
    rundir = Path(tempfile.mkdtemp(prefix="vmrun-", dir="/tmp"))
    script = rundir / "cmd.sh"
    # the guest sees the host's /tmp through an overlay, so the script is readable there
    script.write_text("#!/bin/sh\n" + _guest_env(env, python) + f"uname -r > {rundir}/uname 2>/dev/null\ncd /\n"
                      + cmd + "\n")
    argv = [vng, "-r", k.vmlinux, "--disable-kvm", "--cpus", _smp(cpus, maxcpus), "--memory", mem,
            "--rodir", str(CACHE), "--cwd", "/"]
    for a in append:
        argv += ["--append", a]
    if not mthread:
        argv += ["--qemu-opts=-accel tcg,thread=single"]
    argv += ["--exec", f"/bin/sh {script}"]
    envv = dict(os.environ, PATH=f"{Path(vng).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    t0 = time.monotonic()
    p = _spawn(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
               cwd=str(rundir), env=envv, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        _kill_group(p)
        out, err = p.communicate()
        rc = 124
        err += f"\n[vmrun] timeout after {timeout}s\n".encode()
    wall = time.monotonic() - t0
    # vng's /tmp is an overlay of the host's: the guest's writes may not reach the host directory
    uname = (rundir / "uname").read_text().strip() if (rundir / "uname").exists() else ""
    shutil.rmtree(rundir, ignore_errors=True)
    return VMResult(rc, out.decode(errors="replace"), err.decode(errors="replace"), wall, argv, "", uname)


# ---- own initramfs + 9p back end

def _moddeps(k: Kernel, names: list[str]) -> list[Path]:
    """Module files for `names` and their dependencies, in load order (from modules.dep)."""
    moddir = Path(k.modules)
    deps: dict[str, list[str]] = {}
    byname: dict[str, str] = {}
    for line in (moddir / "modules.dep").read_text().splitlines():
        mod, _, rest = line.partition(":")
        deps[mod] = rest.split()
        base = Path(mod).name.split(".ko")[0].replace("-", "_")
        byname[base] = mod
    order: list[str] = []

    def visit(mod: str):
        if mod in order:
            return
        for d in deps.get(mod, []):
            visit(d)
        order.append(mod)

    builtin = (moddir / "modules.builtin").read_text() if (moddir / "modules.builtin").exists() else ""
    for n in names:
        n2 = n.replace("-", "_")
        if n2 in byname:
            visit(byname[n2])
        elif f"/{n}.ko" not in builtin and n not in OPTIONAL_MODULES:
            raise RuntimeError(f"module {n} not found in {moddir}")
    return [moddir / m for m in order]


def _cpio(entries: list[tuple[str, int, bytes]]) -> bytes:
    """newc cpio: entries of (name, mode, data); mode with S_IF* bits."""
    buf = io.BytesIO()
    ino = 1

    def pad(n):
        buf.write(b"\0" * ((4 - n % 4) % 4))

    for name, mode, data in entries + [("TRAILER!!!", 0, b"")]:
        nb = name.encode() + b"\0"
        hdr = "070701" + "".join(f"{x:08x}" for x in (
            ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(nb), 0))
        buf.write(hdr.encode())
        buf.write(nb)
        pad(110 + len(nb))
        buf.write(data)
        pad(len(data))
        ino += 1
    return buf.getvalue()


INIT_SH = r"""#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $(cat /modules.order); do insmod /lib/modules/$m || echo "vmrun-init: insmod $m failed"; done
mkdir -p /newroot
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=loose,ro hostroot /newroot || {
  echo "vmrun-init: cannot mount host root"; poweroff -f; }
mount -t tmpfs -o mode=755 run /newroot/run
mkdir -p /newroot/run/vmrun /newroot/run/ovl
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 vmrun /newroot/run/vmrun
for d in etc var root home opt srv; do
  [ -d /newroot/$d ] || continue
  mkdir -p /newroot/run/ovl/$d/u /newroot/run/ovl/$d/w
  mount -t overlay -o lowerdir=/newroot/$d,upperdir=/newroot/run/ovl/$d/u,workdir=/newroot/run/ovl/$d/w ovl_$d /newroot/$d \
    || echo "vmrun-init: overlay on /$d failed"
done
mount -t tmpfs -o mode=1777 tmp /newroot/tmp
mount -t tmpfs -o mode=1777 vartmp /newroot/var/tmp
if [ -b /dev/vda ]; then mkdir -p /newroot/run/disk; mount -t ext4 /dev/vda /newroot/run/disk; fi
mount --move /proc /newroot/proc; mount --move /sys /newroot/sys; mount --move /dev /newroot/dev
if grep -q 'vmrun.cgroup=v1' /newroot/proc/cmdline; then
  # systemd's hybrid layout: one v1 hierarchy per controller (as systemd co-mounts them), cgroup2 at unified
  C=/newroot/sys/fs/cgroup
  mount -t tmpfs -o mode=755,nosuid,nodev,noexec cgroup $C
  avail=$(awk 'NR>1 && $4==1 {print $1}' /newroot/proc/cgroups)
  has() { echo "$avail" | grep -qx "$1"; }
  for g in cpuset cpu,cpuacct blkio memory devices freezer net_cls,net_prio perf_event hugetlb pids rdma misc; do
    opts=""; for c in $(echo $g | tr , ' '); do has $c && opts="$opts,$c"; done
    opts=${opts#,}; [ -n "$opts" ] || continue
    mkdir -p $C/$opts && mount -t cgroup -o nosuid,nodev,noexec,$opts cgroup $C/$opts || echo "vmrun-init: cgroup v1 $opts failed"
    case $opts in *,*) for c in $(echo $opts | tr , ' '); do ln -s $opts $C/$c; done;; esac
  done
  mkdir -p $C/unified $C/systemd
  mount -t cgroup2 -o nosuid,nodev,noexec,nsdelegate cgroup2 $C/unified
  mount -t cgroup -o nosuid,nodev,noexec,none,name=systemd cgroup $C/systemd
else
  mount -t cgroup2 -o nsdelegate cgroup2 /newroot/sys/fs/cgroup
fi
mkdir -p /newroot/dev/pts /newroot/dev/shm
mount -t devpts -o newinstance,ptmxmode=666 devpts /newroot/dev/pts
mount -t tmpfs -o mode=1777 shm /newroot/dev/shm
[ -d /newroot/sys/kernel/debug ] && mount -t debugfs debugfs /newroot/sys/kernel/debug
[ -d /newroot/sys/kernel/tracing ] && mount -t tracefs tracefs /newroot/sys/kernel/tracing
exec switch_root /newroot /bin/sh /run/vmrun/guest.sh
"""

GUEST_SH = r"""#!/bin/sh
cd /
[ -b /dev/vda ] && export VMRUN_DISK=/run/disk
hostname vmrun 2>/dev/null
echo booted > /run/vmrun/booted
uname -r > /run/vmrun/uname
( . /run/vmrun/env.sh; cd /; exec /bin/sh /run/vmrun/cmd.sh ) </dev/null >/run/vmrun/stdout 2>/run/vmrun/stderr
echo $? > /run/vmrun/rc.tmp && mv /run/vmrun/rc.tmp /run/vmrun/rc
sync
echo o > /proc/sysrq-trigger
sleep 5
"""


def ensure_initramfs(k: Kernel) -> str:
    """CACHE/initramfs-<release>.cpio.gz: static busybox, 9p/overlay/ext4 modules (decompressed), /init."""
    with _cache_lock("initramfs"):
        return _ensure_initramfs(k)


def _ensure_initramfs(k: Kernel) -> str:
    import lzma
    import hashlib
    mods = _moddeps(k, INITRD_MODULES)
    key = hashlib.sha256(f"{k.release}\n{INIT_SH}\n{INITRD_MODULES}\n{k.busybox}".encode()).hexdigest()
    out = CACHE / f"initramfs-{k.release}.cpio.gz"
    stamp = CACHE / f"initramfs-{k.release}.key"
    if out.exists() and stamp.exists() and stamp.read_text() == key:
        return str(out)
    if not k.busybox:
        raise RuntimeError("busybox (busybox-static) is needed for the 9p back end")
    D, F = 0o040755, 0o100755
    ents = [(d, D, b"") for d in ("bin", "dev", "proc", "sys", "lib", "lib/modules", "newroot")]
    ents.append(("bin/busybox", F, Path(k.busybox).read_bytes()))
    ents.append(("init", F, INIT_SH.encode()))
    names = []
    for m in mods:
        data = m.read_bytes()
        if m.suffix == ".xz":
            data = lzma.decompress(data)
        elif m.suffix == ".zst":
            data = subprocess.run(["zstd", "-dcq"], input=data, capture_output=True, check=True).stdout
        elif m.suffix == ".gz":
            data = gzip.decompress(data)
        name = m.name.split(".ko")[0] + ".ko"
        ents.append((f"lib/modules/{name}", 0o100644, data))
        names.append(name)
    ents.append(("modules.order", 0o100644, ("\n".join(names) + "\n").encode()))
    tmp = out.with_suffix(".tmp")
    tmp.write_bytes(gzip.compress(_cpio(ents), compresslevel=1))
    tmp.rename(out)
    stamp.write_text(key)
    return str(out)


def qemu_argv(k: Kernel, initrd: str, rundir: Path, cpus: int, mem: str, maxcpus: int | None,
              append: list[str], disk: Path | None = None, mthread: bool = False,
              extra: list[str] | tuple = ()) -> list[str]:
    argv = [k.qemu, "-accel", "tcg" if mthread else "tcg,thread=single", "-cpu", "max",
            "-smp", _smp(cpus, maxcpus), "-m", mem,
            "-nodefaults", "-no-user-config", "-display", "none", "-monitor", "none", "-no-reboot",
            *([] if any(str(x).startswith(("-netdev", "-nic")) for x in extra) else ["-net", "none"]),
            "-serial", f"file:{rundir / 'console.log'}",
            "-kernel", k.vmlinux, "-initrd", initrd,
            "-append", " ".join(["console=ttyS0", "quiet", "loglevel=4", "panic=-1", *append]),
            "-fsdev", "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap",
            "-device", "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot",
            "-fsdev", f"local,id=vmrun,path={rundir},security_model=none,multidevs=remap",
            "-device", "virtio-9p-pci,fsdev=vmrun,mount_tag=vmrun"]
    if disk:
        argv += ["-drive", f"file={disk},if=virtio,format=raw,cache=unsafe"]
    return argv + list(extra)


def _run_9p(k: Kernel, cmd, cpus, mem, timeout, maxcpus, append, env, python, disk_mb, mthread,
            extra_qemu=()) -> VMResult:
    initrd = ensure_initramfs(k)
    rundir = Path(tempfile.mkdtemp(prefix="vmrun-", dir=os.environ.get("NODESLEUTH_VM_RUNDIR", "/tmp")))
    (rundir / "guest.sh").write_text(GUEST_SH)
    (rundir / "env.sh").write_text(_guest_env(env, python))
    (rundir / "cmd.sh").write_text(cmd + "\n")
    disk = None
    if disk_mb:
        disk = rundir / "disk.img"
        with open(disk, "wb") as f:
            f.truncate(disk_mb << 20)
        _run(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=1,lazy_journal_init=1", str(disk)])
    argv = qemu_argv(k, initrd, rundir, cpus, mem, maxcpus, append, disk, mthread, extra_qemu)
    t0 = time.monotonic()
    p = _spawn(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
               start_new_session=True)
    try:
        qout, _ = p.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        _kill_group(p)
        qout, _ = p.communicate()
        timed_out = True
    wall = time.monotonic() - t0

    def rd(name):
        f = rundir / name
        return f.read_text(errors="replace") if f.exists() else ""

    out, err, console, uname = rd("stdout"), rd("stderr"), rd("console.log"), rd("uname").strip()
    rcs = rd("rc").strip()
    if timed_out:
        rc = 124
        err += f"\n[vmrun] timeout after {timeout}s (booted={bool(rd('booted'))})\n"
    elif rcs.isdigit():
        rc = int(rcs)
    else:
        rc = 255
        err += ("\n[vmrun] guest did not report an exit code; qemu said:\n" + qout.decode(errors="replace")
                + "\n[vmrun] console tail:\n" + console[-3000:])
    if os.environ.get("VMRUN_KEEP") != "1":
        shutil.rmtree(rundir, ignore_errors=True)
    return VMResult(rc, out, err, wall, argv, console, uname)


# --------------------------------------------------------------------------- CLI

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Run a shell command inside a TCG VM with a Debian kernel.")
    ap.add_argument("cmd", nargs="?", help="shell command to run in the guest")
    ap.add_argument("--cpus", type=int, default=16)
    ap.add_argument("--maxcpus", type=int)
    ap.add_argument("--mem", default="2G")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--backend", choices=["vng", "9p"])
    ap.add_argument("--disk-mb", type=int, default=0)
    ap.add_argument("--mthread", action="store_true", help="multi-threaded TCG")
    ap.add_argument("--kernel", choices=list(KERNELS), help=f"kernel generation (default {DEFAULT_KERNEL})")
    ap.add_argument("--hierarchy", choices=HIERARCHIES, default="v2")
    ap.add_argument("--ensure", action="store_true", help="only fetch the kernel / install tools / venvs")
    ap.add_argument("--venv", action="store_true", help="(re)install nodesleuth from this checkout into CACHE/venv")
    ap.add_argument("--print-argv", action="store_true")
    a = ap.parse_args(argv)
    if a.ensure or a.venv:
        t = time.monotonic()
        k = ensure_kernel(kernel=a.kernel)
        print(json.dumps(asdict(k), indent=1))
        print(f"ensure_kernel: {time.monotonic() - t:.1f}s", file=sys.stderr)
        if a.venv:
            print(ensure_nodesleuth_venv())
        if not a.cmd:
            return 0
    r = run_in_vm(a.cmd or "true", cpus=a.cpus, mem=a.mem, timeout=a.timeout, backend=a.backend,
                  maxcpus=a.maxcpus, disk_mb=a.disk_mb, mthread=a.mthread, kernel=a.kernel,
                  hierarchy=a.hierarchy)
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    if a.print_argv:
        print("argv: " + shlex.join(r.cmdline), file=sys.stderr)
    print(f"[vmrun] rc={r.rc} wall={r.wall:.1f}s kernel={r.kernel or '?'} hierarchy={r.hierarchy}", file=sys.stderr)
    return r.rc


if __name__ == "__main__":
    sys.exit(main())
