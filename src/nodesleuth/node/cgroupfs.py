"""The cgroup hierarchies of a root: where they are mounted, what the kernel counts, and making,
limiting and removing cgroups. The one place that knows cgroup v1 from v2 file names, used by the
census, the memcg cost probe, the lab, remedy and the tests alike.

Cost model: the counters (/proc/cgroups, a v2 cgroup.stat) are O(controllers); a directory walk is
O(live cgroups) in the VFS and never touches a dying memcg (it has no directory); nothing here reads
a file per memcg.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import errno
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator

from ..model.errors import InputError
from ..model.procfs import Mount, parse_cgroup_stat, parse_mountinfo, parse_proc_cgroups
from ..model.records import DyingSubtree, V2Stat
from .pread import Preader, read_text
from .root import Root


def mounts(root: Root) -> list[Mount]:
    """The cgroup mounts of the root's mount table (host-absolute paths). Through a mount (a
    container's /host) or in a recorded tree, PID 1's table is the host's; ours is the container's."""
    mi = "/proc/self/mountinfo" if root.here or not root.exists("/proc/1/mountinfo") else "/proc/1/mountinfo"
    return parse_mountinfo(root.read(mi), root.join(mi))


def v1_mount(ms: list[Mount], controller: str) -> str | None:
    return next((m.path for m in ms if m.fstype == "cgroup" and controller in m.controllers), None)


def v2_mount(ms: list[Mount]) -> str | None:
    return next((m.path for m in ms if m.fstype == "cgroup2"), None)


def v2_stat(root: Root, mount: str, reader: Preader | None = None) -> V2Stat:
    """`reader` (a loop's) keeps the root cgroup.stat open between ticks."""
    p = os.path.join(mount, "cgroup.stat")
    st = parse_cgroup_stat(root.read(p) if reader is None else read_text(reader, root, p), root.join(p))
    subsys = {}
    for k, v in st.items():
        if k.startswith("nr_subsys_"):
            name = k[len("nr_subsys_"):]
            subsys[name] = (v, st.get(f"nr_dying_subsys_{name}", 0))
    return V2Stat(mount, st.get("nr_descendants", 0), st["nr_dying_descendants"], subsys)


def count_dirs(path: str) -> int:
    """Directories under path, including path itself (what `find -type d | wc -l` prints)."""
    n = 1
    stack = [path]
    while stack:
        d = stack.pop()
        try:
            it = os.scandir(d)
        except OSError:
            continue
        with it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    n += 1
                    stack.append(e.path)
    return n


def dying_subtrees(root: Root, mount: str, max_depth: int = 6, limit: int = 10) -> list[DyingSubtree]:
    """Descend only into v2 children that report dying descendants; return the deepest holders.

    A cgroup whose dying count is not explained by its live children is where the zombies were
    removed from (e.g. /system.slice for crash-looping services).
    """
    out: list[DyingSubtree] = []
    base = root.join(mount)

    def walk(rel: str, dying: int, depth: int) -> None:
        in_children = 0
        if depth < max_depth:
            d = os.path.join(base, rel.lstrip("/"))
            try:
                names = [e.name for e in os.scandir(d) if e.is_dir(follow_symlinks=False)]
            except OSError:
                names = []
            for name in names:
                crel = f"{rel.rstrip('/')}/{name}"
                try:
                    st = parse_cgroup_stat(root.read(os.path.join(mount, crel.lstrip("/"), "cgroup.stat")), crel)
                except InputError:
                    continue
                cd = st["nr_dying_descendants"]
                if cd > 0:
                    in_children += cd
                    walk(crel, cd, depth + 1)
        own = dying - in_children
        if own > 0:
            out.append(DyingSubtree(rel or "/", own))

    top = v2_stat(root, mount).nr_dying_descendants
    if top > 0:
        walk("/", top, 0)
    out.sort(key=lambda s: -s.dying)
    return out[:limit]


def pids_in_cgroup(root: Root, path: str) -> set[int]:
    """Processes in a cgroup and its descendants, on whichever mounted hierarchy has that path
    (v1 memory, the v1 name=systemd tree, or v2)."""
    order = sorted(mounts(root), key=lambda m: (m.fstype != "cgroup2", "memory" not in m.controllers))
    for m in order:
        base = root.join(os.path.join(m.path, path.lstrip("/")))
        if not os.path.isdir(base):
            continue
        pids: set[int] = set()
        for dp, _, files in os.walk(base):
            if "cgroup.procs" in files:
                try:
                    with open(os.path.join(dp, "cgroup.procs")) as f:
                        pids |= {int(x) for x in f.read().split()}
                except OSError:
                    pass
        return pids
    raise InputError(path, "no such cgroup on any mounted hierarchy")


def empty_cgroup(path: str) -> None:
    """Drain the per-CPU charge stocks that cache a charge of the memory cgroup `path` or any cgroup
    below it, dying ones included, and reclaim the pages charged there: a CPU's stock holds a reference
    to the memcg it last charged until another memcg charges on that CPU (the kernel drains stocks when
    a memcg goes offline, but asynchronously and skipped while another drain runs: mm/memcontrol.c
    drain_all_stock, "mm: drain memcg stocks on css offlining"), and a page the probe's child was first
    to fault in (interpreter or library text it had not run yet, file system metadata) stays cached
    after the child is gone; either keeps that cgroup, and its parents with it, dying (CI's v2 VM: 3 of
    a probe's stayed so). v1 `memory.force_empty`, v2 `memory.high` 0: both drain the subtree's stocks
    and reclaim it, neither invokes the OOM killer (memory.max would, with no task to kill), and only
    what is charged to the probe's own tree moves. Best effort: callers count what stays."""
    for name in ("memory.force_empty", "memory.high"):
        if os.path.exists(os.path.join(path, name)):
            try:
                _write(os.path.join(path, name), "0")
            except OSError:
                pass
            return


def retire_tree(path: str, patience: float = 10.0) -> int | None:
    """Remove a probe's tree so that nothing of it stays dying: the cgroups below `path` first, then
    drain and reclaim `path` (empty_cgroup) every 0.2 s for up to `patience` s (a page some process runs
    at that instant is skipped by reclaim: it was referenced) until nothing below it is dying (v2: its
    cgroup.stat nr_dying_descendants) or, on v1 (no per-cgroup dying count), no page is charged below
    it (what keeps a removed memcg dying there: memory.stat's hierarchical cache, rss and swap; its
    kernel objects go to the parent at offline), then `path` itself. Returns how many memcgs below
    `path` were still dying when it went: exact on v2; on v1 0 when no page was held, else None."""
    if not os.path.isdir(path):
        return 0
    for d in sorted(os.listdir(path)):
        if os.path.isdir(os.path.join(path, d)):
            remove_cgroup_tree(os.path.join(path, d))
    deadline = time.monotonic() + patience
    while True:
        empty_cgroup(path)  # at least once: a stock's charge is in no count read here
        if (left := _dying_below(path)) == 0 or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    remove_cgroup_tree(path)
    return left


def _dying_below(path: str) -> int | None:
    if os.path.exists(os.path.join(path, "memory.current")):  # v2
        return dying_under(path)
    return 0 if held_pages(path) == 0 else None


def dying_under(path: str) -> int | None:
    """v2: the dying cgroups below the cgroup directory `path` (its cgroup.stat); None when unreadable."""
    p = os.path.join(path, "cgroup.stat")
    try:
        with open(p) as f:
            return parse_cgroup_stat(f.read(), p)["nr_dying_descendants"]
    except (OSError, InputError, KeyError):
        return None


def held_pages(path: str) -> int | None:
    """v1: bytes of page cache, anonymous memory and swap charged to the memory cgroup `path` and its
    descendants, dying ones included (memory.stat's hierarchical total_cache + total_rss + total_swap):
    what keeps a removed memcg dying on 5.9+ kernels. None when unreadable."""
    try:
        with open(os.path.join(path, "memory.stat")) as f:
            st = dict(line.split() for line in f if line.strip())
        return sum(int(st.get(k, 0)) for k in ("total_cache", "total_rss", "total_swap"))
    except (OSError, ValueError):
        return None


def remove_cgroup_tree(path: str, patience: float = 2.0) -> None:
    """rmdir `path` and every cgroup below it, deepest first; what cannot be removed (a process still
    in it) stays, quietly: callers check the count they care about. A cgroup whose last process was
    reaped a moment ago can still read as populated (newer kernels unlink a dying task from its cgroup
    after its final context switch, which can come after the parent's waitpid): EBUSY is retried for
    up to `patience` seconds."""
    deadline = time.monotonic() + patience
    while True:
        busy = False
        for dp, dn, _ in sorted(os.walk(path), key=lambda t: -t[0].count("/")):
            for d in dn:
                busy |= not _rmdir(os.path.join(dp, d))
        busy |= not _rmdir(path)
        if not busy or time.monotonic() >= deadline:
            return
        time.sleep(0.05)


STALE_S = 600  # older than any probe (the zombie probe's writeback window is 40 s by default)
_SCRATCH: set[str] = set()  # this process's scratch trees, removed at exit if a block did not end


@contextlib.contextmanager
def scratch_tree(mc: "Memcg", kind: str) -> Iterator[str]:
    """A cgroup tree of this process's own for a probe, `nodesleuth-KIND-PID` under the controller's
    root (yields that relative path): removed when the block ends; at interpreter exit if the block
    could not end (a daemon thread's probe when SIGTERM unwinds the main thread, cli/common.py); and,
    when this process was killed outright (SIGKILL runs nothing), by the next process that opens a tree
    of the same kind (remove_stale)."""
    remove_stale(mc, kind)
    rel = f"nodesleuth-{kind}-{os.getpid()}"
    path = mc.path(rel)
    _SCRATCH.add(path)
    try:
        yield rel
    finally:
        retire_tree(path)
        _SCRATCH.discard(path)


_MAKERS: set[int] = set()  # make_zombies' children running now
_MADE = 0  # make_zombies calls by this process (names its files)
_PINS: set[str] = set()  # directories of files that pin a probe's zombies, removed at exit if still there
_CLOSING = False  # set at exit: a probe thread still running makes no new pinning directory


def pin_dir(base: str, kind: str) -> str:
    """A new directory under `base` for the files that pin a probe's zombies, `nodesleuth-KIND-PID-*`:
    removed by drop_pin_dir, at exit, or (the process killed outright) by remove_stale_pins. While its
    files exist, their page cache keeps the probe's memcgs dying."""
    if _CLOSING:
        raise RuntimeError("exiting: no new pinning files")
    d = tempfile.mkdtemp(prefix=f"nodesleuth-{kind}-{os.getpid()}-", dir=base)
    _PINS.add(d)
    return d


def drop_pin_dir(d: str) -> None:
    shutil.rmtree(d, ignore_errors=True)  # the pages go with the files, the cgroups with them
    _PINS.discard(d)


@atexit.register
def _remove_scratch() -> None:
    """At exit with a probe still running on another thread (the exporter's, when SIGTERM unwinds the
    main thread): stop its zombie maker (it is inside the tree), delete its pinning files, then remove
    the trees."""
    for pid in list(_MAKERS):
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass  # its own thread reaped it first
    global _CLOSING
    _CLOSING = True
    for _pass in range(2):  # twice: a thread just past the _CLOSING check may add one during the first
        for d in list(_PINS):
            # the probe's thread may still be writing pinning files into it while it goes: again until gone
            for _ in range(100):
                drop_pin_dir(d)
                if not os.path.exists(d):
                    break
                time.sleep(0.02)
        time.sleep(0.05)
    for path in list(_SCRATCH):
        retire_tree(path, patience=2.0)


def _stale(root: Root, base: str, kind: str, pidless: bool) -> list[str]:
    """Paths under `base` named `nodesleuth-KIND-PID[-...]` that earlier processes left: older than
    STALE_S (longer than any probe runs) and whose pid is gone in the root's /proc, so one used by a
    process in another PID namespace is left be. `pidless`: names without a pid (`nodesleuth-KIND-
    XXXXXXXX`, from before the pid was in them) count too, by age alone."""
    prefix = f"nodesleuth-{kind}-"
    try:
        names = os.listdir(base)
    except OSError:
        return []
    out = []
    for name in names:
        if not name.startswith(prefix):
            continue
        rest = name[len(prefix):]
        pid = rest.split("-")[0]
        # a tree is `nodesleuth-KIND-PID`; a pinning directory `nodesleuth-KIND-PID-XXXXXXXX` (mkdtemp)
        has_pid = pid.isdigit() and ("-" in rest if pidless else rest == pid)
        if (not has_pid and not pidless) or (has_pid and root.exists(f"/proc/{pid}")):
            continue
        path = os.path.join(base, name)
        try:
            if time.time() - os.stat(path).st_mtime >= STALE_S:
                out.append(path)
        except OSError:
            continue
    return out


def remove_stale_pins(root: Root, base: str, kind: str) -> list[str]:
    """Delete the pinning directories (pin_dir) earlier processes left under `base` (_stale)."""
    gone = _stale(root, base, kind, pidless=True)
    for path in gone:
        shutil.rmtree(path, ignore_errors=True)
    return gone


def remove_stale(mc: "Memcg", kind: str) -> list[str]:
    """Remove the scratch trees of `kind` that earlier processes left (_stale). Only empty cgroups go
    (remove_cgroup_tree), never one with a process in it."""
    gone = _stale(mc.root, mc.mount, kind, pidless=False)
    for path in gone:
        remove_cgroup_tree(path, patience=0)
    return gone


def _rmdir(path: str) -> bool:
    """False only when the kernel said EBUSY (worth another try)."""
    try:
        os.rmdir(path)
    except OSError as e:
        return e.errno != errno.EBUSY
    return True


class Memcg:
    """The memory controller of a root, under either cgroup version: v1's own hierarchy
    (memory.limit_in_bytes, memory.usage_in_bytes) or the unified v2 one (memory.max,
    memory.current, `+memory` in every ancestor's cgroup.subtree_control), wherever the mount
    table puts it. Paths given to the methods are relative to the controller's root cgroup."""

    def __init__(self, root: Root = Root("/")):
        self.root = root
        try:
            ms = mounts(root)
        except InputError:
            ms = []
        v1 = v1_mount(ms, "memory")
        v2 = v2_mount(ms)
        if v1 is not None and os.path.isfile(root.join(os.path.join(v1, "memory.limit_in_bytes"))):
            self.version, self.host_mount = 1, v1
        elif v2 is not None and "memory" in _read(root.join(os.path.join(v2, "cgroup.controllers"))).split():
            self.version, self.host_mount = 2, v2
        else:
            raise InputError(root.join("/sys/fs/cgroup"),
                             "no cgroup v1 memory hierarchy and no v2 memory controller in the mount table")
        self.mount = root.join(self.host_mount)

    @property
    def name(self) -> str:
        return f"v{self.version}"

    def path(self, rel: str) -> str:
        return os.path.join(self.mount, rel.strip("/"))

    def make(self, rel: str, children: bool = False) -> str:
        """Create `rel` (and its parents); on v2 enable the memory controller down to it (and, with
        `children`, for its own children: then it may hold no process itself)."""
        parts = [x for x in rel.strip("/").split("/") if x]
        here = self.mount
        for part in parts:
            if self.version == 2 and "memory" not in _read(os.path.join(here, "cgroup.subtree_control")).split():
                _write(os.path.join(here, "cgroup.subtree_control"), "+memory")
            here = os.path.join(here, part)
            os.makedirs(here, exist_ok=True)
        if children and self.version == 2:
            _write(os.path.join(here, "cgroup.subtree_control"), "+memory")
        return here

    def set_limit(self, rel: str, limit: int | None) -> None:
        name = "memory.limit_in_bytes" if self.version == 1 else "memory.max"
        _write(os.path.join(self.path(rel), name), str(limit) if limit is not None else
               ("-1" if self.version == 1 else "max"))

    def limit(self, rel: str) -> int | None:
        """The hard limit in bytes, None when unlimited ("max" on v2, a huge number on v1)."""
        name = "memory.limit_in_bytes" if self.version == 1 else "memory.max"
        text = _read(os.path.join(self.path(rel), name)).strip()
        return int(text) if text.isdigit() and int(text) < 1 << 60 else None

    def usage(self, rel: str) -> int:
        name = "memory.usage_in_bytes" if self.version == 1 else "memory.current"
        return int(_read(os.path.join(self.path(rel), name)).split()[0])

    def count(self) -> int | None:
        """Memory cgroups the kernel holds, live and dying: /proc/cgroups num_cgroups on v1; on v2
        the root's cgroup.stat (nr_subsys_memory + nr_dying_subsys_memory, 6.12+; else every cgroup:
        1 + nr_descendants + nr_dying_descendants). None when the kernel does not say."""
        try:
            if self.version == 1:
                rows = parse_proc_cgroups(self.root.read("/proc/cgroups"), self.root.join("/proc/cgroups"))
                return next((num for name, _, num, _ in rows if name == "memory"), None)
            p = os.path.join(self.host_mount, "cgroup.stat")
            st = parse_cgroup_stat(self.root.read(p), self.root.join(p))
        except InputError:
            return None
        if "nr_subsys_memory" in st:
            return st["nr_subsys_memory"] + st.get("nr_dying_subsys_memory", 0)
        return 1 + st.get("nr_descendants", 0) + st.get("nr_dying_descendants", 0)

    def reclaim(self, rel: str, nbytes: int) -> None:
        """v2 `memory.reclaim` (5.19+): reclaim up to nbytes under `rel` (its dying children's
        page cache first in line); OSError EAGAIN when less could be reclaimed."""
        if self.version != 2:
            raise InputError(self.path(rel), "memory.reclaim exists only on cgroup v2")
        _write(os.path.join(self.path(rel), "memory.reclaim"), str(nbytes))


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def hand_down_memory(path: str) -> None:
    """On cgroup v2: `+memory` in the cgroup.subtree_control of `path` and of every ancestor up to the
    hierarchy's root (a controller can be handed down only where the parent has it)."""
    chain = []
    here = os.path.realpath(path)
    while os.path.exists(os.path.join(here, "cgroup.subtree_control")):
        chain.append(here)
        up = os.path.dirname(here)
        if up == here or not os.path.exists(os.path.join(up, "cgroup.subtree_control")):
            break
        here = up
    for d in reversed(chain):
        if "memory" not in _read(os.path.join(d, "cgroup.subtree_control")).split():
            _write(os.path.join(d, "cgroup.subtree_control"), "+memory")


def own_cgroup(path: str) -> str | None:
    """The directory of this process's cgroup in the hierarchy `path` lies in (its mount point joined
    with a /proc/self/cgroup path, confirmed by finding this pid in its cgroup.procs); None when no
    line leads there (a cgroup namespace whose paths do not match the mount we were given)."""
    mount = os.path.abspath(path)
    while mount != "/" and not os.path.ismount(mount):
        mount = os.path.dirname(mount)
    me = str(os.getpid())
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for ln in lines:
        rel = ln.split(":", 2)[-1]
        cand = os.path.normpath(mount + "/" + rel.lstrip("/"))
        try:
            with open(os.path.join(cand, "cgroup.procs")) as f:
                if me in f.read().split():
                    return cand
        except OSError:
            continue
    return None


def enter(cgroup: str, pid: int) -> None:
    """Move a process into a cgroup (its directory path); v1 and v2 alike."""
    _write(os.path.join(cgroup, "cgroup.procs"), str(pid))


def drop_caches(root: Root = Root("/")) -> None:
    """sync, then drop clean page cache, dentries and inodes (what frees page-cache-pinned zombies)."""
    from .children import run

    run(["sync"], timeout=600)
    _write(root.join("/proc/sys/vm/drop_caches"), "3")


def make_zombies(n: int, parent: str, data_dir: str, file_bytes: int = 8192, prefix: str = "z") -> int:
    """Create n dying memcgs under `parent` (a directory of the memory controller's hierarchy, made if
    missing) from a forked child; returns how many were made. The child joins each new cgroup, writes
    its file there, and leaves for a leaf of its own (`parent/_leave`: on cgroup v2 a cgroup whose
    children have controllers may hold no process), so the caller's membership never changes.

    The files are created (empty) here, before the fork, outside the new cgroups: creating a file on a
    disk file system reads or allocates metadata blocks (ext4's inode table: one 4 KB block per 16
    inodes) into the block device's page cache, charged to whichever memcg touched them first, and they
    stay cached after the file is deleted. Created inside, they kept every 16th memcg dying after its
    file was gone (measured on this host: 3 of 50 plus their 2 parents, docs/probes.md). So the only
    pages a new cgroup is charged with are its file's own data, which go when the file is deleted."""
    os.makedirs(parent, exist_ok=True)
    os.makedirs(data_dir, exist_ok=True)
    if os.path.exists(os.path.join(parent, "cgroup.subtree_control")):
        # cgroup v2: the new cgroups are memcgs only if every ancestor down to the parent hands the
        # memory controller down (the root of a fresh system may hand down none)
        hand_down_memory(parent)
    leave = os.path.join(parent, "_leave")
    os.makedirs(leave, exist_ok=True)
    home = own_cgroup(parent)
    global _MADE
    _MADE += 1
    names = [os.path.join(data_dir, f"{prefix}{i}-{os.getpid()}-{_MADE}") for i in range(n)]
    for name in names:  # metadata charged to the caller, not to the cgroups made below (see above)
        os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
    libc = ctypes.CDLL(None, use_errno=True)  # loaded before the fork: a threaded parent's child does little
    caller = os.getpid()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        made = 0
        me = os.getpid()
        try:
            libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: never outlives the thread that made it
            if os.getppid() != caller:
                os._exit(1)
            payload = b"z" * file_bytes
            for i in range(n):
                cg = os.path.join(parent, f"{prefix}{i}-{me}")
                os.mkdir(cg)
                enter(cg, me)
                fd = os.open(names[i], os.O_WRONLY)  # exists: only its data pages are charged here
                try:
                    os.write(fd, payload)
                finally:
                    os.close(fd)
                enter(leave, me)
                os.rmdir(cg)
                made += 1
        finally:
            if home:  # back where it came from: `_leave` is empty at once, not after this exit's last
                try:  # context switch (6.x unlinks a dying task late), so the caller can remove it
                    enter(home, me)
                except OSError:
                    pass
            os.write(w, str(made).encode())
            os._exit(0)
    os.close(w)
    _MAKERS.add(pid)
    try:
        data = b""
        while True:
            chunk = os.read(r, 64)
            if not chunk:
                break
            data += chunk
        os.close(r)
        os.waitpid(pid, 0)
    finally:
        _MAKERS.discard(pid)
    return int(data or b"0")
