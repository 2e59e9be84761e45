"""Held out. A SCHED_FIFO priority 40 busy loop (`audio-rt`) pinned to CPU 2 on 7.2 while UDP traffic is
steered to CPU 2 by RPS (veth between two network namespaces): the receive work left to ksoftirqd/2
cannot run past the real-time task. explain must name the real-time process and its class."""

HELD_OUT = True
KERNEL = "7.2"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 2, "family": "rt",
          "root_cause": r"^audio-rt \(pid \d+\), SCHED_FIFO priority 40$"}


def setup(x):
    x.veth(rps_cpus=1 << 2)


def run(x):
    sink = x.tool("udp-sink", "udpsink", 40, 3, 9000, netns="cb")
    send = x.tool("udp-send", "udpflood", 40, 0, "10.99.0.2", 9000, 64, netns="ca")
    x.sleep(5)
    with x.episode():
        x.wait(x.tool("audio-rt", "rtspin", 25, 2, 40))
    x.wait(sink, send)
