"""The `annodb` and `vole` commands (main.py, launch.py, vole.py)."""

import os

# annodb runs no BLAS, and OpenBLAS starts a thread a core when numpy (and scipy, which
# numba loads) is imported, each spinning ~0.1 s of CPU before it sleeps: one is enough
# (set before anything imports numpy; this process's children inherit it)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
