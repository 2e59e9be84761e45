"""`systemctl show` parsing on real output (tests/data/systemd/README.md: systemd 252, a unit whose
Description and RestartSec hold spaces and whose ExecStart value holds '=' signs)."""

from __future__ import annotations

import os

from nodesleuth.model.systemd import parse_properties, parse_show

SHOW = os.path.join(os.path.dirname(__file__), "data", "systemd", "show-spaced-agent.txt")


def _text() -> str:
    with open(SHOW) as f:
        return f.read()


def test_values_keep_their_spaces_and_equals_signs():
    kv = parse_properties(_text())
    assert kv["Description"] == "A crash-looping agent with spaces in its description"
    assert kv["RestartUSec"] == "1min 30s"
    assert kv["ExecStart"].startswith("{ path=/bin/sh ; argv[]=/bin/sh -c exit 3 ; ignore_errors=no ;")
    assert kv["ExecStart"].endswith("; pid=116 ; code=exited ; status=3 }")
    assert (kv["Id"], kv["ActiveState"], kv["SubState"], kv["NRestarts"], kv["ExecMainStatus"]) == \
        ("spaced-agent.service", "activating", "auto-restart", "0", "3")
    assert len(kv) == 12  # every property asked for, no piece of a value taken for a key


def test_whitespace_splitting_would_break_it():
    """What the inline parsers did before: a value with a space lost its tail or became a key."""
    old = dict(line.split("=", 1) for line in _text().split() if "=" in line)
    assert old["Description"] == "A" and old["RestartUSec"] == "1min"
    assert parse_properties(_text())["Description"] != old["Description"]


def test_the_unit_record_from_the_same_output():
    [u] = parse_show(_text(), SHOW)
    assert (u.id, u.sub, u.enabled, u.result, u.exit_status, u.restart) == \
        ("spaced-agent.service", "auto-restart", "static", "exit-code", 3, "always")
    assert u.restart_usec == 90_000_000 and u.crash_looping
