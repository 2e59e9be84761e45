"""Three user-space loops share CPU 1 (a third of it each): the core is saturated but no single process
explains half of it. explain must name no root cause and lead with user space (contributing)."""

KERNEL = "6.12"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 1, "family": "user", "root_cause": None}


def run(x):
    with x.episode():
        ps = [x.tool(f"share-{i}", "spin", 25, 1) for i in range(3)]
        x.wait(*ps)
