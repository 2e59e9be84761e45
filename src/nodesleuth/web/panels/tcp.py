"""TCP health per second over every network namespace read (the host's and the pods'): retransmitted
segments, RTO timeouts, connections reset or killed by retries, and segments dropped at listeners and
sockets (collect/tcp.py), with the connections the triggered socket view found retransmitting."""

from . import Axis, Panel, Series, panel

DROPS = ("TcpExt_ListenDrops", "TcpExt_TCPRcvQDrop", "TcpExt_TCPBacklogDrop")


def point(tk) -> dict | None:
    s = tk.tcp
    if s is None:
        return None
    iv = max(tk.interval, 1e-3)
    out = {"t": tk.time, "retrans_per_s": round(s.sum("Tcp_RetransSegs") / iv, 1),
           "timeouts_per_s": round(s.sum("TcpExt_TCPTimeouts") / iv, 1),
           "resets_per_s": round(s.sum("Tcp_EstabResets") / iv, 1),
           "drops_per_s": round(sum(s.sum(k) for k in DROPS) / iv, 1)}
    if tk.sockets is not None:
        out["conns_retransmitting"] = sum(len(sc["conns"]) for sc in tk.sockets.scans)
    return out


panel(Panel("tcp", "TCP health: retransmits, RTO timeouts, resets, drops (per second, host and pod network "
            "namespaces; /proc/net/snmp, netstat)", 45, ("tcp", "sockets"),
            (Axis("ev", "rate", "per second"), Axis("n", "count", "connections")),
            (Series("retrans_per_s", "retransmitted segments", "ev", "#c00",
                    missing="TCP counters not recorded in this range"),
             Series("timeouts_per_s", "RTO timeouts", "ev", "#c60"),
             Series("resets_per_s", "connections reset", "ev", "#80c"),
             Series("drops_per_s", "listen/receive drops", "ev", "#06c", (4, 3)),
             Series("conns_retransmitting", "connections retransmitting (socket view)", "n", "#555", (2, 2),
                    missing="no socket view ran in this range (it runs only on a counter spike)")),
            point, None, thin="max"))
