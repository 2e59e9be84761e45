"""The domain model, below everything: the record types (records.py) and the pure readers of the
kernel's and the tools' text formats (mpstat's arithmetic, /proc and /sys files, the kernel log's
forms and rules, `systemctl show`, perf's cgroup tracepoint lines). Nothing here touches the node:
every function takes text and returns records, so collectors, the store, detectors and tests all
read the same formats the same way. It imports nothing of nodesleuth but errors and timeparse."""
