"""Error paths, each with its one-line message and exit code (never a traceback): the web API's answers to
every bad parameter of every endpoint, `fleet --prometheus` against servers that fail in each way, the lab's
refusals and failures, and `remedy --apply` when systemctl fails."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest

from conftest import Busy, free_port, missing, needs_root, nodesleuth, retry_when_busy

HERE = os.path.dirname(os.path.abspath(__file__))


def one_line_error(p: subprocess.CompletedProcess, *parts: str, code: int = 2, progress: str = "") -> str:
    """Exit `code`, stderr one line `nodesleuth: error: ...` holding every part, no traceback. With `progress`,
    the lines before it are the command's own log (each starting so), the error the last."""
    lines = p.stderr.strip().splitlines()
    assert p.returncode == code, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    assert "Traceback" not in p.stderr and lines, p.stderr
    assert len(lines) == 1 or (progress and all(ln.startswith(progress) for ln in lines[:-1])), p.stderr
    err = lines[-1]
    assert err.startswith("nodesleuth: error: "), err
    for s in parts:
        assert s in err, (s, err)
    return err


# --- the web API: 400 with {"error": sentence} for every bad parameter --------------------------------------

@pytest.fixture(scope="module")
def web(tmp_path_factory):
    from fixtures.webstore import build
    from nodesleuth.web.server import create_app

    rec = build(str(tmp_path_factory.mktemp("web400")), seconds=60, hot_from=30, cpus=8)
    app = create_app(rec["store"])
    return app.test_client(), rec["hot_start"]


T = "{t}"  # the hot episode's start, filled in per request
BAD = [  # endpoint?query, what the sentence says
    ("timeline?from=abc", "from must be a number, not 'abc'"),
    ("timeline?from=nan&to={t}", "from must be a finite number, not 'nan'"),
    ("timeline?from={t}&to=inf", "to must be a finite number, not 'inf'"),
    ("timeline?from={t}&to={t0}", "must be before to"),
    ("timeline?from={late}", "must be before to"),  # after the recording's end
    ("timeline?cols=many", "cols must be an integer, not 'many'"),
    ("timeline?cols=nan", "cols must be an integer, not 'nan'"),
    ("timeline?cols=1e400", "cols must be an integer, not '1e400'"),
    ("timeline?from={t0}&to={t}&metric=bogus", "metric must be one of busy, mean, sys, not 'bogus'"),
    ("heatmap", "from and to are required"),
    ("heatmap?from={t}", "from and to are required"),
    ("heatmap?from={t}&to={t0}", "must be before to"),
    ("heatmap?from={t}&to={day}", "from/to at most one day apart"),
    ("heatmap?from={t0}&to={t}&cpu=x", "cpu must be an integer, not 'x'"),
    ("heatmap?from={t0}&to={t}&cpu=-1", "cpu must be at least 0"),
    ("heatmap?from={t0}&to={t}&rows=0", "rows must be between 1 and 1000"),
    ("heatmap?from={t0}&to={t}&rows=-5", "rows must be between 1 and 1000"),
    ("heatmap?from={t0}&to={t}&rows=100000", "rows must be between 1 and 1000"),
    ("heatmap?from={t0}&to={t}&cols=nan", "cols must be an integer, not 'nan'"),
    ("flame", "from and to are required"),
    ("flame?from={t}&to={t}", "must be before to"),
    ("flame?from={t0}&to={t}&cpu=1.5", "cpu must be an integer, not '1.5'"),
    ("flame?from={t0}&to={t}&cpu=-1", "cpu must be at least 0"),
    ("flame?from={t0}&to={t}&pid=abc", "pid must be an integer, not 'abc'"),
    ("flame?from={t0}&to={t}&cgroup=/nodesleuth-no-such-cgroup", "cgroup /nodesleuth-no-such-cgroup: no such cgroup"),
    ("flame?from={t0}&to={t}&depth=deep", "depth must be an integer, not 'deep'"),
    ("flame?from={t0}&to={t}&depth=0", "depth must be at least 1"),
    ("flame?from={t0}&to={t}&min_share=nan", "min_share must be a finite number, not 'nan'"),
    ("flame?from={t0}&to={t}&min_share=2", "min_share must be between 0 and 1"),
    ("flame?from={t0}&to={t}&min_share=-0.1", "min_share must be between 0 and 1"),
    ("flame?from={t0}&to={t}&base_from=x&base_to={t}", "base_from must be a number, not 'x'"),
    ("cell", "cpu and t are required"),
    ("cell?cpu=1", "cpu and t are required"),
    ("cell?cpu=nan&t={t}", "cpu must be an integer, not 'nan'"),
    ("cell?cpu=1&t=x", "t must be a number, not 'x'"),
    ("cell?cpu=1&t=nan", "t must be a finite number, not 'nan'"),
    ("cell?cpu=1&t={t}&resolution=0", "resolution must be at least 1"),
    ("cell?cpu=1&t={t}&resolution=fine", "resolution must be an integer, not 'fine'"),
]


def _url(q: str, t: float) -> str:
    return "/api/" + q.format(t=t, t0=t - 20, late=t + 10 * 86400, day=t + 86401)


@pytest.mark.parametrize("query,says", BAD, ids=[q for q, _ in BAD])
def test_web_api_bad_parameter_is_a_400_with_a_sentence(web, query, says):
    client, t = web
    r = client.get(_url(query, t))
    assert r.status_code == 400, (r.status_code, r.data[:300])
    assert r.is_json and says in r.get_json()["error"], r.data


def test_web_api_good_parameters_still_answer(web):
    """The checks refuse only what is wrong: the same endpoints with sound values answer 200."""
    client, t = web
    for q in ("summary", "timeline", "timeline?from={t0}&to={t}&cols=100&metric=sys", "heatmap?from={t0}&to={t}&rows=10",
              "heatmap?from={t0}&to={t}&cpu=7", "flame?from={t0}&to={t}&cpu=3&depth=8&min_share=0.01",
              "cell?cpu=1&t={t}&resolution=60", "incidents"):
        r = client.get(_url(q, t))
        assert r.status_code == 200, (q, r.data[:300])


def test_web_api_reversed_baseline_is_refused_with_422(web):
    """A baseline that cannot be drawn is a 422 (the request is well formed, its answer would be untrue)."""
    client, t = web
    r = client.get(_url("flame?from={t0}&to={t}&base_from={t}&base_to={t0}", t))
    assert r.status_code == 422 and r.get_json()["error"] == "baseline: give base_from < base_to"


# --- fleet --prometheus: every way the server or the question can fail --------------------------------------

@pytest.fixture(scope="module")
def tsdb(tmp_path_factory):
    """A real Prometheus over 200 hosts' info metrics and incident counters (fixtures/fleetgen.py, written by
    promtool), whose series name their host by a `node` label instead of `instance`; and a real Prometheus
    with no data at all."""
    if not shutil.which("prometheus") or not shutil.which("promtool"):
        missing("prometheus/promtool are not installed (scripts/setup-tests.sh)")
    sys.path.insert(0, HERE)
    from fixtures.fleetgen import build_tsdb, make_fleet, serve_tsdb, write_openmetrics

    d = tmp_path_factory.mktemp("tsdb-node")
    at = float(int(time.time()) - 7200)
    snaps = make_fleet(200)
    om = str(d / "fleet.om")
    write_openmetrics(om, snaps, at, twice_every=0)
    with open(om) as f:
        text = f.read().replace('instance="', 'node="')
    with open(om, "w") as f:
        f.write(text)
    build_tsdb(om, str(d / "data"))
    full, empty = free_port(), free_port()
    os.makedirs(d / "empty")
    procs = [serve_tsdb(str(d / "data"), full), serve_tsdb(str(d / "empty"), empty)]
    yield {"url": f"http://127.0.0.1:{full}", "empty": f"http://127.0.0.1:{empty}", "at": str(at),
           "affected": sum(s["health"]["problem"] for s in snaps)}
    for p in procs:
        p.terminate()
        p.wait()


def test_fleet_host_label_names_the_hosts(tsdb):
    """--host-label node: the 200 hosts are counted by it; with the default (instance) the one-line error says
    the series carry no such label and names the option."""
    p = nodesleuth("fleet", "--prometheus", tsdb["url"], "--time", tsdb["at"], "--host-label", "node", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert (doc["hosts"], doc["affected"], doc["healthy"]) == (200, tsdb["affected"], 200 - tsdb["affected"])
    assert len(doc["affected_hosts"]) == tsdb["affected"] and all(h.endswith(":9846") for h in doc["affected_hosts"])
    assert doc["expression"].startswith("max by (node) (")
    one_line_error(nodesleuth("fleet", "--prometheus", tsdb["url"], "--time", tsdb["at"]),
                   "--host-label instance:", "carry no 'instance' label", "pass --host-label")


FLEET_BAD = [  # extra arguments, what the one line says
    (["--affected", "sum(nodesleuth_node_info)"], "must keep the 'node' label (e.g. max by (node) (...))"),
    (["--affected", "nodesleuth_node_info[5m]"], "expected an instant vector, got a matrix"),
    (["--affected", "sum("], "refused the query"),
    (["--affected", 'max by (node) (nodesleuth_node_info{zone="nowhere"})'], "no affected host among 200"),
    (["--affected", "max by (node) (nodesleuth_node_info)"], "no healthy host among 200"),
    (["--group-by", "rack"], "rack: cannot group by it: use one of zone"),
    (["--time", "yesterday-ish"], "yesterday-ish: not a time"),
    (["--concurrency", "4"], "--concurrency: only with snapshot sources"),
    (["--retries", "0"], "--retries: only with snapshot sources"),
    (["/var/tmp"], "give either snapshot sources or --prometheus, not both"),
]


@pytest.mark.parametrize("extra,says", FLEET_BAD, ids=[" ".join(e)[:40] for e, _ in FLEET_BAD])
def test_fleet_prometheus_question_errors(tsdb, extra, says):
    args = ["fleet", "--prometheus", tsdb["url"], "--host-label", "node"] + (
        [] if "--time" in extra else ["--time", tsdb["at"]])
    one_line_error(nodesleuth(*args, *extra), says)


def test_fleet_prometheus_with_no_nodesleuth_series(tsdb):
    one_line_error(nodesleuth("fleet", "--prometheus", tsdb["empty"]), tsdb["empty"],
                   "no host exports nodesleuth_node_info: is the nodesleuth exporter scraped?")


def test_fleet_prometheus_unreachable():
    url = f"http://127.0.0.1:{free_port()}"
    one_line_error(nodesleuth("fleet", "--prometheus", url), url, "cannot query Prometheus:", "Connection refused")


class _Stub(http.server.BaseHTTPRequestHandler):
    """A server on the Prometheus URL that is not one: answers HTML, or a 502 from a proxy."""

    def do_POST(self):
        if self.server.mode == "html":
            body = b"<html><body>Grafana login</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
        else:
            body = b"<html>502 Bad Gateway</html>"
            self.send_response(502)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.mark.parametrize("mode,says", [("html", "not a Prometheus HTTP API answer (expected JSON from /api/v1/query"),
                                       ("502", "refused the query: HTTP Error 502: Bad Gateway")])
def test_fleet_prometheus_url_that_is_not_prometheus(mode, says):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    srv.mode = mode
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        one_line_error(nodesleuth("fleet", "--prometheus", f"http://127.0.0.1:{srv.server_port}"), says)
    finally:
        srv.shutdown()
        srv.server_close()


def test_fleet_prometheus_that_never_answers_times_out():
    """A server that accepts the connection and never answers: --timeout bounds each query, and the line says
    how long it waited."""
    with socket.socket() as stalled:
        stalled.bind(("127.0.0.1", 0))
        stalled.listen(16)
        url = f"http://127.0.0.1:{stalled.getsockname()[1]}"
        t = time.monotonic()
        p = nodesleuth("fleet", "--prometheus", url, "--timeout", "2", timeout=60)
        took = time.monotonic() - t
    one_line_error(p, url, "Prometheus did not answer in 2 s (fleet --timeout)")
    assert took < 30  # bounded by --timeout (2 s per query, at most a few in flight), not the 130 s default


@pytest.mark.parametrize("args,says", [
    (["--affected", "up"], "--affected: only with --prometheus"),
    (["--time", "1h ago"], "--time: only with --prometheus"),
    (["--host-label", "node"], "--host-label: only with --prometheus"),
])
def test_fleet_prometheus_options_refused_with_snapshots(tmp_path, args, says):
    one_line_error(nodesleuth("fleet", str(tmp_path), *args), says)


def test_fleet_without_sources():
    one_line_error(nodesleuth("fleet"), "give snapshot sources (directories, files, URLs) or --prometheus URL")


# --- the lab: every refusal and failure is one line, exit 2, and says what to do ---------------------------

LAB = "/var/lib/nodesleuth-lab-errors"  # on disk (the namespace's systemd has a private /tmp)


@pytest.fixture
def labdir():
    """A workdir for a lab run that is expected to fail; whatever the run made is undone by `lab clean` (run
    only when the workdir exists: clean also resets the lab's cgroups, which another lab on this host uses).
    Its exit code is not asserted here: other jobs on a shared host make memory cgroups too (tested below)."""
    from conftest import memcg

    if os.path.exists(LAB):
        nodesleuth("lab", "clean", "--workdir", LAB)
    yield LAB
    if os.path.exists(LAB):
        nodesleuth("lab", "clean", "--workdir", LAB)
    assert not os.path.exists(LAB)
    assert not os.path.exists(os.path.join(memcg().mount, "nodesleuth-lab"))


def _py_hidden_in(d: str) -> tuple[str, dict]:
    """This interpreter hard-linked into `d` (PYTHONHOME points it at its library): the same Python, at a
    path the lab's systemd namespace does not see (its /var/log/journal and /var/tmp are its own)."""
    os.makedirs(d, exist_ok=True)
    py = os.path.join(d, "python3")
    real = os.path.realpath(sys.executable)
    try:
        os.link(real, py)
    except OSError as e:
        pytest.fail(f"cannot hard-link {real} into {d}: {e}", pytrace=False)
    env = {**os.environ, "PYTHONHOME": sys.base_prefix,
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))}
    return py, env


def _lab(*args: str, py: str | None = None, env: dict | None = None, wrap: list[str] | None = None,
         timeout: float = 600) -> subprocess.CompletedProcess:
    cmd = (wrap or []) + [py or sys.executable, "-m", "nodesleuth", "lab", "run", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


@needs_root
def test_lab_needs_root():
    """In a user namespace the process is not root (euid 65534): refused before anything is made."""
    p = _lab("--workdir", LAB, wrap=["unshare", "--user"])
    one_line_error(p, "lab run: the lab needs root (cgroups, a PID namespace, perf, /dev/kmsg)")
    assert not os.path.exists(LAB)


@needs_root
def test_lab_needs_the_memory_controller():
    """A mount namespace where no cgroup hierarchy is mounted (v1 or v2: everything under /sys/fs/cgroup is
    unmounted there, and the lab reads the mount table)."""
    p = _lab("--workdir", LAB, wrap=["unshare", "--mount", "--propagation", "private", "sh", "-c",
                                     'umount -R /sys/fs/cgroup && exec "$0" "$@"'])
    one_line_error(p, "lab run: /sys/fs/cgroup: no cgroup v1 memory hierarchy and no v2 memory controller",
                   "the lab needs the memory controller (cgroup v1 or v2)")


@needs_root
def test_lab_refuses_swap(tmp_path):
    """/proc/meminfo saying SwapTotal > 0 (bound over the real one in a mount namespace: the lab reads the file)."""
    fake = tmp_path / "meminfo"
    with open("/proc/meminfo") as f:
        fake.write_text("".join(ln if not ln.startswith("SwapTotal:") else "SwapTotal:        2097148 kB\n"
                                for ln in f))
    p = _lab("--workdir", LAB, wrap=["unshare", "--mount", "--propagation", "private", "sh", "-c",
                                     f'mount --bind {fake} /proc/meminfo && exec "$0" "$@"'])
    one_line_error(p, "lab run: swap is on: tmpfs-pinned zombies would be swapped out and freed")


@needs_root
@pytest.mark.parametrize("where", ["/tmp/nodesleuth-lab", "/var/tmp/nodesleuth-lab"])
def test_lab_refuses_a_private_tmp_workdir(where):
    one_line_error(_lab("--workdir", where), f"lab run: --workdir {where}: the namespace's systemd has a private /tmp")


@needs_root
def test_lab_refuses_a_workdir_on_tmpfs():
    """Reads of a sparse file's holes on tmpfs charge no cgroup: the data loader would reclaim nothing."""
    base = "/var/lib/nodesleuth-tmpfs-test"
    os.makedirs(base, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "nodesleuth-test", base], check=True)
    try:
        one_line_error(_lab("--workdir", f"{base}/lab"), f"lab run: --workdir {base}/lab is on tmpfs",
                       "charged to no cgroup", "use a disk filesystem")
    finally:
        subprocess.run(["umount", base])
        os.rmdir(base)


def test_lab_curve_needs_two_counts():
    for bad in ("5", "a,b", "-1,10", ""):
        one_line_error(_lab("--curve", bad), f"--curve: {bad!r}: two or more zombie counts")


@needs_root
def test_lab_refuses_to_run_over_an_earlier_run(labdir):
    from conftest import memcg

    os.makedirs(labdir)
    with open(os.path.join(labdir, "state.json"), "w") as f:
        json.dump({"workdir": labdir, "cpu": 1, "baseline_tracked": memcg().count(), "started": time.time()}, f)
    one_line_error(_lab("--workdir", labdir), f"{labdir}/state.json exists: run `nodesleuth lab clean --workdir "
                                              f"{labdir}` first")


@needs_root
def test_lab_recorder_that_cannot_start(labdir):
    """The store path is taken by a file: the recorder exits at once and the lab says its last line, then how
    to undo what the run made."""
    os.makedirs(labdir)
    open(os.path.join(labdir, "store"), "w").close()
    p = _lab("--workdir", labdir, "--no-curve", "--no-profile", "--zombies", "100", "--seconds", "1")
    one_line_error(p, "lab run: the recorder exited at once: nodesleuth: error: ", f"{labdir}/store",
                   f"undo what it made: nodesleuth lab clean --workdir {labdir}")


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
@needs_root
def test_lab_unit_that_cannot_exec_its_interpreter(labdir):
    """The lab run by a Python the namespace cannot see (hard-linked into /var/log/journal, a private tmpfs
    in the namespace): systemd fails to exec ecs.service's ExecStart, status 203/EXEC, said at once."""
    made = not os.path.isdir("/var/log/journal")  # the namespace hides it (and /tmp, /var/tmp) when it exists
    if made:
        os.makedirs("/var/log/journal")
    d = "/var/log/journal/nodesleuth-test-py"
    try:
        py, env = _py_hidden_in(d)
        p = _lab("--workdir", labdir, "--no-curve", "--no-profile", "--zombies", "100", "--seconds", "1", py=py, env=env)
    finally:
        shutil.rmtree(d, ignore_errors=True)
        if made:
            os.rmdir("/var/log/journal")
    one_line_error(p, "lab run: ecs.service could not run the agent: exit status 203 (203/EXEC: the namespace "
                      "cannot exec it), result exit-code", f"nodesleuth lab clean --workdir {labdir}")


@needs_root
def test_lab_without_a_python_the_namespace_can_run(labdir):
    """Every interpreter it could give the unit is under /var/tmp or not executable (/usr/bin/python3 hidden by
    /dev/null in a mount namespace, PATH without python3): refused with one line."""
    d = "/var/tmp/nodesleuth-test-py"
    try:
        py, env = _py_hidden_in(d)
        env["PATH"] = "/usr/sbin:/sbin:/bin"  # no python3 there (Debian: /usr/bin/python3 only)
        hide = [f"mount --bind /dev/null {x}" for x in ("/usr/bin/python3", "/usr/local/bin/python3")
                if os.path.exists(x)]
        p = _lab("--workdir", labdir, "--no-curve", "--no-profile", "--zombies", "100", "--seconds", "1", py=py, env=env,
                 wrap=["unshare", "--mount", "--propagation", "private", "sh", "-c",
                       " && ".join(hide + ['exec "$0" "$@"'])])
    finally:
        shutil.rmtree(d, ignore_errors=True)
    one_line_error(p, "lab run: no python3 outside /tmp for the namespace's systemd to run")


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
@needs_root
def test_lab_min_growth_refuses_a_kernel_whose_cost_does_not_grow(labdir):
    """--curve 0,200 --min-growth 1000: the cost curve is measured at 0 and 200 zombies, and no kernel's cost
    grows a thousandfold over 200 memcgs: the lab says it cannot make the incident, with both figures."""
    p = _lab("--workdir", labdir, "--curve", "0,200", "--min-growth", "1000", "--no-profile", "--seconds", "1")
    err = one_line_error(p, "lab run: on this kernel memcg reclaim does not scale with dying memcgs (",
                         " at 0, ", " at 200, under 1000x): the incident cannot be made here", progress="lab: ")
    rows = [ln for ln in p.stderr.splitlines() if "lab: cost of reclaim with" in ln]  # its log, before the line
    assert [int(r.split("with")[1].split()[0]) for r in rows] == [0, 200], p.stderr
    import re

    c0, c1 = (float(x) for x in re.findall(r"\(([\d.]+) ms/MB at 0, ([\d.]+) at 200", err)[0])
    assert c1 < 1000 * max(c0, 0.05)


@needs_root
@pytest.mark.slow
@retry_when_busy(attempts=2, pause=10.0)
def test_lab_zombies_that_do_not_accumulate(labdir):
    """--per-start 0: the unit runs (exits 1, restarts) but leaves no zombies; after a minute without growth the
    lab says where the count stopped."""
    try:
        p = _lab("--workdir", labdir, "--no-curve", "--no-profile", "--per-start", "0", "--zombies", "500",
                 "--restart-sec", "100ms", "--seconds", "1", timeout=240)
    except subprocess.TimeoutExpired:
        # the lab stops after 60 s without growth of the host's memory-cgroup count: other jobs making
        # and removing cgroups meanwhile kept it moving (the lab's own unit makes none)
        nodesleuth("lab", "clean", "--workdir", labdir)
        raise Busy("the host's memory-cgroup count kept moving for 4 minutes (other jobs' cgroups)") from None
    if p.returncode == 0:  # the lab counts the host's memory cgroups: another job's zombies reached 500
        nodesleuth("lab", "clean", "--workdir", labdir)
        raise Busy(f"another job made memory cgroups meanwhile: {p.stdout.strip().splitlines()[-4][:120]}")
    one_line_error(p, "lab run: the zombie count stopped growing at ", " for 60 s, short of 500", progress="lab: ")


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
@needs_root
def test_lab_clean_says_when_the_count_is_not_back(tmp_path):
    """200 real zombies pinned by tmpfs pages that lab clean does not know of (another job's): clean exits 1 and
    says how many memory cgroups more than the baseline are left."""
    from conftest import memcg
    from nodesleuth.lab import zombies as zl
    from nodesleuth.node.cgroupfs import make_zombies

    mc = memcg()
    os.makedirs(LAB, exist_ok=True)
    with open(os.path.join(LAB, "state.json"), "w") as f:  # what lab run writes first: its baseline
        json.dump({"workdir": LAB, "cpu": 1, "baseline_tracked": mc.count(), "started": time.time()}, f)
    pins = str(tmp_path / "pins")
    os.makedirs(pins)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "nodesleuth-test", pins], check=True)
    parent = os.path.join(mc.mount, f"nodesleuth-notback-{os.getpid()}")
    try:
        assert make_zombies(200, parent, pins) == 200
        p = nodesleuth("lab", "clean", "--workdir", LAB)
        assert p.returncode == 1, p.stderr
        line = p.stderr.strip().splitlines()[-1]
        assert "NOT back to baseline: " in line and "more than before the run" in line, p.stderr
        assert int(line.split("NOT back to baseline: ")[1].split()[0]) >= 150
    finally:
        zl.clear(parent, os.path.join(pins, "x"))
        for n in os.listdir(pins):
            os.unlink(os.path.join(pins, n))
        subprocess.run(["umount", pins])
        from nodesleuth.node.cgroupfs import drop_caches, remove_cgroup_tree

        drop_caches()
        remove_cgroup_tree(parent)
        shutil.rmtree(LAB, ignore_errors=True)


# --- remedy --apply: a systemctl that fails is named, and the exit is non-zero ------------------------------

def _zombie_unit(ns, workdir: str, unit: str, parent: str, per_start: int = 20) -> None:
    """A unit that, at each start, leaves `per_start` memcgs dying under `parent` and exits 1 (the lab's agent)."""
    from nodesleuth.lab.actors import ecs_agent

    os.makedirs(workdir, exist_ok=True)
    agent = os.path.join(workdir, "ecs-agent.py")
    shutil.copyfile(ecs_agent.__file__, agent)
    ns.install_unit(unit, f"""[Unit]
StartLimitIntervalSec=0
[Service]
ExecStart={sys.executable} {agent} {parent} {os.path.join(workdir, "data")} {per_start}
Restart=on-failure
RestartSec=300ms
[Install]
WantedBy=multi-user.target
""")
    ns.systemctl("enable", unit, check=False)
    ns.systemctl("start", unit, check=False)
    time.sleep(1.0)


@pytest.fixture
def zombie_unit_ns(request):
    """A systemd namespace running a zombie-making unit named as the test asks (request.param)."""
    from conftest import memcg
    from nodesleuth.lab import zombies as zl
    from nodesleuth.lab.systemd import SystemdNamespace

    unit = request.param
    workdir = f"/var/lib/nodesleuth-remedy-{unit.split('.')[0]}"
    parent = f"nodesleuth-remedy-{unit.split('.')[0]}"
    try:
        with SystemdNamespace() as ns:
            _zombie_unit(ns, workdir, unit, parent)
            yield ns, unit
    finally:
        zl.clear(os.path.join(memcg().mount, parent), os.path.join(workdir, "data"))
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
@needs_root
@pytest.mark.parametrize("zombie_unit_ns", ["ecs.service"], indirect=True)
def test_remedy_apply_names_the_systemctl_that_failed(zombie_unit_ns):
    """The namespace's unit directory made read-only: `systemctl disable --now` and `mask` both fail; remedy
    --apply exits 1 naming each failed command with systemctl's own reason, and the unit is left as it was."""
    ns, unit = zombie_unit_ns
    ns.run(["mount", "-o", "remount,ro", "/etc/systemd/system"])
    p = nodesleuth("remedy", "--systemd-pid", str(ns.pid), "--seconds", "4", "--apply")
    assert p.returncode == 1, (p.stdout, p.stderr)
    err = p.stderr.strip().splitlines()
    assert "Traceback" not in p.stderr and len(err) == 1, p.stderr
    assert err[0].startswith("nodesleuth: error: remedy failed: systemctl disable --now ecs.service: exit 1 ("), err
    assert "systemctl mask ecs.service: exit 1 (" in err[0] and "Read-only file system" in err[0], err
    assert f"$ systemctl mask {unit}  -> exit 1" in p.stdout  # its log of each command
    assert json.loads(p.stdout.strip().splitlines()[-1])["failed"]
    assert ns.systemctl("is-enabled", unit, check=False).stdout.strip() == "enabled"


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
@needs_root
@pytest.mark.parametrize("zombie_unit_ns", ["kubelet.service"], indirect=True)
def test_remedy_unit_allows_a_protected_unit(zombie_unit_ns):
    """A protected unit (kubelet) proven to make zombies is refused, with the option to name; --unit names it and
    the plan then disables it (dry run: nothing is done)."""
    ns, unit = zombie_unit_ns
    dry = nodesleuth("remedy", "--systemd-pid", str(ns.pid), "--seconds", "4")
    assert dry.returncode == 0, dry.stderr
    assert "refused: kubelet.service is protected (node-critical); name it with --unit kubelet.service to act" \
        in dry.stdout, dry.stdout
    assert "systemctl disable" not in dry.stdout
    named = nodesleuth("remedy", "--systemd-pid", str(ns.pid), "--seconds", "4", "--unit", "kubelet.service")
    assert named.returncode == 0, named.stderr
    assert "refused:" not in named.stdout and "would run (dry run; --apply to act):" in named.stdout
    assert f"nsenter -t {ns.pid} -m -p -- systemctl disable --now kubelet.service" in named.stdout, named.stdout
    assert ns.systemctl("is-enabled", unit, check=False).stdout.strip() == "enabled"
