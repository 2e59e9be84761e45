"""All of a NIC's interrupts on one CPU: two virtio-net devices on one QEMU hub, the sender's in a network
namespace, the receiver's left in the node's own (as a host's NIC is); every interrupt line of the
receiving device is pinned to CPU 2 (smp_affinity_list) and a UDP flood arrives through it. CPU 2 runs the device's NAPI poll and the receive path in NET_RX softirq
(Debian's kernels do not account hard-irq time apart: CONFIG_IRQ_TIME_ACCOUNTING is off). explain must
name NET_RX on CPU 2 and the device's receive interrupt line."""

KERNEL = "6.12"
CPUS = 4
NICS = 2
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 2, "family": "softirq",
          "root_cause": r"NET_RX softirq on CPU 2 from interrupt line \d+ \(.*virtio\d+-input\.0\)"}


def setup(x):
    _, _, lines = x.nic_pair()
    for line, name in lines.items():
        x.irq_affinity(line, "2")
    x.note(f"receiving device's interrupt lines pinned to CPU 2: {lines}")


def run(x):
    sink = x.tool("udp-sink", "udpsink", 45, 3, 9000)
    x.sleep(3)
    with x.episode():
        x.wait(x.tool("udp-flood", "udpflood", 25, 0, "10.98.0.2", 9000, 64, netns="na"))
    x.wait(sink)
