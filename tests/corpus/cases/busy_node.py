"""A node busy everywhere: a user-space loop on each of the 4 CPUs for 25 s. Every core is saturated,
none is starved alone (the others average far above 60%): load, not one hot core. No incident."""

KERNEL = "6.12"
CPUS = 4
EXPECT = {"incident": False, "family": None, "root_cause": None}


def run(x):
    with x.episode():
        x.wait(*[x.tool(f"load-{c}", "spin", 25, c) for c in range(4)])
