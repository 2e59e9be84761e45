"""softirq_rps_storm on Debian's 6.1 kernel: RPS steers a veth's packets to CPU 1, 1,000 firewall rules
make each packet's receive work dear (the recording's note says 1000); the sender runs on CPU 3."""

KERNEL = "6.1"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 1, "family": "softirq",
          "root_cause": r"NET_RX softirq on CPU 1"}

from softirq_rps_storm import flood, storm  # noqa: E402


def setup(x):
    storm(x, 1)


def run(x):
    flood(x, 2, 3)
