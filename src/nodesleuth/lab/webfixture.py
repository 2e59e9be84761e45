"""A recorded store for the web view's tests and benchmark, built from a 96-CPU fixture node:
ticks and per-minute rollups (CPU 39 pinned for 5 s, then an ENA reset), a perf profile of the
seconds around it, and unit restart counters; and a synthetic 24 h rollup-only day."""

from __future__ import annotations

import os
import random

from ..collect.kmsg import KernelEvent
from ..collect.root import Root
from ..collect.sampler import Sampler
from ..collect.units import Unit
from ..profile.codec import encode
from ..profile.parse import parse_file
from ..store.codec import Encoder
from ..store.rollup import STREAM as ROLLUP, Rollup
from ..store.store import TICKS, StoreWriter
from .fixture import Animator, make_v1_node
from .perfscript import make_capture

T0 = 1_796_000_000.0  # 2026-11-30T...Z: recorded times are fixed so tests can name them


def ecs(n: int) -> Unit:
    return Unit("ecs.service", n, "activating", "auto-restart", "enabled", "exit-code", 1, 0, "on-failure",
                10_000_000, "/lib/systemd/system/ecs.service", "/system.slice/ecs.service")


def build(workdir: str, seconds: int = 180, hot_from: int = 100, hot_len: int = 5, cpus: int = 96) -> dict:
    node = make_v1_node(os.path.join(workdir, "node"), ncpu=cpus, nprocs=120)
    store = os.path.join(workdir, "store")
    w = StoreWriter(store)
    anim = Animator(node, busy_pid=100)  # pid 100 is the fixture's kubelet
    s = Sampler(Root(node), kmsg=False, irqs=True)
    s.prime()
    enc, roll = Encoder(), Rollup()
    reset_t = T0 + hot_from + hot_len + 0.4
    for i in range(seconds):
        anim.busy_cpu = 39 if hot_from <= i < hot_from + hot_len else None
        anim.step()
        tk = s.tick()
        tk.time, tk.interval = T0 + i + 1, 1.0
        tk.units = [ecs(100 + i // 12)]
        if i == hot_from + hot_len:
            tk.events = [KernelEvent(900 + k, reset_t, 0, reason, kind, "critical", "ena", "eth0", msg, rr, f)
                         for k, (reason, kind, msg, rr, f) in enumerate([
                             ("ENATxQueuePaused", "tx_timeout", "ena 0000:20:03.0 eth0: TX q 0 is paused for too long "
                              "(threshold 5000000). Time since last napi 6596000 usec. napi scheduled: 1",
                              "SUSPECTED_POLL_STARVATION", {"queue": "0", "bus": "0000:20:03.0"}),
                             ("ENADeviceReset", "reset", "ena 0000:20:03.0: Device reset completed successfully, "
                              "Driver info: Elastic Network Adapter (ENA) v2.11.0g", None, {"bus": "0000:20:03.0"})])]
        w.append(TICKS, tk.time, enc.encode(tk))
        done = roll.add(tk)
        if done is not None:
            w.append(ROLLUP, tk.time - 1 - (tk.time - 1) % 60, done)
    last = roll.flush()
    if last is not None:
        w.append(ROLLUP, roll.start, last)
    cap = os.path.join(workdir, "cap.txt")
    facts = make_capture(cap, cpus=cpus, seconds=30, t0=T0 + hot_from - 10, hot_from=10.0, hot_to=10.0 + hot_len,
                         hot_pid=100)
    b = parse_file(cap)
    t, payload = encode(b)
    w.append("profile", t, payload)
    os.unlink(cap)
    w.close()
    return {"store": store, "t0": T0, "hot_start": T0 + hot_from, "hot_end": T0 + hot_from + hot_len,
            "reset": reset_t, "cpus": cpus, "profile": facts}


def build_day(workdir: str, cpus: int = 96, hours: int = 24, seed: int = 3) -> str:
    """A day of per-minute rollups of a 96-CPU node: the input of the day timeline."""
    import orjson

    rng = random.Random(seed)
    store = os.path.join(workdir, "day")
    w = StoreWriter(store, segment_seconds=3600)
    for m in range(hours * 60):
        t = T0 + m * 60
        busy = [rng.randrange(2, 30) for _ in range(cpus)]
        bmax = [min(100, b + rng.randrange(0, 40)) for b in busy]
        ev = []
        if m % 97 == 0:
            bmax[39] = 100
            ev = [[t + 30.5, "ENADeviceReset", "reset", "eth0"]]
        w.append(ROLLUP, t, orjson.dumps({"t": t, "n": 60, "busy": busy, "bmax": bmax,
                                          "sys": [b // 3 for b in busy], "mem": [68680 + m, 240, 68440 + m],
                                          "dying": 68440 + m, "percpu": 1 << 30, "slab": 3 << 30, "ev": ev}))
    w.close()
    return store
