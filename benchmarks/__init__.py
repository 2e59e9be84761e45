"""Side-by-side benchmarks; each prints one JSON object. `python -m benchmarks` runs them all."""

import os as _os

# The environment the benchmarks were started with, before any of them imports nodesleuth (which sets
# OPENBLAS_NUM_THREADS=1 in its process): contenders start from it, so an older tree run beside this one
# (--baseline-src, --before-src) does not inherit a setting it would not make itself.
BASE_ENV = dict(_os.environ)
