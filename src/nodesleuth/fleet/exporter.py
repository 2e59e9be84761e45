"""Prometheus/OpenMetrics exporter (official prometheus-client), fed by the same 1 Hz sampler.

A background thread samples every `interval` seconds; a custom collector turns the latest state
into metric families at scrape time. Labels follow node_exporter's conventions (`cpu`, `device`,
no instance/job: Prometheus adds those); configuration facts are info metrics (fleet/facts.py).
`/snapshot` is served from a cache refreshed in the background, so only the very first request
waits for a snapshot to be taken.
"""

from __future__ import annotations

import dataclasses
import subprocess
import threading
import time
from collections import Counter

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from ..model.rules import is_nic
from ..node.root import Root
from ..node.wait import serve_until_signalled
from ..collect.sampler import EXPORTER, Sampler
from ..model.records import Tick
from ..model.thresholds import CRASH_LOOP_RESTARTS
from ..node.systemd import enabled_services
from ..detect.incidents import HotCoreTracker, NicGrouper
from ..model.errors import InputError
from ..model.metrics import METRICS, tick_gauges
from ..model.memcg_ids import node_rule as memcg_id_rule
from .facts import info_series, labels_of
from .snapshot import host_facts, unit_dicts


class State:
    """What the sampler thread last saw, plus counts since the exporter started."""

    def __init__(self):
        self.lock = threading.Lock()
        self.tick: Tick | None = None  # the last full tick (every FULL_EVERY s)
        self.fast: Tick | None = None  # the last 1 Hz tick: /proc/stat alone (its CPUs replace the full tick's)
        self.kernel_log = None  # the kernel log's counts, read every second with its events (replace the full tick's)
        self.hot: dict[int, tuple[float, float | None]] = {}  # cpu -> (hot seconds, others' busy %)
        self.kernel_events: Counter = Counter()  # (device, reason) -> n
        self.incidents: Counter = Counter()  # kind -> n
        self.units: dict[str, tuple[int, bool]] = {}
        self.nics = []
        self.samples = 0
        self.errors = 0
        self.facts: dict = {}  # snapshot.host_facts without units, refreshed every FACTS_EVERY s
        self.unit_objs = []  # collect.units.Unit, from the sampler
        self.enabled: list[str] = []  # enabled services (list-unit-files costs PID 1: every ENABLED_EVERY s)
        self.posture = None  # model.records.ZombiePosture, taken once (collect/posture.py)
        self.probes = None  # collect.probe_state.Stored: the probes' results of this boot, where they came from
        self.memcg_ids = None  # (IdRule | None, SwapTotal KiB | None): the memcg-ID gauges' rule (model/memcg_ids.py)


class NodesleuthCollector(Collector):
    def __init__(self, state: State, profile=None):
        self.state = state
        self.profile = profile  # ProfileSource or None

    def profile_families(self):
        """nodesleuth_profile_cpu_share_ratio{cpu, family}: every family of every CPU the window saw
        (so a family at 0 is a series at 0, not a missing one), plus the window's length and age."""
        if self.profile is None:
            return
        shares, covered, latest = self.profile.get()
        from ..profile.families import FAMILIES

        g = GaugeMetricFamily("nodesleuth_profile_cpu_share_ratio", METRICS["nodesleuth_profile_cpu_share_ratio"].help,
                              labels=["cpu", "family"])
        for cpu in sorted(shares):
            for fam, v in zip(FAMILIES, shares[cpu]):
                g.add_metric([str(cpu), fam], round(v, 6))
        yield g
        yield GaugeMetricFamily("nodesleuth_profile_window_seconds", METRICS["nodesleuth_profile_window_seconds"].help,
                                value=covered)
        if latest is not None:
            yield GaugeMetricFamily("nodesleuth_profile_age_seconds", METRICS["nodesleuth_profile_age_seconds"].help,
                                    value=round(max(0.0, time.time() - latest), 3))
        if self.profile.runner is not None:
            yield CounterMetricFamily("nodesleuth_profile_samples", METRICS["nodesleuth_profile_samples"].help,
                                      value=self.profile.shares.samples)

    def collect(self):
        st = self.state
        with st.lock:
            tk, fast, klog, hot = st.tick, st.fast, st.kernel_log, dict(st.hot)
            events, incidents = Counter(st.kernel_events), Counter(st.incidents)
            units, nics = dict(st.units), list(st.nics)
            samples, errors = st.samples, st.errors
            fdoc = {**st.facts, "units": unit_dicts(st.unit_objs, st.enabled)} if st.facts else None
            for d in fdoc["units"] if fdoc else ():
                d["crash_looping"] = d["crash_looping"] or st.units.get(d["unit"], (0, False))[1]
            post = st.posture
            ids = st.memcg_ids
        if post is not None:
            yes = {True: "true", False: "false", None: "unknown"}
            pi = InfoMetricFamily("nodesleuth_zombie_posture", METRICS["nodesleuth_zombie_posture"].help, labels=[])
            pi.add_metric([], {"kernel": post.kernel[:128], "hierarchy": post.hierarchy,
                               "reparents_lru": yes[post.reparents_lru], "nr_dying_subsys": yes[post.nr_dying_subsys],
                               "accumulate": yes[post.accumulate]})
            yield pi
        if fdoc:
            info: dict[str, InfoMetricFamily] = {}
            for name, vals in info_series(fdoc):
                if name not in info:
                    info[name] = InfoMetricFamily(name, METRICS[name].help, labels=[])
                info[name].add_metric([], labels_of(name, vals))
            yield from info.values()
        yield from self.profile_families()
        yield CounterMetricFamily("nodesleuth_samples", METRICS["nodesleuth_samples"].help, value=samples)
        yield CounterMetricFamily("nodesleuth_sample_errors", METRICS["nodesleuth_sample_errors"].help, value=errors)
        if tk is None:
            return
        if fast is not None and fast.cpu:  # the CPUs' gauges are the last second's, as before
            tk = dataclasses.replace(tk, cpu=fast.cpu, cpu_raw=fast.cpu_raw)
        if klog is not None:
            tk = dataclasses.replace(tk, kernel_log=klog)
        fams: dict[str, GaugeMetricFamily] = {}
        for name, labels, value in tick_gauges(tk, hot, ids):
            f = fams.get(name)
            if f is None:
                m = METRICS[name]
                kind = CounterMetricFamily if m.type == "counter" else GaugeMetricFamily
                f = fams[name] = kind(name, m.help, labels=list(m.labels) or None)
            f.add_metric(list(labels), value)
        yield from fams.values()
        def counter(name):
            return CounterMetricFamily(name, METRICS[name].help, labels=list(METRICS[name].labels))

        resets = counter("nodesleuth_nic_driver_resets")
        for n in nics:
            for k, v in n.resets().items():
                resets.add_metric([n.ifname, k], v)
        yield resets
        kev = counter("nodesleuth_nic_kernel_events")
        for (dev, reason), n in sorted(events.items()):
            kev.add_metric([dev, reason], n)
        yield kev
        ur = counter("nodesleuth_unit_restarts")
        ul = GaugeMetricFamily("nodesleuth_unit_crash_looping", METRICS["nodesleuth_unit_crash_looping"].help,
                               labels=["unit"])
        for u, (n, loop) in sorted(units.items()):
            ur.add_metric([u], n)
            ul.add_metric([u], 1.0 if loop else 0.0)
        yield ur
        yield ul
        inc = counter("nodesleuth_incidents")
        for k in ("hot_core", "nic_reset"):
            inc.add_metric([k], incidents.get(k, 0))
        yield inc


class ProfileSource:
    """The exporter's profile shares: its own profiler (`run`: the direct ring-buffer reader, or perf
    record where that cannot run; nothing stored) or a recorder's store (`--profile DIR`: its raw
    profile batches, re-read at most every few seconds)."""

    def __init__(self, spec: str, window: float = 60.0, freq: int = 49, log=print, root: Root = Root("/")):
        from ..profile.families import CpuShares, StoreShares

        self.runner = None
        self.store = None
        if spec == "run":
            from ..profile.runner import ProfileRunner

            self.shares = CpuShares(window)
            # batches every 5 s: the shares lag the CPUs by at most that
            self.runner = ProfileRunner(None, freq=freq, rotate=5.0, store=False, root=root,
                                        on_batch=self.shares.add_batch, say=lambda m: log(f"nodesleuth: {m}"))
        else:
            import os

            if not os.path.isdir(spec):
                raise InputError(spec, "--profile wants `run` or a recorder's store directory")
            self.store = StoreShares(spec, window)

    def start(self) -> None:
        if self.runner is not None and not self.runner.start():
            raise InputError("profiler", self.runner.error or "cannot start")

    def get(self):
        if self.store is not None:
            return self.store.get()
        sh, covered = self.shares.shares()
        return sh, covered, self.shares.latest

    def stop(self) -> None:
        if self.runner is not None:
            self.runner.stop()


FACTS_EVERY = 60.0
ENABLED_EVERY = 600.0
# seconds between full ticks (processes, cgroups, NICs, TCP, vmstat, softnet, hogs, kube, units, ...); every
# second between them reads /proc/stat alone for the hot-core rule and the per-CPU gauges. A full tick's
# sections cover the time since the previous one (counters are the kernel's totals either way). One full
# tick per Prometheus scrape interval (15 s): the 1 Hz full tick cost ~9x node_exporter's CPU (docs/self-cost.md)
FULL_EVERY = 15.0


class SamplerThread(threading.Thread):
    def __init__(self, root: Root, state: State, interval: float = 1.0, ns_pid: int | None = None,
                 kmsg: bool | str = True, zone: str | None = None, state_dir: str | None = None, log=None,
                 full_every: float = FULL_EVERY):
        super().__init__(daemon=True, name="nodesleuth-exporter")
        from ..collect.probe_state import STATE_DIR

        self.state_dir = state_dir or STATE_DIR  # the probes' results of this boot (collect/probe_state.py)
        self.log = log or (lambda m: None)
        self.state = state
        self.root, self.ns_pid, self.zone = root, ns_pid, zone
        self.facts_t = self.enabled_t = -1e18
        self.interval = interval
        self.full_every = full_every
        self.full_t = -1e18  # monotonic time of the last full tick: the first step takes one
        self.sampler = Sampler.preset(root, EXPORTER, kmsg=kmsg, ns_pid=ns_pid)
        self.stop_ev = threading.Event()
        self.tracker = HotCoreTracker()  # the incident rule of detect/incidents.py, fed live
        self.grouper = NicGrouper(keep=False)
        state.memcg_ids = memcg_id_rule(root.read_opt("/proc/sys/kernel/osrelease"), root.read_opt("/proc/meminfo"))

    def refresh_facts(self) -> None:
        """Configuration facts for the info metrics; a failed read keeps the last good facts and counts."""
        now = time.monotonic()
        try:
            if now - self.enabled_t >= ENABLED_EVERY:
                self.enabled_t = now
                enabled = enabled_services(self.root, self.ns_pid)
                with self.state.lock:
                    self.state.enabled = enabled
            if now - self.facts_t >= FACTS_EVERY:
                self.facts_t = now
                doc = host_facts(self.root, self.zone, [])
                doc.pop("units")
                with self.state.lock:
                    self.state.facts = doc
        except (InputError, OSError, ValueError, subprocess.SubprocessError):
            with self.state.lock:
                self.state.errors += 1

    def step(self) -> None:
        """Every second /proc/stat (the hot-core rule, the per-CPU gauges) and the kernel log's new events; every
        full_every s all the rest."""
        fast = self.sampler.cpu_tick()
        events = self.sampler.kernel_events(fast.interval)  # every second, as the incident of a NIC reset needs
        klog = self.sampler.section_now("kernel_log", fast.interval)  # its read/dropped totals with those events
        tk = None
        now = time.monotonic()
        if now - self.full_t >= self.full_every - 0.5 * self.interval:
            self.full_t = now
            tk = self.sampler.tick()
        self.refresh_facts()
        st = self.state
        closed = self.tracker.feed(fast)
        with st.lock:
            # an episode counts when it ends and qualified (others < 60% over it), as check and explain say
            st.incidents["hot_core"] += len(closed)
            st.hot = self.tracker.gauges(fast)
            st.fast = fast
            st.kernel_log = klog
            self._count(events)
            if tk is not None:
                if tk.nics is not None:
                    st.nics = tk.nics
                self._count(tk.events)
                if tk.units is not None:
                    st.units = {u.id: (u.n_restarts, self._looping(u, st.units.get(u.id))) for u in tk.units}
                    st.unit_objs = list(tk.units)
                st.tick = tk
            st.samples += 1

    @staticmethod
    def _looping(u, before: tuple[int, bool] | None) -> bool:
        """A unit is crash-looping when systemd says so now, or when it has restarted often
        (CRASH_LOOP_RESTARTS) and again since the last full tick: a unit that fails within milliseconds
        and restarts after 200 ms is "running" for a moment, and a tick that lands there must not report it
        healthy (the container's and the host's exporter disagreed on the same unit in CI)."""
        return u.crash_looping or (before is not None and u.n_restarts > before[0]
                                   and u.n_restarts >= CRASH_LOOP_RESTARTS)

    def _count(self, events) -> None:
        """Caller holds the lock. Lines of one reset come within 5 s: one incident."""
        st = self.state
        bus_if = {n.bus: n.ifname for n in st.nics or [] if n.bus}
        for e in sorted(events, key=lambda e: e.time):
            if is_nic(e):
                bus = e.fields.get("bus", "")
                st.kernel_events[(e.ifname or bus_if.get(bus) or bus or "?", e.reason)] += 1
                if self.grouper.add(e):
                    st.incidents["nic_reset"] += 1

    def _posture(self) -> None:
        """Once, on its own thread, a few seconds after start: the kernel's zombie posture and what one
        memcg costs, from the probes' state of this boot (collect/probe_state.py); when this boot has
        none, both probes run now (unless a guard holds) and their result is kept for every later
        check and exporter start: the fleet can then ask which nodes' kernels keep zombies at all."""
        from ..collect import posture, probe_state

        try:
            p = posture.read(self.root)
            stored, note = probe_state.load(self.root, self.state_dir) if self.root.live else (None, None)
            if stored is None and self.root.live:
                stored, why = probe_state.measure(self.root, self.state_dir)
                note = (why or note) if stored is None else why
            if stored is not None:
                p.probe, p.problem = stored.posture, stored.posture_problem
                self.log(f"nodesleuth exporter: memcg cost and zombie posture from {stored.source()}")
            else:
                p.problem = note or "probe not run (a recorded tree)"
            if note:
                self.log(f"nodesleuth exporter: {note}")
        except (InputError, OSError):
            with self.state.lock:
                self.state.errors += 1
            return
        with self.state.lock:
            self.state.posture = p
            self.state.probes = stored

    def run(self) -> None:
        old = self.sampler.prime()  # what the kernel ring still holds counts too (NPD's lookback)
        # a daemon: SIGTERM must not wait for a probe that has only begun (the kubelet's grace period ended
        # in SIGKILL, exit 137, in CI); cgroupfs's exit handler stops its maker and removes its trees
        probe = threading.Timer(5.0, self._posture)
        probe.daemon = True
        probe.start()
        with self.state.lock:
            self.state.nics = self.sampler.primed.get("nics") or []
            self._count(old)
        while not self.stop_ev.wait(self.interval):
            try:
                self.step()
            except Exception:  # keep serving the last good state; count the failure
                with self.state.lock:
                    self.state.errors += 1


class SnapshotCache:
    """The last snapshot, served at once; a stale one is served while a fresh one is taken in the
    background (taking one samples for seconds). Only a request before the first snapshot waits."""

    def __init__(self, take, max_age: float = 60.0):
        self.take, self.max_age = take, max_age
        self.doc: bytes | None = None
        self.t = 0.0
        self.lock = threading.Lock()  # held while taking one
        self.refreshing = False

    def _refresh(self) -> None:
        try:
            doc = self.take()
            self.doc, self.t = doc, time.monotonic()
        finally:
            self.refreshing = False
            self.lock.release()

    def warm(self) -> None:
        """Take the first snapshot in the background (the exporter does this at start)."""
        if self.lock.acquire(blocking=False):
            self.refreshing = True
            threading.Thread(target=self._refresh, daemon=True, name="nodesleuth-snapshot").start()

    def get(self) -> tuple[bytes, float]:
        """(document, age in seconds)."""
        if self.doc is None:
            with self.lock:  # wait for the one being taken, or take it
                if self.doc is None:
                    self.doc, self.t = self.take(), time.monotonic()
        elif time.monotonic() - self.t > self.max_age and not self.refreshing:
            self.warm()
        return self.doc, time.monotonic() - self.t


def serve(root: str, listen: str, interval: float, zone: str | None, systemd_pid: int | None,
          kmsg: str | None, log=print, profile: str | None = None, profile_window: float = 60.0,
          profile_freq: int = 49, state_dir: str | None = None) -> None:
    """The exporter's HTTP server: /metrics (prometheus-client's WSGI app) and /snapshot (cached).
    profile: `run` (profile this host here) or a recorder's store: per-CPU code-family shares."""
    import json
    import os
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    from prometheus_client import CollectorRegistry, make_wsgi_app

    from . import snapshot as snap

    r = Root(root)
    state = State()
    kmsg_src = kmsg or (r.exists("/dev/kmsg") and os.access(r.join("/dev/kmsg"), os.R_OK))
    th = SamplerThread(r, state, interval, systemd_pid, kmsg_src, zone, state_dir, log)
    th.refresh_facts()  # the info metrics are there from the first scrape
    th.start()
    source = None
    if profile:
        source = ProfileSource(profile, profile_window, profile_freq, log, r)
        source.start()
        log(f"nodesleuth exporter: profile shares over {profile_window:g} s from "
            + ("this host's profiler (" + source.runner.method + ")" if source.runner else profile))
    reg = CollectorRegistry()
    reg.register(NodesleuthCollector(state, source))
    metrics = make_wsgi_app(reg)
    snaps = SnapshotCache(lambda: json.dumps(snap.take(r, 1.0, systemd_pid, zone)).encode())
    snaps.warm()

    def app(environ, start_response):
        if environ.get("PATH_INFO") == "/snapshot":
            try:
                body, age = snaps.get()
            except InputError as e:
                start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
                return [f"cannot take a snapshot: {e}\n".encode()]
            start_response("200 OK", [("Content-Type", "application/json"), ("Age", str(int(age)))])
            return [body]
        if environ.get("PATH_INFO") in ("/metrics", "/"):
            return metrics(environ, start_response)
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found: try /metrics or /snapshot\n"]

    class Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True

    class Quiet(WSGIRequestHandler):
        def log_message(self, *a):
            pass

    host, _, port = listen.rpartition(":")
    if host not in ("127.0.0.1", "localhost", "::1", "[::1]"):
        log(f"nodesleuth: serving metrics on {listen}, reachable from the network")
    try:
        httpd = make_server(host.strip("[]") or "127.0.0.1", int(port), app, server_class=Server, handler_class=Quiet)
    except OSError as e:
        raise InputError(listen, f"cannot listen: {e.strerror or e}") from None
    log(f"nodesleuth exporter on http://{listen}/metrics")
    # a request wakes the server; the poll interval is only how soon a shutdown() would be seen, and nothing
    # calls it (the process ends): socketserver's 0.5 s woke it twice a second for nothing (~50 us each here).
    # It serves on a thread of its own: the main thread waits for SIGTERM whichever thread the kernel gives it
    serve_until_signalled(lambda: httpd.serve_forever(poll_interval=60.0), "nodesleuth-http")
