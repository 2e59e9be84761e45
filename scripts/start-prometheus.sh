#!/usr/bin/env bash
# Start a real Prometheus server on loopback (127.0.0.1:19090) with the tests' scrape config.
# Its data goes to $NODESLEUTH_PROM_DATA (made if unset); scripts/stop-prometheus.sh DIR stops it
# and removes the data. Idempotent: does nothing if one is already answering.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${NODESLEUTH_PROM_PORT:-19090}
if curl -sf "http://127.0.0.1:${PORT}/-/ready" >/dev/null 2>&1; then exit 0; fi
DATA=${NODESLEUTH_PROM_DATA:-$(mktemp -d /var/tmp/nodesleuth-prom.XXXXXX)}
mkdir -p "$DATA"
setsid prometheus --config.file="$PWD/tests/prometheus/prometheus.yml" --storage.tsdb.path="$DATA" \
    --web.listen-address="127.0.0.1:${PORT}" --web.enable-lifecycle \
    >"$DATA/prometheus.log" 2>&1 < /dev/null &
echo $! > "$DATA/pid"
for _ in $(seq 1 150); do
    if curl -sf "http://127.0.0.1:${PORT}/-/ready" >/dev/null 2>&1; then
        echo "prometheus ready on 127.0.0.1:${PORT} (data $DATA)"; exit 0
    fi
    sleep 0.2
done
echo "prometheus did not start:"; tail -20 "$DATA/prometheus.log"; exit 1
