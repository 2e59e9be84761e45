"""Measure once per boot and kernel, remember: the probes' results kept on the node.

The cost probe (collect/memcg_cost.py) and the posture probe (collect/posture.py) make memory cgroups.
What they measure is a property of this kernel on this machine, so it is measured at most once per
boot and kernel (key: /proc/sys/kernel/random/boot_id + the kernel release, read through the root) and
kept in a state file (STATE_FILE under --state-dir, /var/lib/nodesleuth by default; a writable hostPath
in the DaemonSet) that every later `check`, the exporter and the recorder read. A probe runs only on
request (`check --probe`) or once at the exporter's start when this boot has no state; `check --npd`
never probes. Writes are atomic (temp file + rename); a damaged or other boot's file is ignored with a
one-line note.

guard() says when a probe must not make memcgs at all (IDs near the 16-bit limit, many memcgs already,
memory pressure, a read-only cgroup file system); its thresholds live in model/thresholds.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time
from dataclasses import dataclass

from ..model.errors import InputError
from ..model.files import PROBE_STATE_FILE as STATE_FILE
from ..model.procfs import parse_psi_some_avg10
from ..model.records import MemcgCost
from ..model.memcg_ids import ID_MAX as MEMCG_ID_MAX
from ..model.thresholds import PROBE_MAX_ID_SHARE, PROBE_MAX_MEM_PSI, PROBE_MAX_MEMCGS
from ..node.cgroupfs import Memcg, mounts
from ..node.root import Root

STATE_DIR = "/var/lib/nodesleuth"
SCHEMA = "nodesleuth.probes/v1"


def boot_key(root: Root) -> dict:
    """{"boot_id", "kernel"}: what the stored results belong to (None for what cannot be read)."""
    bid = root.read_opt("/proc/sys/kernel/random/boot_id")
    rel = root.read_opt("/proc/sys/kernel/osrelease")
    return {"boot_id": bid.strip() if bid else None, "kernel": rel.strip() if rel else None}


@dataclass
class Stored:
    """The probes' results of this boot, as read from (or just written to) the state file."""

    path: str
    time: float  # when measured (epoch s)
    boot_id: str
    kernel: str
    cost: MemcgCost | None = None
    cost_problem: str | None = None  # why the cost was not measured
    posture: dict | None = None  # ZombiePosture.probe
    posture_problem: str | None = None
    fresh: bool = False  # measured by this process just now

    def age(self, now: float | None = None) -> str:
        """"measured 3 h ago, this boot" (or "just now")."""
        if self.fresh:
            return "measured just now"
        s = max(0.0, (now or time.time()) - self.time)
        amount = (f"{s:.0f} s" if s < 90 else f"{s / 60:.0f} min" if s < 5400 else f"{s / 3600:.0f} h"
                  if s < 172800 else f"{s / 86400:.0f} d")
        return f"measured {amount} ago, this boot"

    def source(self) -> str:
        return f"{self.path} ({self.age()})"

    def to_dict(self) -> dict:
        """The JSON outputs' `probes` section (check, exporter snapshot)."""
        return {"source": "measured" if self.fresh else "state", "path": self.path, "measured_at": self.time,
                "age_s": round(max(0.0, time.time() - self.time), 1), "says": self.source(),
                "boot_id": self.boot_id, "kernel": self.kernel,
                "memcg_cost": None if self.cost is None else self.cost.to_dict(), "cost_problem": self.cost_problem,
                "posture_problem": self.posture_problem}


def state_path(state_dir: str) -> str:
    return os.path.join(state_dir, STATE_FILE)


def load(root: Root, state_dir: str) -> tuple[Stored | None, str | None]:
    """This boot's stored results, or (None, a one-line note why not: none yet, damaged, another boot)."""
    p = state_path(state_dir)
    key = boot_key(root)
    try:
        with open(p, "rb") as f:
            doc = json.loads(f.read())
    except FileNotFoundError:
        return None, f"no probe state in {state_dir} for this boot: not measured on this boot"
    except (OSError, ValueError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) else "not JSON"
        return None, f"{p}: {why}; ignored, not measured on this boot"
    try:
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            raise ValueError("not a nodesleuth probe state")
        if doc["boot_id"] != key["boot_id"] or doc["kernel"] != key["kernel"]:
            return None, (f"{p}: from another boot or kernel ({doc['kernel']}, boot {str(doc['boot_id'])[:8]}); "
                          "ignored, not measured on this boot")
        cost = MemcgCost(**doc["cost"]) if doc.get("cost") else None
        st = Stored(p, float(doc["time"]), doc["boot_id"], doc["kernel"], cost, doc.get("cost_problem"),
                    doc.get("posture"), doc.get("posture_problem"))
    except (KeyError, TypeError, ValueError) as e:
        return None, f"{p}: damaged ({e.__class__.__name__}: {e}); ignored, not measured on this boot"
    return st, None


def save(root: Root, state_dir: str, cost: MemcgCost | None, cost_problem: str | None, posture: dict | None,
         posture_problem: str | None) -> Stored:
    """Write this boot's results atomically (a temp file in the same directory, fsync, rename);
    InputError naming the directory when it cannot be written."""
    key = boot_key(root)
    now = time.time()
    doc = {"schema": SCHEMA, "time": now, **key, "cost": None if cost is None else dataclasses.asdict(cost),
           "cost_problem": cost_problem, "posture": posture, "posture_problem": posture_problem}
    p = state_path(state_dir)
    try:
        os.makedirs(state_dir, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".probes-", dir=state_dir)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(doc, f, indent=1)
                f.flush()
                os.fsync(f.fileno())
            os.rename(tmp, p)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError as e:
        raise InputError(e.filename or state_dir, f"cannot write the probe state: {e.strerror}") from None
    return Stored(p, now, key["boot_id"] or "", key["kernel"] or "", cost, cost_problem, posture, posture_problem,
                  fresh=True)


def guard(root: Root, mc: Memcg | None = None) -> str | None:
    """Why a probe must not make memcgs here now (which guard held, with its numbers), or None."""
    try:
        mc = mc or Memcg(root)
    except InputError as e:
        return str(e)
    held = []
    n = mc.count()
    if n is not None and n > PROBE_MAX_ID_SHARE * MEMCG_ID_MAX:
        held.append(f"memory cgroup IDs near the limit: {n} of {MEMCG_ID_MAX} in use "
                    f"({100 * n / MEMCG_ID_MAX:.0f}% > {100 * PROBE_MAX_ID_SHARE:.0f}%)")
    if n is not None and n > PROBE_MAX_MEMCGS:
        held.append(f"{n} memory cgroups already (> {PROBE_MAX_MEMCGS})")
    psi = root.read_opt("/proc/pressure/memory")
    avg10 = parse_psi_some_avg10(psi) if psi else None
    if avg10 is not None and avg10 > PROBE_MAX_MEM_PSI:
        held.append(f"memory pressure high: {root.join('/proc/pressure/memory')} some avg10={avg10:g} "
                    f"(> {PROBE_MAX_MEM_PSI:g})")
    try:
        ro = [m.path for m in mounts(root) if m.path == mc.host_mount and m.read_only]
    except InputError:
        ro = []
    if ro:
        held.append(f"cgroup file system read-only: {ro[0]} is mounted ro")
    return "; ".join(held) if held else None


def measure(root: Root, state_dir: str) -> tuple[Stored | None, str | None]:
    """Run both probes (unless a guard holds) and keep their results: (stored, note). The note says
    which guard held, or that the state could not be written (the results are then still returned)."""
    from . import memcg_cost, posture

    if not root.live:
        return None, "probes not run: they need the live host, not a recorded tree"
    why = guard(root)
    if why:
        return None, f"probes not run: {why}"
    cost, cost_problem = None, None
    try:
        cost = memcg_cost.probe(root)
    except InputError as e:
        cost_problem = str(e)
    post, post_problem = None, None
    try:
        post = posture.probe(root)
    except InputError as e:
        post_problem = str(e)
    try:
        return save(root, state_dir, cost, cost_problem, post, post_problem), None
    except InputError as e:
        key = boot_key(root)
        return (Stored("(not kept)", time.time(), key["boot_id"] or "", key["kernel"] or "", cost, cost_problem, post,
                       post_problem, fresh=True), str(e))
