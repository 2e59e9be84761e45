"""Continuous profiling with time travel: perf samples kept with time, CPU, pid, tid, comm and stack."""
