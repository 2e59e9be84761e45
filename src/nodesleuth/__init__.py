"""nodesleuth: find the hidden causes of intermittent CPU starvation on Linux nodes."""

import os as _os

# numpy's OpenBLAS starts a worker thread per CPU when numpy is imported, and they spin while they
# settle: most of the import's CPU (benchmarks/results/summary.md, issue 17). nodesleuth does no linear
# algebra, and a tool on a starving node must not fan out threads; a user's own setting wins.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    _os.environ.setdefault(_var, "1")

__version__ = "0.2.0"
