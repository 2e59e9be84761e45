"""A crash-looping unit without zombies: a real systemd (PID 1 of a PID namespace) restarts ecs.service,
which makes 20 container cgroups per start, charges nothing to them and exits 1; the kernel frees
each at once. No hot core: no incident."""

KERNEL = "6.12"
CPUS = 4
TIMEOUT = 2400
EXPECT = {"incident": False, "family": None, "root_cause": None}


def setup(x):
    from _common import freed_crash_loop

    x.ns = freed_crash_loop(x, "corpus-crash", "3s")


def run(x):
    with x.episode("crashloop"):
        x.ns.systemctl("start", "ecs.service", check=False)
        x.sleep(40)
        x.ns.systemctl("stop", "ecs.service", check=False)
    n = x.ns.systemctl("show", "-p", "NRestarts", "ecs.service", check=False).stdout.strip()
    x.note(f"ecs.service {n}")
