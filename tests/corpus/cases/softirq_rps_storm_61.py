"""softirq_rps_storm on Debian's 6.1 kernel: RPS steers a veth's packets to CPU 1, 300 firewall rules
make each packet's receive work dear; the sender runs on CPU 3."""

KERNEL = "6.1"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 1, "family": "softirq",
          "root_cause": r"NET_RX softirq on CPU 1"}

from softirq_rps_storm import rules  # noqa: E402


def setup(x):
    x.veth(rps_cpus=1 << 1)
    rules(x, "cb")


def run(x):
    sink = x.tool("udp-sink", "udpsink", 45, 2, 9000, netns="cb")
    x.sleep(3)
    with x.episode():
        x.wait(x.tool("udp-flood", "udpflood", 25, 3, "10.99.0.2", 9000, 64, netns="ca"))
    x.wait(sink)
