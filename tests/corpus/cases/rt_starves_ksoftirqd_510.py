"""A SCHED_FIFO priority 50 busy loop pinned to CPU 2 while UDP traffic is steered to CPU 2 by RPS (veth
between two network namespaces). On 5.10 pending softirqs are left to ksoftirqd once it is woken
(invoke_softirq: ksoftirqd_running), and ksoftirqd/2 (SCHED_OTHER) cannot run past the real-time task:
the classic starved receive path. explain must name the real-time process and its class."""

KERNEL = "5.10"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 2, "family": "rt",
          "root_cause": r"^rt-hog \(pid \d+\), SCHED_FIFO priority 50$"}


def setup(x):
    x.veth(rps_cpus=1 << 2)


def run(x):
    sink = x.tool("udp-sink", "udpsink", 40, 3, 9000, netns="cb")
    send = x.tool("udp-send", "udpflood", 40, 0, "10.99.0.2", 9000, 64, netns="ca")
    x.sleep(5)
    with x.episode():
        x.wait(x.tool("rt-hog", "rtspin", 25, 2, 50))
    x.wait(sink, send)
