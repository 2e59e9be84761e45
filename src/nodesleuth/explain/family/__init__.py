"""The explain families: what else can saturate a core, each measured on the recording. One hypothesis
per family, one module each here (registered by registry.family), with the share of the core's excess
busy time it explains, a verdict, and a root cause only when its own rule holds end to end.
explain/chain.py names the best proven one as the leading explanation and lists the others, with their
numbers, as rejected.

| family | share measured as | root cause when |
|---|---|---|
| memcg_walk | memory-cgroup code on the core (the chain's resource link), whatever the memcgs' state: a walk over zombies when >= WALK_DYING_SHARE (half) of them are dying and >= MIN_ZOMBIES, else over live ones (both counts measured) | over zombies: their creator and unit proven (explain/chain.py); over live ones: who made the live cgroups the live count grew by (path pattern, unit, pod; detect/proof.creator on the churn trace) |
| reclaim | page-reclaim code on the core, unless the memcgs it walks are mostly dying (then the time is the zombie walk's) | never: the pressure's source is not in the data |
| softirq | the core's %soft (mpstat) | one softirq is >= half of them, and what raised it is seen: the NIC's line >= half of the NIC's interrupts on the core, or RPS (softnet received_rps), or a device line >= half of the core's device interrupts (system vectors LOC/RES/CAL... excluded) |
| irq | the core's %irq | one interrupt line is >= half of the CPU's interrupts |
| rt | SCHED_FIFO/RR processes' share of the core | one process >= PROVE (it and its class are the cause) |
| lock | kernel lock spinning on the core | never: the lock's holder is not in the data |
| user | one process in user space | one process >= PROVE of the excess, >= half of it in user space |
| kernel | one process in kernel code none of the above | one process >= PROVE, >= half of it in the kernel |
| group | the processes of one command or one parent together, each short-lived or many (group.py) | the group >= PROVE |

Shares are of the core's busy time above what the other CPUs averaged (the part that needs
explaining), capped at 1; a hypothesis without the data it needs is `unknown`, never guessed.
"""

