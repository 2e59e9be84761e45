"""Side-by-side benchmarks; each prints one JSON object. `python -m benchmarks` runs them all."""
