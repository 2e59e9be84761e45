"""A busy node (a loop on every CPU) and ENA reset lines (generated, written to /dev/kmsg) in the middle
of it: the NIC event has no starved core to blame (every core is busy, the others far above 60%).
explain must report the NIC event, say the node was busy, and name no cause."""

KERNEL = "6.12"
CPUS = 4
EXPECT = {"incident": True, "kind": "nic_reset", "family": None, "root_cause": None}


def run(x):
    from _common import ena

    with x.episode():
        ps = [x.tool(f"load-{c}", "spin", 25, c) for c in range(4)]
        x.sleep(15)
        ena(x)
        x.wait(*ps)
