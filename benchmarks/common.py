"""Helpers shared by the benchmarks: child CPU/RSS via wait4, machine description, result files."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time


def run_measured(cmd: list[str], **kw) -> dict:
    """Run a command to completion; CPU seconds and peak RSS come from the kernel (wait4)."""
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kw)
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    return {"cmd": " ".join(cmd[:6]), "wall_s": round(time.time() - t0, 3), "cpu_s": round(ru.ru_utime + ru.ru_stime, 4),
            "user_s": round(ru.ru_utime, 4), "sys_s": round(ru.ru_stime, 4), "max_rss_mb": round(ru.ru_maxrss / 1024, 1),
            "rc": p.returncode, "stderr": err[-300:]}


class Measured:
    """Start now, measure at finish(): for running several tools side by side."""

    def __init__(self, cmd: list[str], **kw):
        self.cmd = cmd
        self.t0 = time.time()
        self.p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kw)

    def finish(self) -> dict:
        _, status, ru = os.wait4(self.p.pid, 0)
        err = self.p.stderr.read().decode(errors="replace")
        return {"cmd": " ".join(self.cmd[:8]), "wall_s": round(time.time() - self.t0, 3),
                "cpu_s": round(ru.ru_utime + ru.ru_stime, 4), "user_s": round(ru.ru_utime, 4),
                "sys_s": round(ru.ru_stime, 4), "max_rss_mb": round(ru.ru_maxrss / 1024, 1),
                "rc": os.waitstatus_to_exitcode(status), "stderr": err[-300:]}


def machine() -> dict:
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    return {"kernel": platform.release(), "python": platform.python_version(), "cpus": os.cpu_count(),
            "cpu_model": cpu, "mem_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30, 1)}


def emit(result: dict, save: bool = True) -> dict:
    result = {**result, "machine": machine(), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(json.dumps(result))
    if save:
        d = os.path.join(os.path.dirname(__file__), "results")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"{result['benchmark']}.json"), "w") as f:
            json.dump(result, f, indent=2)
    return result
