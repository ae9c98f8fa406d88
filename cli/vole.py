"""The `vole` command line: run the search agent, evaluate a run, report on it, fill qrels
holes.

A thin layer over the vole package. Every error is one line `vole: error: ...` on stderr,
exit 2 for usage errors and 1 for everything else; no traceback (VOLE_DEBUG=1 shows it).
"""

from __future__ import annotations

import os
import signal
import sys
import threading

import click
import msgspec

from . import errors as _errors

from annodb import kernels as _kernels
from annodb.database import DEFAULT_PATH
from annodb.errors import AnnodbError
from vole import agent as _agent
from vole import judge as _judge
from vole import prompts as _prompts
from vole.backend import open_backend
from vole.errors import VoleError
from vole.model import APIS, Model
from vole.outputs import RUN, Outputs
from vole.topics import read_topics


def fail(message: str, code: int = 1):
    _errors.fail("vole", message, code)


class Group(_errors.ErrorGroup):
    prog = "vole"
    debug_env = "VOLE_DEBUG"
    expected = (VoleError, AnnodbError)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
def vole():
    """The Vole: an LLM search agent over annodb, with evaluation, reports and hole filling.

    \b
    Example:
      vole run --topics topics.tsv --db msmarco.db --model gpt-4.1 --out runs/a
      vole eval --qrels qrels.txt runs/a/vole.run
      vole report runs/a --qrels qrels.txt
    """
    _kernels.on_compile(_say_compiling)


def _say_compiling() -> None:
    click.echo("vole: compiling annodb's numba kernels on their first use (up to about a "
               "minute on 2 cores); they are cached for later runs", err=True)


def backend_options(f):
    f = click.option("--token", envvar="ANNODB_TOKEN", metavar="T",
                     help="The server's token, when it requires one.")(f)
    f = click.option("--server", metavar="HOST:PORT",
                     help="Search through a running `annodb serve` instead of --db.")(f)
    f = click.option("--db", metavar="PATH", type=click.Path(),
                     help=f"The database to search (default: $ANNODB_DB or {DEFAULT_PATH}).")(f)
    return f


def model_options(f):
    f = click.option("--no-schema", is_flag=True,
                     help="Do not send the JSON Schema as the structured-output format "
                          "(for endpoints that do not support it).")(f)
    f = click.option("--api", type=click.Choice(APIS), default="responses",
                     show_default=True, help="The Responses or the Chat Completions API.")(f)
    f = click.option("--base-url", metavar="URL", envvar="OPENAI_BASE_URL",
                     help="An OpenAI-compatible endpoint (e.g. http://127.0.0.1:8000/v1); "
                          "the key may then be omitted.")(f)
    f = click.option("--model", "model_name", required=True, metavar="NAME",
                     help="The model name. The key comes from OPENAI_API_KEY.")(f)
    return f


def _check_backend(db, server) -> None:
    if db and server:
        raise click.UsageError("give --db or --server, not both")


def _backend(db, server, token, audit=None, readonly=False):
    _check_backend(db, server)
    if not server:
        db = db or os.environ.get("ANNODB_DB") or DEFAULT_PATH
    return open_backend(db=db, server=server, token=token, readonly=readonly, audit=audit)


def _model(model_name, base_url, api, no_schema, audit=None) -> Model:
    return Model(model_name, api=api, base_url=base_url or None, structured=not no_schema,
                 audit=audit)


@vole.command()
@click.option("--topics", "topics_path", required=True, type=click.Path(dir_okay=False),
              help="Topics: one qid<TAB>text per line.")
@backend_options
@model_options
@click.option("--out", default="vole-out", show_default=True, type=click.Path(file_okay=False),
              help="Directory for vole.run, conversation.jsonl, audit.jsonl, summary.jsonl.")
@click.option("--max-calls", type=click.IntRange(min=1), default=_agent.MAX_CALLS,
              show_default=True, help="Model calls per topic.")
@click.option("--max-judgments", type=click.IntRange(min=1), default=_agent.MAX_JUDGMENTS,
              show_default=True, help="Distinct documents judged per topic.")
@click.option("--instructions", "instructions_path", type=click.Path(dir_okay=False),
              metavar="FILE", help="Instructions for the model from this file (e.g. the "
                                   "published Vole runner's) instead of ours.")
@click.option("--protocol", type=click.Choice(sorted(_prompts.PROTOCOLS)), default="ours",
              show_default=True,
              help="The observations' form: ours, or the published runner's (reference: "
                   "server replies as JSON lines, with a skipped list).")
@click.option("--continue", "continue_topics", is_flag=True,
              help="Give topics that stopped at --max-calls in an earlier run that many "
                   "more calls (a rerun skips them otherwise).")
def run(topics_path, db, server, token, model_name, base_url, api, no_schema, out, max_calls,
        max_judgments, instructions_path, protocol, continue_topics) -> None:
    """Search for each topic, judging documents 0-3 and recording the judgments.

    Each judgment is committed to the database at once as the annotation
    judgment:<qid> over the document (value: the grade) with a note holding the reason
    (kept apart from the collection), so `(>> : (>= judgment:<qid> 3))` finds the grade-3
    documents. A topic's stop is recorded too: rerunning the same command skips the
    topics that reached a limit and resumes the others where they were (exactly: the run
    file comes out as an uninterrupted run's). Ctrl-C or SIGTERM says which topics are
    complete. Prints one summary line per topic.

    \b
    Example:
      vole run --topics topics.tsv --db msmarco.db --model gpt-4.1 --out runs/a
      vole run --topics topics.tsv --server 127.0.0.1:4000 --model qwen3 \\
          --base-url http://127.0.0.1:8000/v1 --api chat --max-calls 50
      vole run --topics topics.tsv --db msmarco.db --model gpt-4.1 --out runs/p \\
          --instructions vole-instructions.txt --protocol reference
    """
    _check_backend(db, server)
    topics = read_topics(topics_path)
    instructions = _read_instructions(instructions_path) if instructions_path else None
    summaries: list = []
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if main else None
    try:
        with Outputs(out) as outputs:
            with _backend(db, server, token, outputs.audit) as backend, \
                    _model(model_name, base_url, api, no_schema, outputs.audit) as model:
                _agent.run(topics, model, backend, outputs,
                           _agent.Limits(max_calls, max_judgments), echo=click.echo,
                           instructions=instructions, protocol=protocol,
                           continue_topics=continue_topics, summaries=summaries)
    except KeyboardInterrupt as err:
        signame = "SIGTERM" if isinstance(err, _Terminated) else "SIGINT"
        complete = [s.qid for s in summaries if s.complete]
        rest = [t.qid for t in topics if t.qid not in complete]
        click.echo(f"vole: interrupted ({signame}): {len(complete)} of {len(topics)} topics "
                   f"complete ({', '.join(complete) or 'none'}); not complete: "
                   f"{', '.join(rest) or 'none'}. Every judgment made is recorded in the "
                   "database: rerun the same command to resume.", err=True)
        sys.exit(143 if isinstance(err, _Terminated) else 130)
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
    failed = [s for s in summaries if s.error]
    click.echo(f"vole: {len(summaries)} topics, {sum(s.judgments for s in summaries)} "
               f"judgments; wrote {os.path.join(out, RUN)}", err=True)
    if len(summaries) < len(topics):
        fail(f"{summaries[-1].error} (the run stopped: {len(topics) - len(summaries)} "
             "topics not run)")
    if failed:
        fail(f"{len(failed)} of {len(summaries)} topics stopped on an error "
             f"(first: {failed[0].qid}: {failed[0].error})")


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the run is so it ends as Ctrl-C does."""


def _interrupt(signum, frame):
    raise _Terminated()


def _read_instructions(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as err:
        fail(f"{path}: {err.strerror or err}")
    except UnicodeDecodeError as err:
        fail(f"{path}: not UTF-8 text ({err.reason})")
    if not text.strip():
        fail(f"{path}: the instructions file is empty")
    return text


@vole.command(name="eval")
@click.option("--qrels", required=True, type=click.Path(dir_okay=False),
              help="TREC qrels: qid iteration docno grade.")
@click.argument("run_path", metavar="RUN", type=click.Path(dir_okay=False))
@click.option("--per-topic", is_flag=True, help="One line per topic and measure, too.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option("--measure", "measures", multiple=True, metavar="M",
              help="An ir-measures measure; repeat for several (default: nDCG@10, R@100, "
                   "P@10).")
def eval_(qrels, run_path, per_topic, as_json, measures):
    """Score a TREC run against qrels with ir-measures (nDCG@10, R@100, P@10).

    Means are over the topics of the qrels; a topic missing from the run scores 0.
    Lines are `measure<TAB>topic<TAB>value`, the mean under topic `all`.

    \b
    Example:
      vole eval --qrels man86.qrels runs/a/vole.run
      vole eval --qrels man86.qrels runs/a/vole.run --per-topic --measure "R(rel=2)@100"
    """
    try:
        from vole import evaluate as _evaluate
    except ImportError as err:
        if err.name not in ("ir_measures", "pytrec_eval", "scipy"):
            raise
        fail(f"vole eval needs the evaluation extra ({err.name} is not installed): "
             "pip install 'annodb[eval]'")
    result = _evaluate.evaluate(qrels, run_path, measures or _evaluate.MEASURES)
    if as_json:
        value = msgspec.to_builtins(result)
        if not per_topic:
            value.pop("per_topic")
        click.echo(msgspec.json.encode(value).decode())
        return
    if per_topic:
        for qid, values in result.per_topic.items():
            for name, value in values.items():
                click.echo(f"{name}\t{qid}\t{value:.4f}")
    for name, value in result.measures.items():
        click.echo(f"{name}\tall\t{value:.4f}")
    if result.missing:
        click.echo(f"vole: {len(result.missing)} of {result.topics} qrels topics are not in "
                   "the run (scored 0)", err=True)


@vole.command()
@click.argument("run_dir", metavar="RUN_DIR", type=click.Path(file_okay=False))
@click.option("--qrels", type=click.Path(dir_okay=False),
              help="TREC qrels: each topic's nDCG@10 is shown (and their mean).")
@click.option("-o", "--output", metavar="FILE", type=click.Path(dir_okay=False),
              help="Where to write the page (default: RUN_DIR/report.html).")
@click.option("--json", "as_json", is_flag=True,
              help="Also print the run's figures as JSON (topics, calls, tokens, query "
                   "latency, grades, nDCG@10).")
def report(run_dir, qrels, output, as_json):
    """Write one self-contained HTML page about a run (the --out of `vole run`).

    Per topic, the timeline of model calls: each action and its reason, the result
    shown, the results passed over as judged before, the judgment and its reason (and
    nDCG@10 with --qrels); over the run, model calls and tokens per topic, the query
    latency distribution and the grades given. The page loads nothing: open it anywhere.

    \b
    Example:
      vole report runs/a --qrels man86.qrels
      vole report runs/a -o /tmp/a.html --json
    """
    from vole import report as _report
    path, built = _report.write(run_dir, output, qrels)
    figures = _report.figures(built)
    if as_json:
        click.echo(msgspec.json.encode(figures).decode())
    click.echo(f"vole: wrote {path}: {figures['topics']} topics, {figures['model_calls']} "
               f"model calls, {figures['judged']} documents judged", err=True)


@vole.command()
@click.option("--qrels", required=True, type=click.Path(dir_okay=False),
              help="The existing qrels; only pairs they lack are judged.")
@click.option("--topics", "topics_path", required=True, type=click.Path(dir_okay=False),
              help="Topics: one qid<TAB>text per line.")
@click.argument("run_path", metavar="RUN", type=click.Path(dir_okay=False))
@backend_options
@model_options
@click.option("--out", required=True, type=click.Path(dir_okay=False),
              help="Where to write the new qrels (appended to; pairs already there are "
                   "skipped, so an interrupted run resumes).")
@click.option("--depth", type=click.IntRange(min=1), metavar="N",
              help="Only the first N documents of each topic in the run (default: all).")
def judge(qrels, topics_path, run_path, db, server, token, model_name, base_url, api,
          no_schema, out, depth):
    """Fill the holes of qrels: grade 0-3 each run document the qrels lack, with a model.

    The document text comes from the database (--db) or a server (--server). Writes only
    the new pairs, as TREC qrels lines, to --out.

    \b
    Example:
      vole judge --qrels man86.qrels --topics man86.topics runs/a/vole.run \\
          --db msmarco.db --model gpt-4.1 --out runs/a/holes.qrels
    """
    topics = read_topics(topics_path)
    with _backend(db, server, token, readonly=True) as backend, \
            _model(model_name, base_url, api, no_schema) as model:
        done = _judge.fill(run_path, qrels, topics, backend, model, out, depth=depth,
                           echo=lambda line: click.echo(f"vole: {line}", err=True))
    click.echo(f"vole: judge: {done.holes} holes, {done.judged} judged, {done.already} "
               f"already in {out}, {done.failed} failed", err=True)
    if done.failed:
        fail(f"{done.failed} of {done.holes} pairs could not be graded (rerun to retry them)")
