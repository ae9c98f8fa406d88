"""What the benchmarks share (the entry points are the modules of benchmarks/, each run as
`python -m benchmarks.NAME`):

    paths       the repository, the shared data (../shared or $ANNODB_SHARED), work/
    results     RESULTS.md: record a section, with the machine it ran on
    engines     annodb, SQLite FTS5 and tantivy behind the same calls (translate: GCL to theirs)
    corpus      the scale corpus, built from ../shared
    queries     the real LLM queries, and one answered as the server answers it
    processes   a process tree's memory, sampled until it ends
"""
