"""The thresholds of nodesleuth's rules, defined once. detect/incidents.py (the hot-core rule) and
detect/proof.py (creator, unit tie, verdicts) decide with them; the exporter's help texts, the web
page (served as /api/summary's `rules`) and the shipped alert rules read them from here
(scripts/gen_deploy.py writes the deploy copies; tests/test_deploy.py fails when one differs).
"""

from __future__ import annotations

# --- the hot core: the incident's signature -------------------------------------------------------
HOT_BUSY = 90.0  # % of one CPU
HOT_SECONDS = 3.0  # for at least this long
OTHERS_MAX = 60.0  # while the other CPUs (those not saturated themselves) averaged under this % (a whole busy node is load)

# --- verdicts ------------------------------------------------------------------------------------
OBSERVED, PROVEN, CONTRIBUTING, NOT_PROVEN, UNKNOWN = "observed", "proven", "contributing", "not_proven", "unknown"
PROVE = 0.5  # a link is proven when it explains at least half of the link above it
CONTRIBUTE = 0.1  # and contributing from a tenth

# --- who makes the zombies -----------------------------------------------------------------------
ZOMBIE_AGE = 10.0  # s: a removed cgroup still dying this long after rmdir is a zombie (a clean one is freed in ms)
MIN_ZOMBIES = 10  # a creator needs at least this many to be proven: a few late frees on a busy node prove nothing
RESTARTS_TIE = (0.6, 1.6)  # creating processes per unit restart that tie a creator to a restarting unit

# --- zombie counts (check's severities, the alert's floor) and crash loops --------------------------
ZOMBIE_WARN = 1000  # dying cgroups that make a warning (check --zombie-warn)
ZOMBIE_CRIT = 10000  # and a critical finding (check --zombie-crit)
WALK_DYING_SHARE = 0.5  # memory-cgroup code on a hot core is a walk over zombies when at least this share of
# the memcgs is dying (and >= MIN_ZOMBIES); with fewer it is reclaim's walk over live ones (explain/family/)
GROUP_MIN = 5  # processes of one command (and parent) on a hot core that make a group a candidate (explain/family/group.py)
CRASH_LOOP_RESTARTS = 3  # a unit that restarted this often and did not succeed is crash-looping

# --- when a probe (collect/memcg_cost.py, collect/posture.py) must not make memcgs (collect/probe_state.py) ---
PROBE_MAX_ID_SHARE = 0.8  # no probe when memory cgroups (live + dying) hold more than this share of the IDs
PROBE_MAX_MEMCGS = 20000  # nor when this many memory cgroups exist already (each more makes every walk longer)
PROBE_MAX_MEM_PSI = 10.0  # nor when /proc/pressure/memory `some avg10` is above this % (reclaim is busy)
# --- the memory controller's 65,535 IDs (model/memcg_ids.py says which memcgs hold one on which kernel) ----
MEMCG_IDS_WARN = 0.75  # share of the IDs held (at most) that makes a warning
MEMCG_IDS_CRIT = 0.90  # and a critical finding: a few thousand more mkdirs and pods cannot start
MEMCG_IDS_HORIZON = 86400.0  # s: growth that exhausts the IDs within this is a warning whatever the share

THRESHOLDS = {"hot_busy_pct": HOT_BUSY, "hot_seconds": HOT_SECONDS, "others_max_pct": OTHERS_MAX,
              "prove_share": PROVE, "contribute_share": CONTRIBUTE, "zombie_age_seconds": ZOMBIE_AGE,
              "min_zombies": MIN_ZOMBIES, "restarts_tie": list(RESTARTS_TIE),
              "zombie_warn": ZOMBIE_WARN, "zombie_crit": ZOMBIE_CRIT, "walk_dying_share": WALK_DYING_SHARE, "crash_loop_restarts": CRASH_LOOP_RESTARTS,
              "memcg_ids_warn": MEMCG_IDS_WARN, "memcg_ids_crit": MEMCG_IDS_CRIT,
              "memcg_ids_horizon_seconds": MEMCG_IDS_HORIZON}
