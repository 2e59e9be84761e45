"""The counters every profiler runner keeps (perf record chunks, perf record through its pipe, the
direct ring reader, the cgroup churn recorder), so the recorder, `profile run` and the exporter read
them as plain attributes whichever runner they were given."""

from __future__ import annotations


class RunnerCounters:
    """What a runner did so far; `method` says how it samples ("direct" | "perf")."""

    method = "perf"

    def __init__(self):
        self.samples = 0  # stored samples (events, for the churn recorder)
        self.chunks = 0  # stored batches
        self.restarts = 0  # perf restarts after it exited
        self.dropped_chunks = 0  # batches not stored (an error each)
        self.lost_samples = 0  # samples the kernel or perf dropped (a ring buffer was full)
        self.unnamed_samples = 0  # samples stored with frames perf script had not named in time
        self.ingest_cpu = 0.0  # CPU seconds of this process spent reading, decoding and storing
        self.error: str | None = None
