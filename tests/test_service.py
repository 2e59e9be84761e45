"""The shipped unit file runs the recorder under a real systemd (PID 1 of a new PID namespace)."""

from __future__ import annotations

import os
import shutil
import sys
import time

from conftest import needs_root
from nodesleuth.lab.systemd import SystemdNamespace
from nodesleuth.store.store import StoreReader

pytestmark = needs_root

UNIT = os.path.join(os.path.dirname(__file__), "..", "deploy", "systemd", "nodesleuth-record.service")


def _under_tmp() -> list[str]:
    """Where this interpreter and the nodesleuth it imports live, when that is under /tmp or /var/tmp (a
    venv or a clone there, as many people try a project): the namespace's systemd and the unit
    (PrivateTmp=yes) each get a fresh /tmp, so these must be bound into both, read-only."""
    import nodesleuth

    places = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)),
              os.path.dirname(os.path.dirname(os.path.realpath(nodesleuth.__file__)))}
    under = {os.path.realpath(p) for p in places if os.path.realpath(p).startswith(("/tmp/", "/var/tmp/"))}
    return sorted(p for p in under if not any(p.startswith(q + "/") for q in under))


def test_unit_file_records_under_systemd():
    # the namespace (and the unit, PrivateTmp=yes) have their own /tmp: keep the store on disk outside
    # /tmp, and when the interpreter or this checkout is under /tmp or /var/tmp, keep those visible
    base = f"/var/lib/nodesleuth-svc-test-{os.getpid()}"
    store = os.path.join(base, "store")
    state_dir_existed = os.path.exists("/var/lib/nodesleuth")  # StateDirectory= makes it on the shared disk
    shutil.rmtree(store, ignore_errors=True)
    with open(UNIT) as f:
        text = f.read()
    assert "CPUQuota=20%" in text and "MemoryMax=128M" in text and "Restart=on-failure" in text
    assert "PrivateTmp=yes" in text
    text = text.replace("/usr/local/bin/nodesleuth record --store /var/lib/nodesleuth",
                        f"{sys.executable} -m nodesleuth record --store {store}")
    keep = _under_tmp()
    if keep:
        text = text.replace("[Service]", "[Service]\n" + "".join(f"BindReadOnlyPaths={p}\n" for p in keep), 1)
    try:
        with SystemdNamespace(keep=keep) as ns:
            ns.install_unit("nodesleuth-record.service", text)
            ns.systemctl("start", "nodesleuth-record.service")
            deadline = time.time() + 30
            n = 0
            while time.time() < deadline and n < 3:
                time.sleep(0.5)
                n = len(list(StoreReader(store).read("ticks"))) if os.path.isdir(store) else 0
            show = ns.systemctl("show", "-p", "ActiveState,NRestarts,CPUQuotaPerSecUSec,MemoryMax",
                                "nodesleuth-record.service").stdout
            ns.systemctl("stop", "nodesleuth-record.service")
        props = dict(line.split("=", 1) for line in show.split())
        assert props["ActiveState"] == "active" and props["NRestarts"] == "0"
        assert props["CPUQuotaPerSecUSec"] == "200ms" and props["MemoryMax"] == str(128 << 20)
        r = StoreReader(store)
        ticks = list(r.read("ticks"))
        assert len(ticks) >= 3 and not r.problems
    finally:
        shutil.rmtree(base, ignore_errors=True)
        if not state_dir_existed:
            try:
                os.rmdir("/var/lib/nodesleuth")
            except OSError:
                pass
