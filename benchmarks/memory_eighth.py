"""The eighth round of LoCoMo recall variants (issue 37, item 5), scored from annodb's own
figures rather than the numpy prototype's: each tuning question's score of every memory
of its conversation and the parts of it (recall.py's formula: turn, passage, labels, the
length prior), taken from recall.search with one setting zeroed at a time, the asking
prior off (the seventh round's default). A variant multiplies in a prior computed from
the memory's text alone (what Memory could store as it remembers it) or re-weighs the
parts, so each row is annodb's ranking as it would be with that term, to the bit for a
factor; the rows on the memories' words without the question's names rank the question
asked again without them (`--noname`). The tuning half only (conv-26, -30, -41, -42,
-43); RESULTS.md, "Agent memory on LoCoMo: eighth round", holds the table.

    python benchmarks/memory_eighth.py             # the variants (the tuning half)
    python benchmarks/memory_eighth.py --annodb    # the asking prior's weights in annodb
                                                   # itself (Memory.recall, tuning half)
    python benchmarks/memory_eighth.py --misses    # the rate of each text feature among
                                                   # the evidence ranked 31-200, and the rest
"""

from __future__ import annotations

import os
import pickle
import re
import sys
from dataclasses import replace

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from benchmarks.memory import (DATA, DEPTH, KS, TUNE, WORK, build_annodb,  # noqa: E402
                               questions, recall_at, turns, when)

OFF = {"asks": 0.0}   # the seventh round's default: the parts below are its
PARTS = {"full": {}, "nolen": {"length": 0.0}, "nopass": {"passage": 0.0},
         "turn": {"passage": 0.0, "labels": 0.0, "dates": 0.0, "length": 0.0}}
DB = os.path.join(WORK, "eighth.db")


def ensure_db(rows) -> str:
    if not os.path.isdir(DB):
        build_annodb(DB, rows)
    return DB


def scores(qs, rows, order, texts=None, names=PARTS):
    """{qid: {part: scores of the conversation's memories in address order}} for the
    questions (or texts[qid] in their place), each part the default with OFF and its
    changes."""
    import annodb
    from annodb import memory as M, recall
    at = {c: {d: i for i, d in enumerate(v)} for c, v in order.items()}
    mem = annodb.Memory(ensure_db(rows))
    out = {}
    try:
        for q in qs:
            n = len(order[q["conv"]])
            text = q["question"] if texts is None else texts[q["qid"]]
            got = {}
            for name, change in names.items():
                v = np.zeros(n)
                with mem.db.read() as r:
                    for h in recall.search(r, text, k=n, container=M.where_node(
                            {"conv": q["conv"]}), settings=replace(recall.CONTEXT, **OFF,
                                                                   **change),
                            snippets=False, scan=True):
                        v[at[q["conv"]][h.docno]] = h.score
                got[name] = v
            out[q["qid"]] = got
    finally:
        mem.close()
    return out


def cached(name, make):
    path = os.path.join(WORK, f"eighth-{name}.pkl")
    if os.path.isfile(path):
        with open(path, "rb") as f:
            return pickle.load(f)
    got = make()
    with open(path, "wb") as f:
        pickle.dump(got, f)
    return got


# what a memory's text says, as Memory could store it ---------------------------------

_MONTHS = "january|february|march|april|may|june|july|august|september|october|november|" \
    "december"
_DAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
TIME_WORDS = re.compile(  # a time expression of any kind (broader than recall's events)
    rf"\b(yesterday|last night|tonight|tomorrow|ago|(last|this|next|past|previous) "
    rf"(week|weekend|month|year|summer|winter|spring|fall|night)|(on |last |this |next )?"
    rf"({_DAYS})s?|({_MONTHS})|(1[89]|20)\d\d)\b", re.I)
FIRST_PERSON = re.compile(r"\b(i|my|me|we|our|us|i'm|i've|i'd|i'll|mine)\b", re.I)
_I = ("I", "I'm", "I've", "I'll", "I'd", "I’m")


def specific(text: str) -> int:
    """The words that name something: capitalised ones not opening a sentence (after the
    text's start, . ! ? : or a quotation mark), not "I", and numbers."""
    n, opening = 0, True
    for m in re.finditer(r"[A-Za-z][A-Za-z'’]*|\d+|[.!?:\"“”]", text):
        w = m.group()
        if w in '.!?:"“”':
            opening = opening or w != "”"
            continue
        if w[0].isdigit() or (w[0].isupper() and not opening and w not in _I):
            n += 1
        opening = False
    return n


def sentences_asking(text: str) -> float:
    """The share of a text's sentences (recall.asking's, those holding a token) that ask."""
    from annodb import recall
    from annodb.tokenizer import tokens
    found = [(w, m) for w, m in recall._SENTENCE.findall(text) if tokens(w)]
    return sum("?" in m for _, m in found) / len(found) if found else 0.0


def features(rows) -> dict:
    """{docid: {name: value}} of each memory's text (and time)."""
    from annodb import recall
    from annodb.tokenizer import tokens
    out = {}
    for d in rows:
        t = d["text"]
        out[d["docid"]] = {
            "L": len(tokens(t)),
            "asked": recall.asking(t),
            "sentences asking": sentences_asking(t),
            "ends": float(t.rstrip().rstrip("\"'”’").rstrip().endswith("?")),
            "event": float(recall.memory_event(t, when(d["date_time"])) is not None),
            "time words": float(bool(TIME_WORDS.search(t))),
            "first person": float(bool(FIRST_PERSON.search(t))),
            "specific": float(specific(t)),
        }
    return out


# the variants ------------------------------------------------------------------------

def ranked(s, ids, depth=DEPTH):
    o = np.argsort(-s, kind="stable")
    return [ids[i] for i in o[s[o] > 0][:depth]]


def rows_eighth(P, X, NN, avg):
    """(name, fn(question, parts) -> scores) of the round's variants."""
    def fac(name, e):
        return lambda q, p: p["full"] * (1 + e * X[name][q["conv"]])

    def asks(g, then=None):
        def f(q, p):
            s = p["full"] * (1 - g * X["asked"][q["conv"]])
            return s if then is None else then(q, p, s)
        return f

    def spec(form, w, mul=True, g=0.0):
        x = np.concatenate(list(X["specific"].values()))
        mean, lmean = x.mean(), np.log1p(x).mean()

        def f(q, p):
            v = X["specific"][q["conv"]]
            v = np.log1p(v) / lmean if form == "log" else v / (v + mean)
            s = p["full"] * (1 - g * X["asked"][q["conv"]])
            return s * (1 + w * v) if mul else s + (s > 0) * w * v
        return f

    def stated(w):
        def f(q, p):
            L = X["L"][q["conv"]]
            D = L * (1 - X["asked"][q["conv"]])
            return p["nolen"] * (1 + w * D / (D + avg))
        return f

    def name_share(q, p):
        t = p["turn"]
        return np.where(t > 0, 1 - np.minimum(NN[q["qid"]]["turn"] / np.maximum(t, 1e-12),
                                              1), 0.0)

    def more_passage(a):
        return lambda q, p: p["full"] + a * name_share(q, p) * (p["full"] - p["nopass"])

    def other_passage(a, shared=True):
        def f(q, p):
            nn = NN[q["qid"]]
            add = (nn["full"] - nn["nopass"]) * (name_share(q, p) if shared else 1.0)
            return p["full"] + (p["full"] > 0) * a * add
        return f

    def name_part(a):
        return lambda q, p: NN[q["qid"]]["full"] * (p["full"] > 0) + \
            a * (p["full"] - NN[q["qid"]]["full"])

    out = [("**the seventh round's default**", lambda q, p: p["full"])]
    out += [(f"event reported (Memory's (event)from): x (1 + {e})", fac("event", e))
            for e in (0.05, 0.1, 0.15, 0.2, 0.3, 0.5)]
    out += [(f"event reported: + {w}", lambda q, p, w=w: p["full"] + (p["full"] > 0) * w *
             X["event"][q["conv"]]) for w in (0.5, 1.0, 2.0)]
    out += [(f"any time expression (a weekday, a month, a year, ago, last / next ...): "
             f"x (1 + {e})", fac("time words", e)) for e in (0.05, 0.1, 0.2, 0.3)]
    out += [(f"specific words (capitalised inside a sentence, numbers): x (1 + {w} x "
             f"{'ln(1 + x) / mean' if form == 'log' else 'x / (x + mean)'})",
             spec(form, w)) for form in ("log", "sat") for w in (0.1, 0.2, 0.3)]
    out += [(f"specific words: + {w} x ln(1 + x) / mean", spec("log", w, False))
            for w in (0.5, 1.0)]
    out += [(f"name-only matches: passage weight x (1 + {a} x the names' share of turn)",
             more_passage(a)) for a in (0.5, 1.0, 2.0)]
    out += [(f"name-only matches: + {a} x the names' share x the other words' passage",
             other_passage(a)) for a in (0.25, 0.5, 1.0)]
    out += [(f"+ {a} x the other words' passage (every memory)",
             other_passage(a, False)) for a in (0.25, 0.5)]
    out += [(f"the names' part of the score x {a}", name_part(a)) for a in (0.5, 0.75, 1.25)]
    out += [(f"a memory ending in a question: x (1 - {g})", lambda q, p, g=g: p["full"] *
             (1 - g * X["ends"][q["conv"]])) for g in (0.05, 0.1, 0.15, 0.2, 0.3)]
    out += [(f"asking: x (1 - {g} x the share of sentences asking)", lambda q, p, g=g:
             p["full"] * (1 - g * X["sentences asking"][q["conv"]])) for g in (0.3, 0.4, 0.5)]
    out += [(f"the length prior over the tokens not asking, {w}", stated(w))
            for w in (0.3, 0.4, 0.5, 0.7)]
    out += [(f"**asking: x (1 - {g} x the share of tokens in sentences asking)**"
             if g == 0.4 else
             f"asking: x (1 - {g} x the share of tokens in sentences asking)", asks(g))
            for g in (0.1, 0.2, 0.3, 0.35, 0.4, 0.5, 0.6)]

    def times(name, e):
        return lambda q, p, s: s * (1 + e * X[name][q["conv"]])
    out += [(f"asking 0.4, {name} x (1 + {e})", asks(0.4, times(name, e)))
            for name, es in (("event", (0.05, 0.1, 0.15)), ("time words", (0.05, 0.1)),
                             ("first person", (0.05, 0.1, 0.2))) for e in es]
    out += [(f"asking 0.4, specific words x (1 + {w} x x / (x + mean))",
             spec("sat", w, g=0.4)) for w in (0.1, 0.2)]
    return out


def main() -> int:
    from annodb.tokenizer import tokens
    rows, qs = turns(), questions()
    tune = [q for q in qs if q["conv"] in TUNE]
    order: dict = {}
    for d in rows:
        order.setdefault(d["conv"], []).append(d["docid"])
    if "--annodb" in sys.argv:
        return annodb_rows(rows, tune)
    F = features(rows)
    X = {k: {c: np.array([F[d][k] for d in ids], float) for c, ids in order.items()}
         for k in F[rows[0]["docid"]]}
    P = cached("parts", lambda: scores(tune, rows, order))
    if "--misses" in sys.argv:
        return misses(tune, P, F, order)
    names: dict = {}
    for d in rows:
        names.setdefault(d["conv"], set()).update(tokens(d["speaker"]))
    # (the question without the words its conversation's labels hold: its speakers' names)
    def without(text, names):
        return re.sub(r"[A-Za-z]+", lambda m: " " if m.group().lower() in names else
                      m.group(), text)
    texts = {q["qid"]: without(q["question"], names[q["conv"]]) for q in tune}
    NN = cached("noname", lambda: scores(tune, rows, order, texts))
    avg = np.mean([F[d["docid"]]["L"] for d in rows])
    print("| variant (annodb's parts, tuning half) | tune: @5 / @10 / @25 / @50 | sum |")
    print("|---|---|---|")
    for name, fn in rows_eighth(P, X, NN, avg):
        run = {q["qid"]: ranked(fn(q, P[q["qid"]]), order[q["conv"]]) for q in tune}
        t = {k: recall_at(run, tune, k) for k in KS}
        print(f"| {name} | {' / '.join(f'{t[k]:.1f}' for k in KS)} | "
              f"{sum(t.values()):.1f} |", flush=True)
    return 0


def misses(tune, P, F, order) -> int:
    """Each feature's mean over the evidence ranked 31-200 and over the other memories
    ranked there (the seventh round's default)."""
    ev, other = [], []
    for q in tune:
        ids, s = order[q["conv"]], P[q["qid"]]["full"]
        o = np.argsort(-s, kind="stable")
        evidence = {q["conv"] + ":" + e for e in q["evidence_raw"]}
        for i in o[30:200]:
            if s[i] > 0:
                (ev if ids[i] in evidence else other).append(F[ids[i]])
    print(f"{len(ev)} evidence memories ranked 31-200, {len(other)} others")
    for k in F[next(iter(F))]:
        a, b = np.mean([f[k] for f in ev]), np.mean([f[k] for f in other])
        print(f"{k:14s} evidence {a:.3f}  others {b:.3f}  ratio {a / max(b, 1e-9):.2f}")
    return 0


def annodb_rows(rows, tune) -> int:
    """Memory.recall on the tuning half, the asking prior's weight varied (recall.Context)."""
    import annodb
    from annodb import memory as M, recall
    mem = annodb.Memory(ensure_db(rows))
    print("| annodb, tuning half | tune: @5 / @10 / @25 / @50 | sum |")
    print("|---|---|---|")
    try:
        for g in (0.0, 0.2, 0.3, 0.4, 0.5, 0.6):
            settings = replace(recall.CONTEXT, asks=g)
            run = {}
            for q in tune:
                with mem.db.read() as r:
                    run[q["qid"]] = [h.docno for h in recall.search(
                        r, q["question"], k=DEPTH, container=M.where_node(
                            {"conv": q["conv"]}), settings=settings, snippets=False)]
            t = {k: recall_at(run, tune, k) for k in KS}
            print(f"| asks {g} | {' / '.join(f'{t[k]:.1f}' for k in KS)} | "
                  f"{sum(t.values()):.1f} |", flush=True)
        run = {q["qid"]: [e.docno for e in mem.recall(q["question"], k=DEPTH, where={
            "conv": q["conv"]}, gcl=False)] for q in tune}
        t = {k: recall_at(run, tune, k) for k in KS}
        print(f"| Memory.recall (the default, asks {recall.CONTEXT.asks}) | "
              f"{' / '.join(f'{t[k]:.1f}' for k in KS)} | {sum(t.values()):.1f} |")
    finally:
        mem.close()
    return 0


if __name__ == "__main__":
    if not os.path.isfile(os.path.join(DATA, "corpus.jsonl")):
        print(f"needs LoCoMo in {DATA} (not found); set ANNODB_SHARED", file=sys.stderr)
        sys.exit(1)
    sys.exit(main())
