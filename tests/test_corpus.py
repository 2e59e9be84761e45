"""explain scored on the corpus of real incidents (tests/data/corpus): recordings made for real in a QEMU
guest by tests/corpus/make.py, each with its expected verdict. The fast tier scores the stored
recordings as `python -m benchmarks explain_corpus` does and asserts the goals and every case's
verdict; the slow tier remakes a case in the VM and scores the new recording."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from benchmarks import explain_corpus as ec

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = {d["name"]: d for d in ec.cases()}
# cases explain gets wrong today, each with the reason (see the README's corpus section); a case listed
# here that explain gets right fails (strict), so the list cannot go stale
KNOWN_MISSES: dict[str, str] = {}


@pytest.fixture(scope="module")
def scored() -> dict:
    return ec.run_corpus()


def test_the_corpus_is_real_and_described():
    """>= 30 recordings, >= 10 with no cause to name; each says how it was made and what it expects."""
    assert len(DOCS) >= 30, sorted(DOCS)
    assert sum(ec.no_cause(d) for d in DOCS.values()) >= 10
    for name, d in DOCS.items():
        assert set(d["expect"]) >= {"incident", "family", "root_cause"}, name
        assert d["kernel"] and d["vcpus"] and d["date"] and d["command"] == f"python3 tests/corpus/make.py {name}"
        assert os.path.exists(os.path.join(REPO, "tests", "corpus", "cases", f"{name}.py")), name
        for w in d["written_lines"]:  # every line a scenario wrote to the kernel log says where it comes from
            assert w["origin"].startswith(("generated from", "real line from")), (name, w)


def test_the_goals_are_met(scored):
    assert scored["cases"] == len(DOCS)
    assert scored["accuracy"] >= ec.GOALS["accuracy"], scored["misses"]
    assert scored["abstention"] >= ec.GOALS["abstention"], scored["misses"]
    for fam, s in scored["families"].items():
        assert s["cases"] >= 1, fam


@pytest.mark.parametrize("name", sorted(DOCS))
def test_each_case(scored, name):
    r = next(x for x in scored["results"] if x["name"] == name)
    if name in KNOWN_MISSES:
        assert not (r["root_ok"] and r["leading_ok"]), f"{name} is right now: take it off KNOWN_MISSES"
        pytest.xfail(KNOWN_MISSES[name])
    assert not r["problems"], r["problems"]
    assert r["root_ok"] and r["leading_ok"], r["why"]
    if r["no_cause"]:
        assert r["abstained"], r["found"]


def test_dose_response_on_the_seed_recording(scored):
    """The lab's recording, whose zombies grow: CPU 1's memcg share rises with the dying count."""
    seeds = [r for r in scored["results"] if DOCS[r["name"]]["expect"].get("dose_response")]
    assert seeds
    for r in seeds:
        d = r.get("dose_response")
        assert d, r["name"]
        m = d["memcg_share"]
        assert m and m["rho"] >= 0.5 and m["p"] < 0.05 and m["n"] >= 6, d
        assert d["stat_read"] is None or set(d["stat_read"]) >= {"rho", "p", "n", "strength"}


def test_the_benchmark_prints_json():
    p = subprocess.run([sys.executable, "-m", "benchmarks", "explain_corpus", "--json", "--no-save"], cwd=REPO,
                       capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": os.path.join(REPO, "src")})
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    assert {"cases", "accuracy", "abstention", "families", "time_to_verdict"} <= set(doc)
    assert doc["cases"] == len(DOCS)


@pytest.mark.slow
def test_a_case_remade_in_the_vm_is_scored(tmp_path):
    """tests/corpus/make.py remakes user_loop for real (a QEMU guest, 4 vCPUs) into a scratch directory,
    and the new recording scores like the stored one."""
    sys.path.insert(0, os.path.join(REPO, "tests", "vm"))
    import vmrun

    from conftest import missing

    try:
        vmrun.ensure_kernel()
    except vmrun.VMUnavailable as e:
        missing(f"no VM can run here: {e}")
    env = {**os.environ, "CORPUS_DATA": str(tmp_path), "CORPUS_RUNS": str(tmp_path / "runs"),
           "PYTHONPATH": os.path.join(REPO, "src")}
    p = subprocess.run([sys.executable, os.path.join(REPO, "tests", "corpus", "make.py"), "user_loop"], env=env,
                       capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, p.stderr[-3000:]
    out = ec.run_corpus(str(tmp_path))
    assert out["cases"] == 1 and out["accuracy"] == 1.0, out["misses"]
    doc = json.load(open(tmp_path / "user_loop.json"))
    assert doc["kernel"].startswith("6.12") and doc["vcpus"] == 4
