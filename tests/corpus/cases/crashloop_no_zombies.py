"""A crash-looping unit without zombies: a real systemd (PID 1 of a PID namespace) restarts ecs.service,
which makes 20 container cgroups per start, charges nothing to them and exits 1; the kernel frees
each at once. No hot core: no incident."""

KERNEL = "6.12"
CPUS = 4
TIMEOUT = 2400
EXPECT = {"incident": False, "family": None, "root_cause": None}


def setup(x):
    from _common import FREED_AT_ONCE, systemd, unit

    ns = systemd(x)
    path = "/run/corpus-agent.py"
    with open(path, "w") as f:
        f.write(FREED_AT_ONCE)
    ns.install_unit("ecs.service", unit(f"{x.python} {path} corpus-crash", restart_sec="3s"))
    ns.systemctl("enable", "ecs.service", check=False)
    x.ns = ns


def run(x):
    with x.episode("crashloop"):
        x.ns.systemctl("start", "ecs.service", check=False)
        x.sleep(40)
        x.ns.systemctl("stop", "ecs.service", check=False)
    n = x.ns.systemctl("show", "-p", "NRestarts", "ecs.service", check=False).stdout.strip()
    x.note(f"ecs.service {n}")
