#!/usr/bin/env bash
# Stop the Prometheus that scripts/start-prometheus.sh started with data in DIR, and remove DIR.
set -uo pipefail
DATA=${1:?usage: stop-prometheus.sh DATA_DIR}
if [ -f "$DATA/pid" ]; then
    PID=$(cat "$DATA/pid")
    kill "$PID" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$PID" 2>/dev/null
fi
case "$DATA" in /var/tmp/nodesleuth-prom.*) rm -rf "$DATA" ;; esac
rm -rf /var/tmp/nodesleuth-prom-targets
exit 0
