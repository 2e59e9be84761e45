#!/usr/bin/env python3
"""Make (or remake) recordings of the explain corpus, for real, inside a QEMU guest.

    python3 tests/corpus/make.py CASE [CASE ...]     # or: all, or --list
    python3 tests/corpus/make.py --keep CASE          # also keep the raw store in the run directory

Per case (tests/corpus/cases/CASE.py): boot its kernel under TCG with its vCPUs (tests/vm/vmrun.py),
run tests/corpus/harness.py in the guest (the case's workload while `nodesleuth record --profile
--trace-churn` records), copy the store out through the VM's writable share, trim it to the case's
window (its frames from `window_start` to `window_end`; derived profile aggregates dropped: readers
fall back to the raw profile), and write tests/data/corpus/CASE.tar.zst (the store directory, tar +
zstd -19) and CASE.json (the expected verdict, kernel, vCPUs, date, the command that remakes it,
the marks relative to the window, the kernel-log lines the scenario wrote and their origin).

The host runs the guest's recorder from a staged copy of src/ (the guest sees the host's / read-only);
corpus_tool.c is built here with gcc -static. Host load does not fake or hide a hot core: the guest's
own CPU accounting is what is recorded.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DATA = os.environ.get("CORPUS_DATA") or os.path.join(REPO, "tests", "data", "corpus")  # where recordings go
CASES = os.path.join(HERE, "cases")
RUNS = os.environ.get("CORPUS_RUNS", "/var/cache/nodesleuth-corpus/runs")  # not /tmp: the guest mounts its own tmpfs there
sys.path.insert(0, os.path.join(REPO, "tests", "vm"))
sys.path.insert(0, os.path.join(REPO, "src"))

KEEP_STREAMS = ("ticks", "rollup", "churn", "profile", "profile_lost")


def case_names() -> list[str]:
    return sorted(n[:-3] for n in os.listdir(CASES) if n.endswith(".py") and not n.startswith("_"))


def load(name: str):
    import importlib.util

    if CASES not in sys.path:
        sys.path.insert(0, CASES)  # the cases' _common
    spec = importlib.util.spec_from_file_location(f"corpus_case_{name}", os.path.join(CASES, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def stage() -> str:
    """src/, tests/corpus and the built corpus_tool under the VM cache (visible in the guest)."""
    import vmrun

    h = hashlib.sha256()
    for base in (os.path.join(REPO, "src"), HERE):
        h.update(vmrun._tree_fingerprint(__import__("pathlib").Path(base)).encode())
    dest = vmrun.CACHE / f"corpus-stage-{h.hexdigest()[:12]}"
    if not (dest / ".done").exists():
        vmrun.CACHE.mkdir(parents=True, exist_ok=True)  # a fresh machine has no VM cache yet
        tmp = tempfile.mkdtemp(dir=vmrun.CACHE, prefix=".corpus-stage-")
        ign = shutil.ignore_patterns("__pycache__", "*.egg-info")
        shutil.copytree(os.path.join(REPO, "src"), os.path.join(tmp, "src"), ignore=ign)
        shutil.copytree(HERE, os.path.join(tmp, "corpus"), ignore=ign)
        # real kernel-log lines (with their sources) for the look-alike case
        shutil.copy(os.path.join(REPO, "tests", "data", "kernel-log", "corpus.json"),
                    os.path.join(tmp, "corpus", "kernel-log-corpus.json"))
        subprocess.run(["gcc", "-O2", "-static", "-pthread", "-o", os.path.join(tmp, "corpus", "corpus_tool"),
                        os.path.join(HERE, "corpus_tool.c")], check=True)
        open(os.path.join(tmp, ".done"), "w").write(REPO)
        if dest.exists():
            shutil.rmtree(dest)
        os.rename(tmp, dest)
    return str(dest)


def nics(n: int) -> list[str]:
    """n virtio NICs on one QEMU hub: what one sends, another receives (no host networking)."""
    out: list[str] = []
    for i in range(n):
        out += ["-netdev", f"hubport,id=hp{i},hubid=0", "-device", f"virtio-net-pci,netdev=hp{i},mac=52:54:00:c0:00:{i + 16:02x}"]
    return out


def trim(src: str, dst: str, t0: float | None, t1: float | None) -> dict:
    """Copy the frames of KEEP_STREAMS within [t0, t1] (profile batches from 10 s before: a batch is
    stamped with its first sample) into a new store; the first tick carries the units and NIC
    counters it would have inherited from an earlier keyframe, and the last pods listing before the
    window (the recorder writes one when it changed, or once a minute)."""
    import orjson

    from nodesleuth.store import codec
    from nodesleuth.store.store import StoreReader, StoreWriter

    r = StoreReader(src)
    w = StoreWriter(dst, retention=None, max_bytes=None, background_sync=False)
    counts = {}
    try:
        for stream in KEEP_STREAMS:
            if not r.segments(stream):
                continue
            lo = None if t0 is None else t0 - (10 if stream.startswith("profile") else 0)
            carry: dict = {}
            first = True
            n = 0
            for t, payload, ctx in r.read(stream, None if lo is None else lo - 120, t1, with_context=True):
                if stream == "ticks":
                    # schema 3 is read against its segment's context (store/codec.py); the trimmed store
                    # keeps each tick as its schema-2 record (by field name, names filled in), which
                    # every reader reads, so no context has to follow the records
                    rec = codec.decode_record(payload, f"{src}: tick at {t}", t, ctx)[1]
                    if lo is not None and t < lo:
                        for k in ("u", "nic"):
                            if k in rec:
                                carry[k] = rec[k]
                        if "kube" in rec.get("x", {}):  # the pods listing (a section under "x"), written when it changed
                            carry["x.kube"] = rec["x"]["kube"]
                        continue
                    if first and carry:
                        for k, v in carry.items():
                            if k.startswith("x."):
                                rec.setdefault("x", {}).setdefault(k[2:], v)
                            else:
                                rec.setdefault(k, v)
                    payload, ctx = orjson.dumps(rec), b""
                elif lo is not None and t < lo:
                    continue
                first = False
                w.append(stream, t, payload, ctx)
                n += 1
            counts[stream] = n
    finally:
        w.close()
    os.unlink(os.path.join(dst, "LOCK")) if os.path.exists(os.path.join(dst, "LOCK")) else None
    if r.problems:
        raise RuntimeError(f"reading {src}: {r.problems[:3]}")
    return counts


def pack(store: str, name: str) -> str:
    """tests/data/corpus/NAME.tar.zst: the store directory as NAME/ (files sorted, owner and times
    normalised so a remade recording differs only by its data)."""
    os.makedirs(DATA, exist_ok=True)
    out = os.path.join(DATA, f"{name}.tar.zst")
    parent = tempfile.mkdtemp(prefix="corpus-pack-")
    try:
        shutil.copytree(store, os.path.join(parent, name))
        tar = subprocess.run(["tar", "--sort=name", "--owner=0", "--group=0", "--numeric-owner", "--mtime=@0",
                              "-C", parent, "-cf", "-", name], check=True, capture_output=True).stdout
        z = subprocess.run(["zstd", "-19", "-q", "-c"], input=tar, check=True, capture_output=True).stdout
        with open(out + ".tmp", "wb") as f:
            f.write(z)
        os.replace(out + ".tmp", out)
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    return out


def _source() -> str:
    """The commit the recorder ran from (and whether the tree had changes on top of it)."""
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "src"], capture_output=True, text=True).stdout
        return head.strip() + (" + changes in src/" if dirty.strip() else "")
    except OSError:
        return ""


def make(name: str, keep: bool = False) -> dict:
    import vmrun

    case = load(name)
    st = stage()
    run_base = os.path.join(RUNS, f"{name}-{time.strftime('%Y%m%d-%H%M%S')}")
    os.makedirs(run_base, exist_ok=True)
    os.environ["NODESLEUTH_VM_RUNDIR"] = run_base
    os.environ["VMRUN_KEEP"] = "1"
    cmd = (f"cd / && CORPUS_TOOL={st}/corpus/corpus_tool PYTHONPATH={st}/src "
           f"$VMRUN_PYTHON {st}/corpus/harness.py {name} /run/vmrun/out")
    kernel = getattr(case, "KERNEL", "6.12")
    print(f"[make] {name}: kernel {kernel}, {getattr(case, 'CPUS', 4)} vCPUs, run dir {run_base}", file=sys.stderr,
          flush=True)
    r = vmrun.run_in_vm(cmd, cpus=getattr(case, "CPUS", 4), mem=getattr(case, "MEM", "2G"),
                        timeout=getattr(case, "TIMEOUT", 1500), kernel=kernel,
                        hierarchy=getattr(case, "HIERARCHY", "v2"), disk_mb=getattr(case, "DISK_MB", 0),
                        extra_qemu=nics(getattr(case, "NICS", 0)))
    rundir = next((os.path.join(run_base, d) for d in os.listdir(run_base) if d.startswith("vmrun-")), None)
    with open(os.path.join(run_base, "guest.log"), "w") as f:
        f.write(f"rc={r.rc} wall={r.wall:.0f}s kernel={r.kernel}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}\n")
    out = os.path.join(rundir, "out") if rundir else None
    if not out or not os.path.exists(os.path.join(out, "meta.json")):
        raise RuntimeError(f"{name}: the guest wrote no meta.json (rc {r.rc}): {r.stderr[-1500:]}")
    meta = json.load(open(os.path.join(out, "meta.json")))
    if not meta.get("ok"):
        raise RuntimeError(f"{name}: the case failed in the guest: {meta.get('error')}; see {run_base}/guest.log")
    marks = meta["marks"]
    whole = getattr(case, "WHOLE", False)
    t0, t1 = (None, None) if whole else (marks["window_start"], marks["window_end"])
    trimmed = os.path.join(run_base, "trimmed")
    counts = trim(os.path.join(out, "store"), trimmed, t0, t1)
    path = pack(trimmed, name)
    base = t0 if t0 is not None else meta["started"]
    doc = {
        "name": name,
        "description": (case.__doc__ or "").strip(),
        "expect": case.EXPECT,
        "set": "held-out" if getattr(case, "HELD_OUT", False) else "in-sample",
        "kernel": meta["kernel"], "kernel_generation": kernel, "hierarchy": meta["hierarchy"], "vcpus": meta["cpus"],
        "date": time.strftime("%Y-%m-%d", time.gmtime(meta["started"])),
        "command": f"python3 tests/corpus/make.py {name}",
        "record": meta["record"],
        "source": _source(),
        "window": {"start": t0, "end": t1, "whole_recording": whole},
        "marks": {k: round(v - base, 2) for k, v in sorted(marks.items(), key=lambda kv: kv[1])},
        "written_lines": [{**w, "time": round(w["time"] - base, 2)} for w in meta["written_lines"]],
        "notes": meta["notes"], "results": meta["results"],
        "frames": counts, "bytes": os.path.getsize(path), "vm_wall_s": round(r.wall),
    }
    with open(os.path.join(DATA, f"{name}.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    if not keep:
        shutil.rmtree(os.path.join(out, "store"), ignore_errors=True)
    print(f"[make] {name}: {path} ({doc['bytes'] // 1024} KiB), frames {counts}, VM {r.wall:.0f} s", file=sys.stderr)
    return doc


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", nargs="*")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the raw store in the run directory")
    ap.add_argument("--refresh", action="store_true", help="only rewrite each recording's expectation and "
                    "description from its case script (no VM)")
    a = ap.parse_args(argv)
    names = case_names()
    if a.list:
        for n in names:
            c = load(n)
            print(f"{n:32} {getattr(c, 'KERNEL', '6.12'):5} {c.EXPECT}")
        return 0
    todo = names if a.cases == ["all"] else a.cases
    bad = [n for n in todo if n not in names]
    if bad:
        print(f"unknown cases: {bad}", file=sys.stderr)
        return 2
    if a.refresh:
        for n in todo:
            path = os.path.join(DATA, f"{n}.json")
            if os.path.exists(path):
                doc = json.load(open(path))
                c = load(n)
                doc.update(expect=c.EXPECT, description=(c.__doc__ or "").strip(),
                           set="held-out" if getattr(c, "HELD_OUT", False) else "in-sample")
                with open(path, "w") as f:
                    json.dump(doc, f, indent=1)
                    f.write("\n")
        return 0
    failed = []
    for n in todo:
        try:
            make(n, a.keep)
        except Exception as e:  # noqa: BLE001 - go on with the others, say which failed
            print(f"[make] {n}: FAILED: {e}", file=sys.stderr)
            failed.append(n)
    if failed:
        print(f"[make] failed: {failed}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
