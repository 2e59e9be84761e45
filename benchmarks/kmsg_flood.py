"""A kernel-log flood end to end: 60,000 lines in 3 s written to /dev/kmsg (or appended to a file followed with
--kmsg) while `record`, the exporter and `check` read it; what each read, dropped (the kernel's sequence numbers
skipped: overwritten in the ring before it could be read) and matched, how regular their 1 s ticks stayed, and
the CPU each spent during the flood, measured side by side in the same run with `dmesg` reading the same ring.

The flood's shapes are real lines (benchmarks/kmsg_match.py FLOOD: link flaps from corpus.json's look-alikes, the
OOM killer's report line, `perf: interrupt took too long`), repeated; one line in 1,000 is an ENA `TX q N is paused`
line GENERATED from the real line's format (amzn-drivers ena_netdev.c, the real line in kmsg_match.py ENA) with a
distinct `Time since last napi` value, so each can be told apart in what a reader found.

`python -m benchmarks.kmsg_flood` prints one JSON object (results in benchmarks/results/kmsg_flood.json). Needs root
(/dev/kmsg; printk_devkmsg is set to "on" for the flood and restored). Timings are this machine's: no assertion
here; tests/test_flood.py asserts the behaviour.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

from benchmarks.kmsg_match import ENA, FLOOD  # noqa: E402

ENA_FMT = ENA.replace("6596000", "{usec}")  # generated from the real line's format: the napi delay varies
DEVKMSG = "/proc/sys/kernel/printk_devkmsg"


def flood(n: int = 60000, ena_every: int = 1000) -> tuple[list[str], dict[int, int]]:
    """n messages: the flood shapes in turn, an ENA line every `ena_every` (index -> its usec value)."""
    out, ena = [], {}
    for i in range(n):
        if i % ena_every == ena_every - 1:
            usec = 6_000_000 + i
            ena[i] = usec
            out.append(ENA_FMT.format(usec=usec))
        else:
            out.append(FLOOD[i % len(FLOOD)])
    return out, ena


@contextlib.contextmanager
def devkmsg_unlimited():
    """Writes to /dev/kmsg are rate-limited (10 per 5 s per open file) unless printk_devkmsg is "on": on for the
    flood, restored after."""
    with open(DEVKMSG) as f:
        old = f.read().strip()
    with open(DEVKMSG, "w") as f:
        f.write("on\n")
    try:
        yield
    finally:
        with open(DEVKMSG, "w") as f:
            f.write(old + "\n")


def mark(text: str) -> int:
    """Write one line to /dev/kmsg and return the sequence number the kernel gave it (read back at once)."""
    fd = os.open("/dev/kmsg", os.O_RDWR | os.O_NONBLOCK)
    try:
        os.lseek(fd, 0, os.SEEK_END)
        os.write(fd, f"<6>{text}\n".encode())
        while True:
            try:
                rec = os.read(fd, 8192).decode(errors="replace")
            except BrokenPipeError:
                continue
            if rec.split(";", 1)[-1].split("\n", 1)[0] == text:
                return int(rec.split(",", 2)[1])
    finally:
        os.close(fd)


def write_paced(lines: list[str], seconds: float, write, chunk: int = 500) -> float:
    """Write the lines in chunks, paced to last `seconds` (as fast as it goes within each chunk)."""
    t0 = time.monotonic()
    for k in range(0, len(lines), chunk):
        write(lines[k:k + chunk])
        ahead = t0 + seconds * (k + chunk) / len(lines) - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
    return time.monotonic() - t0


def to_devkmsg(lines: list[str], seconds: float = 3.0) -> float:
    fd = os.open("/dev/kmsg", os.O_WRONLY)
    try:
        def write(part):
            for m in part:
                os.write(fd, f"<4>{m}\n".encode())
        return write_paced(lines, seconds, write)
    finally:
        os.close(fd)


def to_file(path: str, lines: list[str], seconds: float = 3.0, first_seq: int = 1) -> float:
    """Append the lines to a file in /dev/kmsg's record form (`level,seq,usec,-;text`), dated now."""
    seq = [first_seq]

    with open(path, "a") as f:
        def write(part):
            up = time.clock_gettime(time.CLOCK_MONOTONIC)
            for m in part:
                f.write(f"4,{seq[0]},{int(up * 1e6)},-;{m}\n")
                seq[0] += 1
            f.flush()
        return write_paced(lines, seconds, write)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def metrics(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        out = {}
        for ln in r.read().decode().splitlines():
            if ln and not ln.startswith("#"):
                k, _, v = ln.rpartition(" ")
                out[k] = float(v)
    return out


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Consumers:
    """record and the exporter (and, optionally, a check) reading the same kernel log during a flood."""

    def __init__(self, workdir: str, kmsg: str | None = None, check_seconds: int = 0):
        self.store = os.path.join(workdir, "store")
        self.port = free_port()
        src = ["--kmsg", kmsg] if kmsg else []
        py = [sys.executable, "-m", "nodesleuth"]
        self.rec = subprocess.Popen(py + ["record", "--store", self.store, "--quiet", *src],
                                    stderr=subprocess.PIPE, text=True)
        self.exp = subprocess.Popen(py + ["exporter", "--listen", f"127.0.0.1:{self.port}", *src],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.dmesg = None
        if not kmsg:  # util-linux dmesg following the same ring (blocking reads, no rules): the reference reader
            self.dmesg_out = open(os.path.join(workdir, "dmesg.txt"), "w")
            self.dmesg = subprocess.Popen(["dmesg", "-w", "-r"], stdout=self.dmesg_out, stderr=subprocess.DEVNULL)
        self.check = None
        if check_seconds:
            self.check = subprocess.Popen(py + ["check", "--json", "--seconds", str(check_seconds), "--no-trace-churn",
                                                "--no-probe", *src], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if metrics(self.port).get("nodesleuth_samples_total", 0) >= 1 and os.path.isdir(self.store):
                    break
            except OSError:
                pass
            time.sleep(0.2)
        time.sleep(1.5)  # the recorder's first ticks

    def cpu(self) -> dict[str, float]:
        out = {"record": cpu_seconds(self.rec.pid), "exporter": cpu_seconds(self.exp.pid)}
        if self.dmesg is not None:
            out["dmesg"] = cpu_seconds(self.dmesg.pid)
        return out

    def stop(self) -> dict:
        out = {"metrics": metrics(self.port)}
        self.rec.terminate()
        self.exp.terminate()
        out["record_stderr"] = self.rec.communicate(timeout=60)[1]
        self.exp.wait(timeout=60)
        if self.dmesg is not None:
            self.dmesg.terminate()
            self.dmesg.wait(timeout=30)
            self.dmesg_out.close()
            with open(self.dmesg_out.name, errors="replace") as f:
                out["dmesg_lines"] = f.read().splitlines()
        if self.check is not None:
            so, se = self.check.communicate(timeout=120)
            out["check"] = json.loads(so) if so.strip() else None
            out["check_stderr"] = se
        dump = subprocess.run([sys.executable, "-m", "nodesleuth", "dump", "--store", self.store, "--format", "json"],
                              capture_output=True, text=True, timeout=120)
        out["ticks"] = [json.loads(x) for x in dump.stdout.splitlines()]
        return out

    def kill(self) -> None:
        for p in (self.rec, self.exp, self.check, self.dmesg):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def summarise(name: str, got: dict, t0: float, t1: float, cpu: dict, lines: int) -> dict:
    """`cpu`: each consumer's CPU seconds over the flood and the 2 s after it (the ticks that read it), less
    the same span before the flood (its steady cost)."""
    ticks = got["ticks"]
    times = [t["time"] for t in ticks]
    during = [t for t in ticks if t0 <= t["time"] <= t1 + 2]
    gaps = [round(b - a, 3) for a, b in zip(times, times[1:])]
    kl = [t.get("kernel_log") or {} for t in ticks]
    m = got["metrics"]
    span = t1 + 2 - t0
    read = sum(k.get("read", 0) for k in kl)
    out = {
        "source": name, "lines": lines, "flood_seconds": round(t1 - t0, 2),
        "record": {"read": read, "dropped": sum(k.get("dropped", 0) for k in kl),
                   "ticks_in_flood_and_2s_after": len(during), "max_tick_gap_s": max(gaps, default=None),
                   "flood_cpu_s": round(cpu["record"], 2), "flood_cpu_share": round(cpu["record"] / span, 3)},
        "exporter": {"read": m.get("nodesleuth_kernel_log_records_total"),
                     "dropped": m.get("nodesleuth_kernel_log_dropped_total"),
                     "samples": m.get("nodesleuth_samples_total"),
                     "flood_cpu_s": round(cpu["exporter"], 2), "flood_cpu_share": round(cpu["exporter"] / span, 3)},
        "check": None if got.get("check") is None else {
            k: got["check"]["kernel_log"][k] for k in ("read", "dropped", "gaps_total", "bounded_reads")},
    }
    if "dmesg_lines" in got:
        lns = got["dmesg_lines"]
        a = max((i for i, ln in enumerate(lns) if "nodesleuth-flood: begin" in ln), default=None)
        b = max((i for i, ln in enumerate(lns) if "nodesleuth-flood: end" in ln), default=None)
        flood = None if a is None or b is None else b - a - 1  # lines dmesg -w printed between the markers
        out["dmesg_w"] = {"flood_lines_seen": flood, "flood_cpu_s": round(cpu["dmesg"], 2),
                          "flood_cpu_share": round(cpu["dmesg"] / span, 3)}
    return out


def _flood_cpu(c: Consumers, flood) -> tuple[float, float, dict]:
    """Run `flood()`; each consumer's CPU over the flood and 2 s after, less the same span just before."""
    a = c.cpu()
    time.sleep(3)
    b, t0 = c.cpu(), time.time()
    flood()
    t1 = time.time()
    time.sleep(2)
    e = c.cpu()
    span = time.time() - t0
    return t0, t1, {k: max(0.0, (e[k] - b[k]) - (b[k] - a[k]) * span / 3) for k in e}


def run_devkmsg(n: int = 60000, seconds: float = 3.0) -> dict:
    lines, ena = flood(n)
    box = {}
    with tempfile.TemporaryDirectory() as d, devkmsg_unlimited():
        c = Consumers(d, check_seconds=14)
        try:
            def go():
                box["s0"] = mark("nodesleuth-flood: begin")
                box["took"] = to_devkmsg(lines, seconds)
                box["s1"] = mark("nodesleuth-flood: end")
            t0, t1, cpu = _flood_cpu(c, go)
            time.sleep(1)
            got = c.stop()
        finally:
            c.kill()
    out = summarise("/dev/kmsg", got, t0, t1, cpu, n)
    out.update(write_seconds=round(box["took"], 2), kernel_seq_span=box["s1"] - box["s0"] - 1, ena_lines=len(ena),
               written_lines_per_s=round(n / box["took"]))
    return out


def run_file(n: int = 60000, seconds: float = 3.0) -> dict:
    lines, ena = flood(n)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "kmsg.txt")
        up = time.clock_gettime(time.CLOCK_MONOTONIC)
        with open(path, "w") as f:
            f.write(f"6,0,{int(up * 1e6)},-;nodesleuth-flood: file begins\n")
        c = Consumers(d, kmsg=path)
        try:
            box = {}
            t0, t1, cpu = _flood_cpu(c, lambda: box.update(took=to_file(path, lines, seconds)))
            deadline = time.time() + 30  # until both caught up with the file (or 30 s)
            while time.time() < deadline and metrics(c.port).get("nodesleuth_kernel_log_records_total", 0) < n + 1:
                time.sleep(0.5)
            got = c.stop()
        finally:
            c.kill()
    out = summarise("file (--kmsg)", got, t0, t1, cpu, n)
    out.update(write_seconds=round(box["took"], 2), ena_lines=len(ena))
    return out


def main(argv: list[str] | None = None) -> dict:
    if os.geteuid() != 0:
        return {"benchmark": "kmsg_flood", "skipped": "needs root (/dev/kmsg, printk_devkmsg)"}
    res = {"benchmark": "kmsg_flood", "flood": "60,000 lines in 3 s", "kernel": os.uname().release,
           "cpus": os.cpu_count()}
    res["devkmsg"] = run_devkmsg()
    res["file"] = run_file()
    return res


if __name__ == "__main__":
    out = main(sys.argv[1:])
    print(json.dumps(out, indent=1))
    if "skipped" not in out:
        with open(os.path.join(ROOT, "benchmarks", "results", "kmsg_flood.json"), "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
