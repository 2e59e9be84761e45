"""A NIC event alone: ENA reset lines (generated from the driver's format strings, written to the guest's
/dev/kmsg) on an idle node. explain must report the NIC event and say no CPU starvation explains it:
no cause named."""

KERNEL = "6.12"
CPUS = 4
EXPECT = {"incident": True, "kind": "nic_reset", "family": None, "root_cause": None}


def run(x):
    from _common import ena

    with x.episode("quiet"):
        x.sleep(15)
        ena(x)
        x.sleep(15)
