"""A process tree's memory, from /proc (Linux): each process's RSS and private memory, and
their peaks over a run, sampled every 50 ms."""

from __future__ import annotations

import os
import subprocess
import time


def children(pid: int) -> list[int]:
    """The process's children (of every thread)."""
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(x) for x in f.read().split())
    except OSError:
        pass
    return out


def tree(pid: int) -> list[int]:
    """The process and all its descendants."""
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        todo.extend(children(p))
    return seen


def memory(pid: int) -> tuple[int, int]:
    """(RSS, RssAnon) of one process, in bytes (0, 0 when it is gone)."""
    rss = anon = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("RssAnon:"):
                    anon = int(line.split()[1]) * 1024
    except OSError:
        pass
    return rss, anon


def peaks(proc: subprocess.Popen) -> tuple[int, int, int]:
    """Until `proc` ends, every 50 ms, the memory of it and its descendants summed: the
    peaks of RSS and of private memory (bytes), and the most processes seen."""
    peak_rss = peak_anon = 0
    processes = 1
    while proc.poll() is None:
        pids = tree(proc.pid)
        processes = max(processes, len(pids))
        sizes = [memory(p) for p in pids]
        peak_rss = max(peak_rss, sum(r for r, _ in sizes))
        peak_anon = max(peak_anon, sum(a for _, a in sizes))
        time.sleep(0.05)
    return peak_rss, peak_anon, processes
