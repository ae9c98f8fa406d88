"""`vole report`: one self-contained HTML page about a run, built from what `vole run`
wrote under --out (outputs.py): per topic the timeline of model calls (each action and
its reason, the result shown, the results passed over as judged before, the judgment
made, its reason and what became of it), the topic's nDCG@10 when qrels are given; over the
run the model calls and tokens per topic, the distribution of query latency and of the
grades given. The page needs nothing at view time: inline CSS, plots as inline SVG drawn
here, and a few lines of script (a topic count and a filter; everything is shown
without it).

`build(run_dir, qrels)` gathers the data (a `Report`), `render(report)` writes the page.
"""

from __future__ import annotations

import bisect
import html
import math
import os
from collections.abc import Sequence

import msgspec

from . import runfile
from .errors import InputError
from .outputs import AUDIT, RUN, SUMMARY, read_jsonl

SNIPPET_CHARS = 160      # characters of a snippet shown either side of its cover
DOCUMENT_CHARS = 600     # characters of a document shown
LATENCY_BINS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)   # ms, upper


class Result(msgspec.Struct):
    """A result the backend gave in one call: shown to the model, or passed over."""
    op: str                      # query, next or document
    docno: str | None = None
    rank: int | None = None
    text: str = ""               # the snippet (or the document's start)
    passed: bool = False         # passed over: judged before
    error: str | None = None
    done: bool = False           # the query had no (more) results


class Call(msgspec.Struct):
    """One model call of a topic and what the agent did with its answer."""
    call: int
    valid: bool = True
    error: str | None = None     # why the answer was not a valid decision
    action: dict | None = None   # {"type", "gcl"|"qid"|"docno", "reason"}
    executed: bool = True
    judgment: dict | None = None  # {"docno", "grade", "reason", "learned"}
    judged: str | None = None    # recorded, regraded, not shown, note, refused
    results: list[Result] = []
    query_ms: list[float] = []
    input_tokens: int = 0
    output_tokens: int = 0
    model_ms: float = 0.0


class Topic(msgspec.Struct):
    qid: str
    text: str = ""
    calls: list[Call] = []
    stop: str = ""
    model_calls: int = 0         # answered model calls
    failed_attempts: int = 0     # model requests that failed (retried or not)
    input_tokens: int = 0
    output_tokens: int = 0
    grades: dict[str, int] = {}  # docno -> latest grade recorded
    ranked: list[str] = []       # the run file's documents, best first
    ndcg10: float | None = None


class Report(msgspec.Struct):
    directory: str
    topics: list[Topic]
    query_ms: list[float]        # every query's latency, in ms
    grades: list[int]            # documents per grade 0-3 (each topic's latest grades)
    qrels: str | None = None
    ndcg10: float | None = None  # mean over the qrels' topics (a topic not run scores 0)
    qrels_topics: int = 0


# ---------------------------------------------------------------- the data


def build(run_dir: str, qrels: str | None = None) -> Report:
    """The report's data from a run's directory (and qrels, for nDCG@10)."""
    audit_path = os.path.join(run_dir, AUDIT)
    if not os.path.isdir(run_dir):
        raise InputError(f"{run_dir}: no such directory (give the --out of a vole run)")
    if not os.path.exists(audit_path):
        raise InputError(f"{run_dir}: no {AUDIT} here (give the --out of a vole run)")
    topics: dict[str, Topic] = {}
    calls: dict[tuple[str, int], Call] = {}

    def topic(qid: str) -> Topic:
        if qid not in topics:
            topics[qid] = Topic(qid, calls=[], grades={}, ranked=[])
        return topics[qid]

    def call(qid: str, n: int) -> Call:
        key = (qid, n)
        if key not in calls:
            calls[key] = Call(n, results=[], query_ms=[])
            topic(qid).calls.append(calls[key])
        return calls[key]

    query_ms: list[float] = []
    for a in read_jsonl(audit_path):
        qid, kind = a.get("topic"), a.get("kind")
        if not isinstance(qid, str):
            continue
        if kind == "topic":
            topic(qid).text = a.get("text", "")
        elif kind == "model" and isinstance(a.get("call"), int):
            t, c = topic(qid), call(qid, a["call"])
            if "usage" in a:
                t.model_calls += 1
                c.input_tokens = a["usage"].get("input_tokens", 0)
                c.output_tokens = a["usage"].get("output_tokens", 0)
                t.input_tokens += c.input_tokens
                t.output_tokens += c.output_tokens
                c.model_ms = a.get("latency_ms", 0.0)
            else:
                t.failed_attempts += 1
        elif kind == "decision" and isinstance(a.get("call"), int):
            c = call(qid, a["call"])
            c.valid, c.error = a.get("valid", True), a.get("error")
            c.action, c.judgment = a.get("action"), a.get("judgment")
            c.judged, c.executed = a.get("judged"), a.get("executed", True)
            if c.judged in ("recorded", "regraded") and c.judgment:
                t = topic(qid)
                t.grades.pop(c.judgment["docno"], None)    # kept in first-recorded order
                t.grades[c.judgment["docno"]] = c.judgment["grade"]
        elif kind == "backend":
            request, response = a.get("request") or {}, a.get("response") or {}
            op = request.get("op")
            if op == "query":
                query_ms.append(float(a.get("time", 0.0)))
            if not isinstance(a.get("call"), int) or op not in ("query", "next", "document") \
                    or a.get("reissue"):       # an earlier query issued again: not shown
                continue
            c = call(qid, a["call"])
            if op == "query":
                c.query_ms.append(float(a.get("time", 0.0)))
            c.results.append(_result(op, response))
    for qid, rows in _summaries(run_dir).items():
        topic(qid).stop = rows.get("stop", "")
    run_path = os.path.join(run_dir, RUN)
    if os.path.exists(run_path):
        for qid, docs in runfile.read_run(run_path).items():
            topic(qid).ranked = [d for d, _ in docs]
    for t in topics.values():
        t.calls.sort(key=lambda c: c.call)
        _mark_passed(t)
    report = Report(run_dir, sorted(topics.values(), key=lambda t: t.qid), query_ms,
                    [0, 0, 0, 0])
    for t in report.topics:
        for g in t.grades.values():
            if 0 <= g <= 3:
                report.grades[g] += 1
    if qrels is not None:
        judged = runfile.read_qrels(qrels)
        report.qrels, report.qrels_topics = qrels, len(judged)
        for t in report.topics:
            if t.qid in judged:
                t.ndcg10 = ndcg(list(zip(t.ranked, range(len(t.ranked), 0, -1))),
                                judged[t.qid], 10)
        scored = {t.qid: t.ndcg10 for t in report.topics if t.ndcg10 is not None}
        report.ndcg10 = sum(scored.values()) / len(judged) if judged else None
    return report


def _summaries(run_dir: str) -> dict[str, dict]:
    """Each topic's latest summary line."""
    found = {}
    for row in read_jsonl(os.path.join(run_dir, SUMMARY)):
        if isinstance(row.get("qid"), str):
            found[row["qid"]] = row
    return found


def _result(op: str, response: dict) -> Result:
    if not response.get("ok"):
        return Result(op, error=str(response.get("error", "refused")))
    if op == "document":
        return Result(op, response.get("docno"), text=response.get("document", ""))
    if response.get("done"):
        return Result(op, done=True)
    return Result(op, response.get("docno"), response.get("rank"),
                  response.get("snippet", ""))


def _mark_passed(t: Topic) -> None:
    """Results of a query or next other than the last of their call were passed over."""
    for c in t.calls:
        listed = [r for r in c.results if r.op in ("query", "next") and r.docno]
        for r in listed[:-1]:
            r.passed = True
        if listed and c.results[-1] is not listed[-1] and c.results[-1].op != "document":
            listed[-1].passed = True       # passed over too: the query then ran out


def ndcg(ranked: list[tuple[str, float]], graded: dict[str, int], k: int = 10) -> float:
    """nDCG@k as trec_eval's ndcg_cut computes it: the run ordered by score descending
    (ties: docno descending), gain = the grade (at most 0 counts 0), discount log2(rank+1);
    the ideal from the qrels' grades; 0 when nothing is relevant."""
    order = sorted(ranked, key=lambda x: (x[1], x[0]), reverse=True)[:k]
    dcg = sum(max(graded.get(d, 0), 0) / math.log2(i + 2) for i, (d, _) in enumerate(order))
    ideal = sorted((g for g in graded.values() if g > 0), reverse=True)[:k]
    best = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / best if best > 0 else 0.0


def percentile(values: list[float], p: float) -> float:
    """The p-th percentile (nearest rank) of `values`."""
    ordered = sorted(values)
    return ordered[max(math.ceil(p / 100 * len(ordered)) - 1, 0)] if ordered else 0.0


def latency_histogram(values: list[float]) -> list[tuple[str, int]]:
    """(bin label, count): bins up to 1, 2, 5, 10 ... ms, and one past the last."""
    counts = [0] * (len(LATENCY_BINS) + 1)
    for v in values:
        counts[bisect.bisect_left(LATENCY_BINS, v)] += 1
    labels = [f"≤{_ms(b)}" for b in LATENCY_BINS] + [f">{_ms(LATENCY_BINS[-1])}"]
    return list(zip(labels, counts))


def _ms(value: float) -> str:
    return f"{value / 1000:g} s" if value >= 1000 else f"{value:g} ms"


# ---------------------------------------------------------------- the page


def render(report: Report) -> str:
    e = html.escape
    topics = report.topics
    calls = sum(t.model_calls for t in topics)
    tokens = sum(t.input_tokens + t.output_tokens for t in topics)
    judged = sum(len(t.grades) for t in topics)
    q = report.query_ms
    overview = (f"{len(topics)} topics, {calls} model calls, {tokens:,} tokens, "
                f"{judged} documents judged, {len(q)} queries")
    if report.ndcg10 is not None:
        assert report.qrels is not None     # (build sets both)
        overview += (f"; mean nDCG@10 {report.ndcg10:.4f} over the "
                     f"{report.qrels_topics} topics of {e(os.path.basename(report.qrels))}")
    parts = [_HEAD.replace("TITLE", e(f"Vole run report: {report.directory}")),
             f'<header><h1>The Vole: run report</h1><p class="dir">{e(report.directory)}'
             f'</p><p id="overview">{e(overview)}</p></header>',
             '<section id="run"><h2>Over the run</h2>']
    parts.append(_figure("calls-per-topic", "Model calls per topic", bars(
        [(t.qid, t.model_calls) for t in topics], "calls")))
    parts.append(_figure("tokens-per-topic", "Tokens per topic (input + output)", bars(
        [(t.qid, t.input_tokens + t.output_tokens) for t in topics], "tokens")))
    stats = (f"median {percentile(q, 50):.1f} ms, p90 {percentile(q, 90):.1f} ms, p99 "
             f"{percentile(q, 99):.1f} ms, max {max(q, default=0):.1f} ms over {len(q)} "
             "queries (as the Vole timed them, server and network included)")
    parts.append(_figure("query-latency", f"Query latency: {stats}", bars(
        latency_histogram(q), "queries", labels=True)))
    parts.append(_figure("grades", "Grades given (each topic's latest grade of each "
                         "document)", bars([(f"grade {g}", n) for g, n in
                                            enumerate(report.grades)], "documents",
                                           labels=True)))
    parts.append(_topic_table(report))
    parts.append('</section><section id="topics"><h2>Topics</h2>'
                 '<p><label>Filter <input id="filter" type="search" '
                 'placeholder="qid or words"></label> <output id="shown"></output></p>')
    for t in topics:
        parts.append(_topic(t))
    parts.append("</section>" + _SCRIPT + "</body></html>\n")
    return "\n".join(parts)


def _figure(ident: str, caption: str, svg: str) -> str:
    return (f'<figure id="{ident}" class="plot">{svg}<figcaption>'
            f'{html.escape(caption)}</figcaption></figure>')


def bars(values: Sequence[tuple[str, float]], unit: str, labels: bool = False,
         width: int = 900, height: int = 220) -> str:
    """A bar chart as inline SVG: one bar per (label, value), a <title> on each (shown on
    hover), the axis scaled to the largest value; `labels` writes the labels under the
    bars (for a few bars)."""
    e = html.escape
    top = max((v for _, v in values), default=0) or 1
    left, bottom, pad = 56, 40 if labels else 14, 8
    plot_w, plot_h = width - left - pad, height - bottom - pad
    step = plot_w / max(len(values), 1)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
           f'width="{width}" height="{height}" role="img">']
    for frac in (0, 0.5, 1):
        y = pad + plot_h * (1 - frac)
        out.append(f'<line x1="{left}" x2="{width - pad}" y1="{y:.1f}" y2="{y:.1f}" '
                   'class="grid"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">'
                   f'{_number(top * frac)}</text>')
    for i, (label, value) in enumerate(values):
        h = plot_h * value / top
        x = left + i * step + step * 0.1
        out.append(f'<rect x="{x:.1f}" y="{pad + plot_h - h:.1f}" width="{step * 0.8:.1f}" '
                   f'height="{h:.1f}"><title>{e(str(label))}: {_number(value)} {e(unit)}'
                   '</title></rect>')
        if labels:
            out.append(f'<text x="{x + step * 0.4:.1f}" y="{height - bottom + 16}" '
                       f'text-anchor="middle">{e(str(label))}</text>')
    out.append(f'<text x="12" y="{pad + plot_h / 2:.1f}" transform="rotate(-90 12 '
               f'{pad + plot_h / 2:.1f})" text-anchor="middle">{e(unit)}</text></svg>')
    return "".join(out)


def _number(value: float) -> str:
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e4, "k")):
        if value >= scale:
            return f"{value / scale:.3g}{suffix}" if suffix != "k" else \
                f"{value / 1e3:.3g}k"
    return f"{value:,.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"


def _topic_table(report: Report) -> str:
    e = html.escape
    rows = ['<table id="topic-table"><thead><tr><th>topic</th><th>model calls</th>'
            '<th>input tokens</th><th>output tokens</th><th>judged</th><th>grade 3</th>'
            '<th>stop</th><th>nDCG@10</th></tr></thead><tbody>']
    for t in report.topics:
        ndcg10 = "" if t.ndcg10 is None else f"{t.ndcg10:.4f}"
        grade3 = sum(1 for g in t.grades.values() if g == 3)
        rows.append(f'<tr><td><a href="#topic-{e(t.qid)}">{e(t.qid)}</a></td>'
                    f'<td>{t.model_calls}</td><td>{t.input_tokens:,}</td>'
                    f'<td>{t.output_tokens:,}</td><td>{len(t.grades)}</td><td>{grade3}</td>'
                    f'<td>{e(t.stop)}</td><td>{ndcg10}</td></tr>')
    rows.append("</tbody></table>")
    return "".join(rows)


def _topic(t: Topic) -> str:
    e = html.escape
    head = (f"{t.model_calls} calls, {len(t.grades)} judged, stop {t.stop or '?'}"
            + (f", nDCG@10 {t.ndcg10:.4f}" if t.ndcg10 is not None else ""))
    out = [f'<details class="topic" id="topic-{e(t.qid)}" data-qid="{e(t.qid)}">'
           f'<summary><b>{e(t.qid)}</b> {e(t.text)} <span class="meta">{e(head)}</span>'
           '</summary><ol class="timeline">']
    for c in t.calls:
        out.append(_call(c))
    out.append("</ol>")
    if t.ranked:
        out.append('<p class="ranked">Run: ' + ", ".join(
            f'{e(d)} ({t.grades[d]})' if d in t.grades else e(d) for d in t.ranked) + "</p>")
    out.append("</details>")
    return "".join(out)


def _call(c: Call) -> str:
    e = html.escape
    out = [f'<li class="call" data-call="{c.call}"><span class="n">{c.call}</span> ']
    if not c.valid:
        out.append(f'<span class="invalid">not a valid decision: {e(c.error or "")}</span>')
    j = c.judgment
    if j:       # the judgment comes first: it grades what the call before showed
        out.append(f'<div class="judgment g{j.get("grade")}">judged '
                   f'<code>{e(str(j.get("docno")))}</code> grade {e(str(j.get("grade")))} '
                   f'<span class="outcome">({e(c.judged or "")})</span> '
                   f'<span class="why">{e(j.get("reason", ""))}</span></div>')
    a = c.action or {}
    kind = a.get("type")
    if kind:
        what = a.get("gcl") or a.get("qid") or a.get("docno") or ""
        out.append(f'<span class="action {e(kind)}">{e(kind)} <code>{e(what)}</code></span>')
        if not c.executed:
            out.append(' <span class="meta">(not done: a limit was reached)</span>')
        if a.get("reason"):
            out.append(f' <span class="why">{e(a["reason"])}</span>')
    for r in c.results:
        out.append(_shown(r))
    if c.query_ms or c.input_tokens:
        out.append(f'<div class="meta">tokens {c.input_tokens:,} in, {c.output_tokens:,} '
                   f'out; model {c.model_ms:.0f} ms'
                   + "".join(f"; query {ms:.1f} ms" for ms in c.query_ms) + "</div>")
    out.append("</li>")
    return "".join(out)


def _shown(r: Result) -> str:
    e = html.escape
    if r.error is not None:
        return f'<div class="result error">{e(r.op)} refused: {e(r.error)}</div>'
    if r.done:
        return f'<div class="result done">{e(r.op)}: no (more) results</div>'
    cls = "result passed" if r.passed else "result"
    where = f"rank {r.rank} " if r.rank is not None else ""
    text = _excerpt(r.text) if r.op != "document" else e(r.text[:DOCUMENT_CHARS]) + (
        " …" if len(r.text) > DOCUMENT_CHARS else "")
    label = "passed over (judged before)" if r.passed else "shown"
    return (f'<div class="{cls}">{e(r.op)} {label}: {where}<code>{e(r.docno or "")}'
            f'</code><blockquote>{text}</blockquote></div>')


def _excerpt(snippet: str) -> str:
    """The snippet around its cover, escaped, the cover marked."""
    start, end = snippet.find("<cover>"), snippet.find("</cover>")
    if start < 0 or end < start:
        return html.escape(snippet[:2 * SNIPPET_CHARS])
    before = snippet[max(start - SNIPPET_CHARS, 0):start]
    cover = snippet[start + len("<cover>"):end]
    after = snippet[end + len("</cover>"):end + len("</cover>") + SNIPPET_CHARS]
    return (("… " if start > SNIPPET_CHARS else "") + html.escape(before) + "<mark>"
            + html.escape(cover) + "</mark>" + html.escape(after) + " …")


_HEAD = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>TITLE</title>
<style>
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5em auto; max-width: 1100px;
       padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } .dir { color: #666; margin: 0; }
figure.plot { margin: 1em 0; } figure svg { max-width: 100%; height: auto; }
svg rect { fill: #4a78b5; } svg rect:hover { fill: #d9822b; }
svg text { font-size: 11px; fill: #444; } svg .grid { stroke: #ddd; }
figcaption { color: #555; font-size: 0.9em; }
table { border-collapse: collapse; font-size: 0.9em; }
td, th { border-bottom: 1px solid #eee; padding: 2px 8px; text-align: right; }
td:first-child, th:first-child, td:nth-child(7) { text-align: left; }
details.topic { border-top: 1px solid #ddd; padding: 0.4em 0; }
details.topic > summary { cursor: pointer; } .meta { color: #777; font-size: 0.9em; }
ol.timeline { padding-left: 0; list-style: none; }
li.call { border-left: 3px solid #ccd; margin: 0.5em 0; padding-left: 0.6em; }
li.call .n { display: inline-block; min-width: 2em; color: #888; }
.action.query { color: #1b5e20; } .action.next { color: #0d47a1; }
.action.document { color: #6a1b9a; } .why { color: #555; font-style: italic; }
.result { margin: 0.2em 0 0.2em 2em; } .result.passed { color: #999; }
.result.error, .invalid { color: #b71c1c; }
blockquote { margin: 0.2em 0 0.2em 1em; font-size: 0.9em; color: #333; }
.result.passed blockquote { display: none; }
mark { background: #fff3b0; }
.judgment { margin: 0.1em 0 0.2em 0; } .judgment.g3 { color: #1b5e20; font-weight: 600; }
.judgment.g2 { color: #33691e; } .judgment.g0 { color: #777; }
code { font-size: 0.92em; }
</style></head><body>"""

_SCRIPT = """<script>
(function () {
  var topics = document.querySelectorAll("details.topic");
  var shown = document.getElementById("shown");
  function count() {
    var n = 0;
    topics.forEach(function (t) { if (!t.hidden) n++; });
    shown.textContent = n + " of " + topics.length + " topics";
  }
  document.getElementById("filter").addEventListener("input", function (ev) {
    var words = ev.target.value.toLowerCase().split(/\\s+/).filter(Boolean);
    topics.forEach(function (t) {
      var text = t.querySelector("summary").textContent.toLowerCase();
      t.hidden = !words.every(function (w) { return text.indexOf(w) >= 0; });
    });
    count();
  });
  count();
  var plots = [];
  document.querySelectorAll("figure.plot svg").forEach(function (s) {
    var r = s.getBoundingClientRect();
    plots.push(Math.round(r.width) + "x" + Math.round(r.height) + ":" +
               s.querySelectorAll("rect").length);
  });
  var loaded = performance.getEntriesByType("resource").length;
  document.body.setAttribute("data-check", JSON.stringify(
    {topics: topics.length, plots: plots, resources: loaded}));
})();
</script>"""


def write(run_dir: str, out: str | None = None, qrels: str | None = None) -> tuple[str,
                                                                                    Report]:
    """Build and write the page; (its path, the report)."""
    report = build(run_dir, qrels)
    path = out or os.path.join(run_dir, "report.html")
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(render(report))
    except OSError as err:
        raise InputError(f"{path}: {err.strerror or err}") from None
    return path, report


def figures(report: Report) -> dict:
    """The run's figures, for scripts (`vole report --json`)."""
    q = report.query_ms
    return {"topics": len(report.topics),
            "model_calls": sum(t.model_calls for t in report.topics),
            "failed_attempts": sum(t.failed_attempts for t in report.topics),
            "input_tokens": sum(t.input_tokens for t in report.topics),
            "output_tokens": sum(t.output_tokens for t in report.topics),
            "judged": sum(len(t.grades) for t in report.topics),
            "grades": report.grades,
            "queries": len(q),
            "query_ms": {"median": percentile(q, 50), "p90": percentile(q, 90),
                         "p99": percentile(q, 99), "max": max(q, default=0.0)},
            "ndcg10": report.ndcg10,
            "per_topic": {t.qid: {"calls": t.model_calls, "judged": len(t.grades),
                                  "stop": t.stop, "ndcg10": t.ndcg10}
                          for t in report.topics}}
