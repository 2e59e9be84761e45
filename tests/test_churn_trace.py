"""The churn tracer (collect/churn.py) on this host's real perf and cgroups, and the churn model
(model/churn.py) on a real pure cgroup-v2 trace.

The v2 guest's churn test failed (churn present, no creator) because ChurnTracer.start() returned when
perf had written its data file, seconds before perf enabled the tracepoints (docs/live-cgroups.md
"The v2 churn bug"): the check's window ran untraced. The first test makes cgroups the moment start()
returns and fails when any of them is missing from the trace."""

from __future__ import annotations

import os
import shutil

from conftest import memcg, missing, needs_root
from nodesleuth.collect.churn import ChurnTracer
from nodesleuth.model.churn import parse_script, summarise

HERE = os.path.dirname(os.path.abspath(__file__))
V2_TRACE = os.path.join(HERE, "data", "churn", "v2-6.12-perf-script.txt")


@needs_root
def test_tracer_traces_from_the_moment_start_returns():
    """Cgroups made right after start() returns are all in the trace, with their maker. Before the fix,
    start() returned once perf's data file existed and none of them was traced (perf enables its
    events only after opening them on every CPU and synthesising the running tasks)."""
    if shutil.which("perf") is None or ChurnTracer.unavailable():
        missing(f"perf cannot trace cgroups here: {ChurnTracer.unavailable()}")
    parent = os.path.join(memcg().mount, f"nodesleuth-tracer-{os.getpid()}")
    tr = ChurnTracer()
    assert tr.start(), tr.error
    try:
        os.mkdir(parent)
        for i in range(5):
            os.mkdir(os.path.join(parent, f"ecs-agent-{i}-{os.getpid()}"))
            os.rmdir(os.path.join(parent, f"ecs-agent-{i}-{os.getpid()}"))
    finally:
        if os.path.isdir(parent):
            for d in os.listdir(parent):
                if os.path.isdir(os.path.join(parent, d)):
                    os.rmdir(os.path.join(parent, d))
            os.rmdir(parent)
        summ = tr.stop(1.0)
    assert tr.note is None, tr.note
    assert summ is not None, tr.error
    ours = [c for c in summ.creators if os.getpid() in c.pids and "ecs-agent" in c.pattern]
    assert [(c.pattern, c.mkdir, c.rmdir) for c in ours] == [("/nodesleuth-tracer-*/ecs-agent-*-*", 5, 5)], (
        summ.creators)


def test_v2_trace_names_its_creator():
    """A real trace from the pure-v2 guest (Debian 6.12, tests/vm: perf's own text of the cgroup
    tracepoints, root=0 on the v2 hierarchy): its maker is one creator on hierarchy 0, with every cgroup
    it made and removed; the check's v2 finding filters on hierarchy 0 (detect/zombies._on)."""
    with open(V2_TRACE) as f:
        events = parse_script(f.read())
    assert events and {e.hierarchy for e in events} == {0}
    s = summarise(events, 5.0)
    top = s.creators[0]
    assert (top.hierarchy, top.pattern) == (0, "/nodesleuth-churn-dbg/ecs-agent-*-*"), s.creators
    made = sum(1 for e in events if e.event == "mkdir" and "/ecs-agent-" in e.path)
    assert top.mkdir == made and top.rmdir == made >= 20
    assert top.still_dying + top.freed + top.young == made


@needs_root
def test_tracer_traces_from_ready_to_interrupt_only():
    """check launches perf before it builds its sampler and ends the trace before its probes: cgroups
    made between launch() and ready(), or after interrupt() (the probes' own), are not in the trace;
    those made between are, with their maker."""
    if shutil.which("perf") is None or ChurnTracer.unavailable():
        missing(f"perf cannot trace cgroups here: {ChurnTracer.unavailable()}")
    parent = os.path.join(memcg().mount, f"nodesleuth-tracer-{os.getpid()}")
    tr = ChurnTracer()

    def churn(kind: str) -> None:
        for i in range(3):
            d = os.path.join(parent, f"{kind}-{i}-{os.getpid()}")
            os.mkdir(d)
            os.rmdir(d)

    assert tr.launch(), tr.error
    try:
        os.mkdir(parent)
        churn("before")
        assert tr.ready(), tr.error
        churn("during")
        tr.interrupt()
        churn("after")
    finally:
        if os.path.isdir(parent):
            for d in os.listdir(parent):
                if os.path.isdir(os.path.join(parent, d)):
                    os.rmdir(os.path.join(parent, d))
            os.rmdir(parent)
        summ = tr.stop(1.0)
    assert tr.note is None, tr.note
    assert summ is not None, tr.error
    ours = [c for c in summ.creators if os.getpid() in c.pids and c.pattern.startswith("/nodesleuth-tracer-*/")]
    assert [(c.pattern, c.mkdir, c.rmdir) for c in ours] == [("/nodesleuth-tracer-*/during-*-*", 3, 3)], (
        summ.creators)
    assert not os.path.exists(tr.dir)
