"""Fleet: Prometheus exporter, host snapshots, and the drift analysis across many hosts."""
