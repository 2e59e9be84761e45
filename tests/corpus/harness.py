"""Runs INSIDE the VM: one corpus case recorded for real (tests/corpus/make.py boots the VM).

usage: python harness.py CASE OUTDIR

1. the case's setup(x) (what must exist before recording: a systemd namespace, network namespaces,
   cgroups); 2. `nodesleuth record --profile --trace-churn` into a store on the guest's tmpfs; 3. wait
   until the recorder is in its steady state (ticks and a first profile batch stored, then WARM s:
   perf's start-up costs a core for seconds under emulation, and that is not the case's episode);
   mark `window_start`; 4. the case's run(x), which marks its episode(s); 5. TAIL s more (a profile
   batch is stored every PROFILE_ROTATE s), mark `window_end`; 6. stop the recorder, tear down,
   write OUTDIR/meta.json and copy the store to OUTDIR/store.

Everything a case starts is killed at the end (by pid); lines a case writes to /dev/kmsg are listed
in meta.json with their origin (generated from a format string, or a real report's line).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
STORE = "/run/corpus/store"
WARM = 15.0
TAIL = 12.0
PROFILE_ROTATE = 5
RECORD = ["record", "--store", STORE, "--quiet", "--profile", "--trace-churn", "--profile-rotate",
          str(PROFILE_ROTATE), "--units-every", "1", "--live-every", "5", "--profile-buffer", "1024"]
T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f}s] {msg}", file=sys.stderr, flush=True)


def load_case(name: str):
    if os.path.join(HERE, "cases") not in sys.path:
        sys.path.insert(0, os.path.join(HERE, "cases"))  # the cases' _common
    path = os.path.join(HERE, "cases", f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"corpus_case_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Ctx:
    """What a case's setup/run/teardown get: processes it starts (all killed at the end), marks,
    kernel-log lines written, and the node's knobs (network namespaces, cgroups, modules)."""

    def __init__(self, case: str, out: str):
        self.case, self.out = case, out
        self.tool_path = os.environ.get("CORPUS_TOOL") or os.path.join(HERE, "corpus_tool")
        self.python = sys.executable
        self.procs: list[subprocess.Popen] = []
        self.marks: dict[str, float] = {}
        self.written: list[dict] = []
        self.notes: list[str] = []
        self.record_args: list[str] = []
        self.results: dict = {}
        self.cleanup: list = []  # callables run at the end, last first
        self.cpus = os.cpu_count()

    # --- processes -------------------------------------------------------------------------------
    def spawn(self, cmd, **kw) -> subprocess.Popen:
        if isinstance(cmd, str):
            cmd = ["sh", "-c", cmd]
        kw.setdefault("stdin", subprocess.DEVNULL)
        kw.setdefault("stdout", subprocess.PIPE)
        p = subprocess.Popen(cmd, **kw)
        self.procs.append(p)
        log(f"started {p.pid}: {shlex.join(cmd)[:160]}")
        return p

    def tool(self, comm: str, mode: str, seconds: float, *args, netns: str | None = None,
             cgroup: str | None = None) -> subprocess.Popen:
        """corpus_tool COMM MODE SECONDS ARGS (corpus_tool.c), optionally in a network namespace
        and started inside a cgroup (v2 path under /sys/fs/cgroup)."""
        cmd = [self.tool_path, comm, mode, str(seconds), *map(str, args)]
        if cgroup:
            cmd = ["sh", "-c", f"echo $$ > {shlex.quote(self.cg_path(cgroup))}/cgroup.procs && exec "
                   + shlex.join(cmd)]
        if netns:
            cmd = ["ip", "netns", "exec", netns, *cmd]
        return self.spawn(cmd)

    def wait(self, *procs: subprocess.Popen, timeout: float = 600) -> None:
        for p in procs:
            try:
                out, _ = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                out, _ = p.communicate()
            if out:
                self.results.setdefault("outputs", []).append(out.decode(errors="replace")[-2000:])

    def sh(self, cmd: str, check: bool = True, timeout: float = 300) -> str:
        p = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=timeout)
        if check and p.returncode:
            raise RuntimeError(f"{cmd}: exit {p.returncode}: {p.stderr.strip()[-400:]}")
        return p.stdout

    def sleep(self, s: float) -> None:
        time.sleep(s)

    # --- marks -----------------------------------------------------------------------------------
    def mark(self, name: str) -> float:
        t = time.time()
        self.marks[name] = t
        log(f"mark {name}")
        return t

    @contextlib.contextmanager
    def episode(self, name: str = "episode"):
        self.mark(f"{name}_start")
        try:
            yield
        finally:
            self.mark(f"{name}_end")

    def note(self, text: str) -> None:
        self.notes.append(text)

    # --- the kernel log ----------------------------------------------------------------------------
    def kmsg(self, lines: list[tuple[int, str]], origin: str, marker: str | None = None) -> float:
        """Write lines to the guest's /dev/kmsg (a written line carries the user facility in the
        record, not the kernel's). `origin` says where each line's text comes from; `marker`, a
        line written first saying the next ones are the scenario's."""
        t = time.time()
        with open("/dev/kmsg", "w") as f:
            if marker:
                f.write(f"<6>{marker}\n")
                f.flush()
            for level, text in lines:
                f.write(f"<{level}>{text}\n")
                f.flush()
                self.written.append({"time": time.time(), "level": level, "text": text, "origin": origin})
        log(f"wrote {len(lines)} lines to /dev/kmsg")
        return t

    # --- knobs -----------------------------------------------------------------------------------
    def modprobe(self, *mods: str) -> None:
        for m in mods:
            self.sh(f"modprobe -d \"$VMRUN_MODBASE\" {m}", check=False)

    def cg_path(self, name: str) -> str:
        return os.path.join("/sys/fs/cgroup", name)

    def cgroup(self, name: str, controllers: tuple[str, ...] = ("memory", "cpu"), **files: str) -> str:
        """A v2 cgroup /sys/fs/cgroup/NAME with the parent's controllers enabled and FILES written
        (memory_max="64M" writes memory.max); removed at the end."""
        path = self.cg_path(name)
        parts = name.split("/")
        for i in range(len(parts)):
            parent = self.cg_path("/".join(parts[:i]))
            for c in controllers:
                try:
                    with open(os.path.join(parent, "cgroup.subtree_control"), "w") as f:
                        f.write(f"+{c}")
                except OSError:
                    pass
            os.makedirs(self.cg_path("/".join(parts[:i + 1])), exist_ok=True)
        for k, v in files.items():
            with open(os.path.join(path, k.replace("_", ".", 1)), "w") as f:
                f.write(str(v))
        self.cleanup.append(lambda: _rm_cgroup(self.cg_path(parts[0])))
        return path

    def veth(self, a: str = "ca", b: str = "cb", rps_cpus: int | None = None) -> tuple[str, str]:
        """Two network namespaces joined by a veth pair: A (10.99.0.1) -> B (10.99.0.2); with
        rps_cpus, B's receive queue steers packets to those CPUs (a mask) with RPS."""
        self.modprobe("veth")
        self.sh(f"ip netns add {a} && ip netns add {b} && ip link add v{a} type veth peer name v{b} && "
                f"ip link set v{a} netns {a} && ip link set v{b} netns {b} && "
                f"ip -n {a} addr add 10.99.0.1/24 dev v{a} && ip -n {b} addr add 10.99.0.2/24 dev v{b} && "
                f"ip -n {a} link set v{a} up && ip -n {b} link set v{b} up && "
                f"ip -n {a} link set lo up && ip -n {b} link set lo up")
        self.cleanup.append(lambda: self.sh(f"ip netns del {a}; ip netns del {b}", check=False))
        if rps_cpus is not None:
            self.sh(f"ip netns exec {b} sh -c 'echo {rps_cpus:x} > /sys/class/net/v{b}/queues/rx-0/rps_cpus'")
        return a, b

    def nic_pair(self, a: str = "na") -> tuple[str, str, dict]:
        """The VM's two virtio NICs (make.py: one QEMU hub): the first in namespace A (10.98.0.1), the
        second left in the node's own namespace (10.98.0.2), as a host's NIC is: packets A sends arrive
        through it and its interrupts, and the recorder sees it. Returns both names and the receiving
        device's interrupt lines {line: name}."""
        self.modprobe("virtio_net")
        deadline = time.time() + 30
        links = []
        while time.time() < deadline and len(links) < 2:
            links = [ln.split()[0] for ln in self.sh("ip -br link").splitlines() if ln.split()[0] != "lo"]
            time.sleep(0.5)
        if len(links) < 2:
            raise RuntimeError(f"two NICs wanted, found {links}")
        la, lb = sorted(links)[:2]
        drv = os.path.basename(os.path.realpath(f"/sys/class/net/{lb}/device"))  # virtioN
        self.sh(f"ip netns add {a} && ip link set {la} netns {a} && ip -n {a} addr add 10.98.0.1/24 dev {la} && "
                f"ip addr add 10.98.0.2/24 dev {lb} && ip -n {a} link set {la} up && ip link set {lb} up && "
                f"ip -n {a} link set lo up")
        self.cleanup.append(lambda: self.sh(f"ip netns del {a}", check=False))
        lines = {}
        for ln in open("/proc/interrupts"):
            k, _, rest = ln.partition(":")
            if rest.strip().endswith(tuple(f"{drv}-{q}" for q in ("input.0", "output.0", "config"))):
                lines[k.strip()] = rest.split()[-1]
        return la, lb, lines

    def irq_affinity(self, line: str, cpus: str) -> None:
        with open(f"/proc/irq/{line}/smp_affinity_list", "w") as f:
            f.write(cpus)


def _rm_cgroup(path: str) -> None:
    for dp, dns, _ in sorted(os.walk(path), key=lambda x: -x[0].count("/")):
        try:
            os.rmdir(dp)
        except OSError:
            pass


def _count(path: str) -> int:
    try:
        return len([n for n in os.listdir(path) if n.endswith(".seg")])
    except OSError:
        return 0


def wait_ready(rec: subprocess.Popen, timeout: float = 300.0) -> float:
    """Until the recorder has stored ticks and a first profile batch (perf runs), then WARM s."""
    t = time.time()
    while time.time() - t < timeout:
        if rec.poll() is not None:
            raise RuntimeError(f"the recorder exited {rec.returncode}")
        if _count(os.path.join(STORE, "ticks")) and _count(os.path.join(STORE, "profile")):
            log(f"recorder ready after {time.time() - t:.0f} s")
            time.sleep(WARM)
            return time.time() - t
        time.sleep(1.0)
    raise RuntimeError("the recorder stored no profile in time")


def main() -> int:
    name, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    case = load_case(name)
    x = Ctx(name, out)
    meta: dict = {"case": name, "kernel": os.uname().release, "cpus": os.cpu_count(),
                  "hierarchy": os.environ.get("VMRUN_HIERARCHY", "v2"), "started": time.time(),
                  "record": None, "ok": False}
    rec = None
    try:
        if hasattr(case, "setup"):
            log("setup")
            case.setup(x)
        os.makedirs(os.path.dirname(STORE), exist_ok=True)
        args = [sys.executable, "-m", "nodesleuth", *RECORD, *getattr(case, "RECORD_ARGS", []), *x.record_args]
        meta["record"] = shlex.join(["nodesleuth", *args[3:]])
        rec_log = open(os.path.join(out, "recorder.log"), "wb")
        rec = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=rec_log, stderr=rec_log)
        meta["ready_after"] = round(wait_ready(rec), 1)
        x.mark("window_start")
        log("run")
        case.run(x)
        time.sleep(getattr(case, "TAIL", TAIL))
        x.mark("window_end")
        meta["ok"] = True
    except Exception as e:  # noqa: BLE001 - said in meta.json and on stderr; the store is still kept
        import traceback

        meta["error"] = f"{type(e).__name__}: {e}"
        traceback.print_exc()
    finally:
        if rec is not None and rec.poll() is None:
            rec.send_signal(signal.SIGTERM)
            try:
                rec.wait(timeout=600)  # it stores its last profile chunks (slow under emulation)
            except subprocess.TimeoutExpired:
                rec.kill()
        meta["record_rc"] = rec.returncode if rec is not None else None
        for p in x.procs:
            if p.poll() is None:
                p.kill()
        for p in x.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        if hasattr(case, "teardown"):
            try:
                case.teardown(x)
            except Exception as e:  # noqa: BLE001
                meta.setdefault("teardown_error", str(e))
        for fn in reversed(x.cleanup):
            try:
                fn()
            except Exception:  # noqa: BLE001
                pass
    meta.update(marks=x.marks, written_lines=x.written, notes=x.notes, results=x.results, ended=time.time())
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    if os.path.isdir(STORE):
        shutil.copytree(STORE, os.path.join(out, "store"), ignore=shutil.ignore_patterns("LOCK", ".work"))
    log(f"done: ok={meta['ok']} {meta.get('error', '')}")
    return 0 if meta["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
