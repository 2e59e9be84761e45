"""RPS traffic without a storm: UDP packets over a veth, steered to CPU 2 with RPS, no firewall rules:
CPU 2 does NET_RX work (a fifth of its time), the sender on CPU 0 is busier. No core is saturated.
No incident."""

KERNEL = "6.12"
CPUS = 4
EXPECT = {"incident": False, "family": None, "root_cause": None}


def setup(x):
    x.veth(rps_cpus=1 << 2)


def run(x):
    sink = x.tool("udp-sink", "udpsink", 40, 3, 9000, netns="cb")
    with x.episode():
        x.wait(x.tool("udp-flood", "udpflood", 25, 0, "10.99.0.2", 9000, 64, netns="ca"))
    x.wait(sink)
