"""The decoy of the seed: a crash-looping ecs.service under a real systemd (its cgroups are freed at once:
no zombies), a user-space loop saturating CPU 1, and ENA reset lines (written to /dev/kmsg, generated)
while the loop runs. The NIC event comes with a hot core, but nothing shows the NIC's work waited on
it (the lines are not a device's), the core was a user loop, and the unit's cgroups do not stay dying:
explain must name no root cause, lead with the loop, and never propose disabling the unit."""

KERNEL = "6.12"
CPUS = 8  # under emulation the crash loop fills vCPUs of its own (seed_chain_510): on 4, CPU 3 saturated too
TIMEOUT = 2400
EXPECT = {"incident": True, "kind": "nic_reset", "cpu": 1, "family": "user", "root_cause": None}


def setup(x):
    from _common import freed_crash_loop

    x.ns = freed_crash_loop(x, "corpus-decoy", "2s")


def run(x):
    from _common import ena

    x.ns.systemctl("start", "ecs.service", check=False)
    x.sleep(10)
    with x.episode():
        loop = x.tool("decoy-loop", "spin", 20, 1)
        x.sleep(12)
        ena(x)
        x.wait(loop)
    x.sleep(5)
    x.ns.systemctl("stop", "ecs.service", check=False)
