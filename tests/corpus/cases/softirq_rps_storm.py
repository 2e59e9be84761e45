"""A softirq storm on one CPU: UDP packets from one network namespace to another over a veth pair, the
receiving queue steering every packet to CPU 2 with RPS, and 1,000 firewall rules (iptables, nf_tables)
that each packet walks in the receiving namespace: CPU 2's time goes to NET_RX softirq work, no process
is on it. explain must name NET_RX on CPU 2 and how the packets got there (RPS)."""

KERNEL = "6.12"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 2, "family": "softirq",
          "root_cause": r"NET_RX softirq on CPU 2"}


def rules(x, ns: str, n: int = 1000) -> None:
    x.modprobe("x_tables", "nf_tables", "nft_compat", "xt_tcpudp", "nf_defrag_ipv4", "nf_conntrack")
    path = f"/run/corpus-rules-{ns}"
    with open(path, "w") as f:
        f.write("*filter\n:INPUT ACCEPT [0:0]\n" + "".join(f"-A INPUT -p udp --dport {10000 + i} -j DROP\n"
                                                           for i in range(n)) + "COMMIT\n")
    x.sh(f"ip netns exec {ns} iptables-restore < {path}")
    x.note(f"{n} iptables rules (nf_tables) in namespace {ns}'s INPUT chain, none matching the traffic")


def setup(x):
    x.veth(rps_cpus=1 << 2)
    rules(x, "cb")


def run(x):
    sink = x.tool("udp-sink", "udpsink", 45, 3, 9000, netns="cb")
    x.sleep(3)
    with x.episode():
        x.wait(x.tool("udp-flood", "udpflood", 25, 0, "10.99.0.2", 9000, 64, netns="ca"))
    x.wait(sink)
