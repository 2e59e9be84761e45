"""Held out. A UDP receive flood on 7.2: a metrics relay (`metrics-relay`, in one network namespace) floods a
statsd-like collector (`statsd-sink`, in another) with 64-byte datagrams over a veth pair for 22 s; the
receiving queue steers every packet to CPU 2 with RPS, and 1,000 firewall rules (iptables, nf_tables) that
none of the traffic matches are walked by each packet in the receiving namespace. CPU 2's time goes to
NET_RX softirq work (on 7.2 run at the exit of the RPS interrupt, not in ksoftirqd), no process is on it;
the sender runs on CPU 1, the sink on CPU 0. explain must name NET_RX on CPU 2."""

HELD_OUT = True
KERNEL = "7.2"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 2, "family": "softirq",
          "root_cause": r"NET_RX softirq on CPU 2"}

from softirq_rps_storm import storm  # noqa: E402


def setup(x):
    storm(x, 2)


def run(x):
    sink = x.tool("statsd-sink", "udpsink", 40, 0, 8125, netns="cb")
    x.sleep(3)
    with x.episode():
        x.wait(x.tool("metrics-relay", "udpflood", 22, 1, "10.99.0.2", 8125, 64, netns="ca"))
    x.wait(sink)
