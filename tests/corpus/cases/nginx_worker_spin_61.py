"""Held out. A web server worker stuck in a loop on 6.1: `nginx-worker`, pinned to CPU 3 (worker_cpu_affinity),
spins in user space for 20 s (a request that sends a worker into an endless loop in a module's code),
while a log shipper (`log-shipper`) keeps CPU 0 about 30% busy (busy 30 ms of every 100 ms) throughout.
Only CPU 3 is saturated; the others stay far under 60%. explain must name the worker, in user space."""

HELD_OUT = True
KERNEL = "6.1"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 3, "family": "user",
          "root_cause": r"^nginx-worker \(pid \d+\), in user space$"}


def run(x):
    shipper = x.tool("log-shipper", "duty", 28, 0, 30, 100)
    x.sleep(3)
    with x.episode():
        x.wait(x.tool("nginx-worker", "spin", 20, 3))
    x.wait(shipper)
