"""A NIC's CPU starved by work the data cannot pin on anyone: every interrupt line of the receiving
virtio NIC is on CPU 2, which a steady UDP stream (a rate-limited sender) keeps busy in NET_RX a little,
while four unrelated shells, each started by its own parent, run four different short programs on
CPU 2 over and over (each lives 40 ms, busy half of it: together they want two CPUs' worth of CPU 2) (cron jobs, a backup script, a metrics agent, a CI runner's steps): together they
saturate CPU 2; no single process, group, softirq or mechanism holds the proof's share. explain must
find the incident on CPU 2 and name no root cause (abstain), with the CPU and the NIC named. It leads with
the largest group, contributing at most: another group takes a comparable part of the core (a first
reading proved one shell's group at 34% of the core, 56% of its excess, with three others beside it).
(A first recording ran `sleep` between the programs: under emulation exec'ing that dynamically linked
binary cost more than the programs, and the sleeps of all four shells were one group, rightly named.)"""

KERNEL = "6.12"
CPUS = 4
NICS = 2
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 2, "family": "group", "root_cause": None}

PROGRAMS = ["logrotate", "pg_dump-chk", "node-agent", "ci-step"]


def setup(x):
    _, _, lines = x.nic_pair()
    for line in lines:
        x.irq_affinity(line, "2")
    x.note(f"receiving device's interrupt lines pinned to CPU 2: {lines}")
    for p in PROGRAMS:
        x.sh(f"cp {x.tool_path} /run/{p} && chmod +x /run/{p}")


def run(x):
    sink = x.tool("udp-sink", "udpsink", 45, 3, 9000)
    x.sleep(2)
    with x.episode():
        # a modest stream: 25% of every 40 ms flooding from CPU 0 (corpus_tool duty is busy-looping, so
        # the flood itself runs as bursts: `timeout` restarts it); the four shells on CPU 2
        flows = [x.spawn(["timeout", "20", "taskset", "-c", "0", "ip", "netns", "exec", "na", "sh", "-c",
                          f"while :; do {x.tool_path} udp-flood udpflood 0.01 0 10.98.0.2 9000 64; sleep 0.04; done"])]
        # each program lives 40 ms, busy half of it in 5 ms bursts (no `sleep` binary between them: under
        # emulation exec'ing a dynamically linked sleep cost more than the programs and made one group of them)
        shells = [x.spawn(["timeout", "20", "taskset", "-c", "2", "sh", "-c",
                           f"while :; do /run/{p} {p} bursts 0.04 2 5 5; done"])
                  for p in PROGRAMS]
        x.wait(*flows, *shells)
    x.wait(sink)
