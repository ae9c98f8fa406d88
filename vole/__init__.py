"""The Vole: an LLM search agent over annodb (ARCHITECTURE.md "Interfaces").

It searches with GCL queries, grades what it reads 0-3, and writes each judgment back into
the database as the annotation `judgment:<qid>` (with a searchable note linked to the
document), so later queries can filter on it and a rerun of a topic resumes.

    decision   the model's decision (msgspec Structs, and their JSON Schema)
    model      the model: any OpenAI-compatible endpoint (the only module importing openai)
    backend    where it searches: annodb in process, or `annodb serve` over TCP
    prompts    everything the model reads
    agent      the loop, one topic at a time, with its limits
    outputs    the run file and the JSONL logs under --out
    topics     topics files;  runfile  TREC run and qrels files
    evaluate   nDCG@10, R@100, P@10 with ir-measures
    report     one self-contained HTML page about a run
    judge      UMBRELA-style hole filling of qrels
"""
