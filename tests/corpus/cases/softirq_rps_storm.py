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


def storm(x, rps_cpu: int, rules_n: int = 1000):
    """The veth pair with RPS steering to `rps_cpu`, the rules in the receiving namespace."""
    x.veth(rps_cpus=1 << rps_cpu)
    rules(x, "cb", rules_n)


def flood(x, sink_cpu: int, flood_cpu: int) -> None:
    """A 45 s UDP sink on `sink_cpu` and a 25 s flood of 64-byte packets from `flood_cpu` (the episode)."""
    sink = x.tool("udp-sink", "udpsink", 45, sink_cpu, 9000, netns="cb")
    x.sleep(3)
    with x.episode():
        x.wait(x.tool("udp-flood", "udpflood", 25, flood_cpu, "10.99.0.2", 9000, 64, netns="ca"))
    x.wait(sink)


def setup(x):
    storm(x, 2)


def run(x):
    flood(x, 3, 0)
