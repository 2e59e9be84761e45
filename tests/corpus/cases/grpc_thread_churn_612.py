"""Held out. Thread churn on 6.12: a gRPC server, `grpc-server`, pinned to CPU 3, serves each call on a new
thread that works 1.5 ms and ends (a thread per RPC, no pool), joining it before the next, for 20 s. One
process, thousands of short threads; the kernel adds each exited thread's time to its process. explain must
lead with the grpc-server process in user space."""

HELD_OUT = True
KERNEL = "6.12"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 3, "family": "user",
          "root_cause": r"^grpc-server \(pid \d+\), in user space$"}


def run(x):
    with x.episode():
        x.wait(x.tool("grpc-server", "threads", 20, 3, 1.5))
