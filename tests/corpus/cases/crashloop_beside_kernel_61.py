"""Held out at 92ede60 (scored once there), in-sample since. A container crash loop beside a kernel-bound hot core on 6.1: pod shop/cart-5b7c9d-8hj2k's
`cart` container starts, works 0.3 s on CPU 0 and exits, and is started again 4 s later as a new
container (its restart count rising from 30), while `zstd-reader` reads /dev/zero in 1 MB reads on CPU 1
(its time in the kernel, copying). Presence is not proof: explain must lead CPU 1 with the reader in the
kernel and name nothing of the crash loop."""

HELD_OUT = False  # held out at 92ede60 (scored once there: docs/explain.md), in-sample since the rules changed after it
KERNEL = "6.1"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 1, "family": "kernel",
          "root_cause": r"^zstd-reader \(pid \d+\), in the kernel"}

NS, POD, UID, CONTAINER = "shop", "cart-5b7c9d-8hj2k", "7c6b5a49-3827-4615-a4b3-c2d1e0f9a8b7", "cart"


def setup(x):
    from _common import pod_files

    x.sh(f"cp {x.tool_path} /run/cart && chmod +x /run/cart")
    pod_files(x, NS, POD, UID, CONTAINER, "e1" * 32, restarts=30)


def run(x):
    from _common import container_crash_loop

    with container_crash_loop(x, NS, POD, UID, CONTAINER, cpu=0, first=31):
        x.sleep(6)
        with x.episode():
            x.wait(x.tool("zstd-reader", "readzero", 15, 1, 1 << 20))
        x.sleep(6)
