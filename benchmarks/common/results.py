"""RESULTS.md and the machine a run is recorded with (every benchmark script records
through here)."""

from __future__ import annotations

import os
import platform

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(os.path.dirname(HERE), "RESULTS.md")  # benchmarks/RESULTS.md


def machine() -> str:
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            mem = f"{int(f.readline().split()[1]) / 1024 / 1024:.0f} GiB"
    except OSError:
        pass
    return (f"{platform.machine()}, {os.cpu_count()} CPUs, {mem}, {platform.system()} "
            f"{platform.release()}, Python {platform.python_version()}")


def record(section: str, text: str) -> None:
    """Replace (or add) this section of RESULTS.md."""
    start, end = f"<!-- {section}:start -->", f"<!-- {section}:end -->"
    old = open(RESULTS, encoding="utf-8").read() if os.path.exists(RESULTS) else \
        "# Benchmark results\n\nWritten by `python -m benchmarks.run`; see README.md.\n"
    block = f"{start}\n{text}\n{end}"
    if start in old:
        new = old[:old.index(start)] + block + old[old.index(end) + len(end):]
    else:
        new = old.rstrip("\n") + "\n\n" + block + "\n"
    with open(RESULTS, "w", encoding="utf-8") as f:
        f.write(new)


def latency_cells(ms) -> str:
    """A latency table's cells: median | p90 | p99 (ms), of an array of times in ms."""
    import numpy as np
    return " | ".join(f"{np.percentile(ms, p):.3f}" for p in (50, 90, 99))


def ratio_cells(ms, base) -> str:
    """The ratios of two engines' median | p90 | p99 (the median's and p99's in bold)."""
    import numpy as np
    r = [np.percentile(ms, p) / np.percentile(base, p) for p in (50, 90, 99)]
    return f"**{r[0]:.2f}x** | {r[1]:.2f}x | **{r[2]:.2f}x**"
