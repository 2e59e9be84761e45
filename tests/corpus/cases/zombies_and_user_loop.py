"""A decoy for the memcg walk: 4,000 zombie memcgs are present (made before the recording) and CPU 2 is
saturated by a user-space loop that has nothing to do with them. explain must blame the loop, never the
zombies (the resource link is not proven)."""

KERNEL = "6.12"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 2, "family": "user",
          "root_cause": r"^spin-user \(pid \d+\), in user space$"}


def setup(x):
    from _common import dying, zombies

    made = zombies(4000)
    x.note(f"{made} zombie memcgs made before the recording; the kernel counts {dying()} memory cgroups")


def run(x):
    with x.episode():
        x.wait(x.tool("spin-user", "spin", 25, 2))
