"""The one library for reading and changing the node: the host root (live, the live host through a
mount, or a recorded tree), kept-open /proc files, the cgroup hierarchies (mounts, counts, making
and removing cgroups, memory controller files), systemd (systemctl through the right namespace),
NIC statistics (ethtool), and child processes that never outlive nodesleuth. Collectors, the memcg
cost probe, the lab, remedy and the tests all go through it."""
