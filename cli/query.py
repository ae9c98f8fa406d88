"""`annodb query`, `annodb search` and `annodb count`: ranked and counted retrieval."""

from __future__ import annotations

import functools
import sys

import click

from annodb import rankers
from annodb.errors import QueryError, RankingError
from annodb.gcl import prepare
from .main import db_option, echo_json, fail, open_db


def _show(hits, as_json: bool) -> None:
    tty = sys.stdout.isatty()
    for hit in hits:
        if as_json:
            echo_json(hit.as_dict())
            continue
        snippet = hit.snippet or ""
        if tty:
            snippet = snippet.replace("<cover>", "\x1b[1m").replace("</cover>", "\x1b[0m")
        click.echo(f"{hit.rank}\t{hit.docno}\t{hit.score:.6f}\t{snippet}")


def _warn(warnings) -> None:
    for w in warnings:
        click.echo(f"annodb: warning: {w}", err=True)


def _field(text: str) -> tuple[str, object]:
    """--field NAME[=WEIGHT[,B]] -> (name, weight or (weight, b))."""
    name, _, spec = text.partition("=")
    if not spec:
        return name, None
    parts = spec.split(",")
    try:
        numbers = [float(x) for x in parts]
    except ValueError:
        raise click.BadParameter(f"{text!r}: give NAME, NAME=WEIGHT or NAME=WEIGHT,B",
                                 param_hint="--field") from None
    if len(numbers) > 2:
        raise click.BadParameter(f"{text!r}: give NAME, NAME=WEIGHT or NAME=WEIGHT,B",
                                 param_hint="--field")
    return name, numbers[0] if len(numbers) == 1 else tuple(numbers)


def rank_options(default: str):
    """The ranking options query and search share: --rank, --k1, --b, --field,
    --sparse-field (passed on as `ranking`, a dict of search()'s keywords)."""
    def decorate(f):
        options = [
            click.option("--rank", type=click.Choice(rankers.RANKS), default=default,
                         show_default=True,
                         help="How to rank: ssr (shortest-substring ranking), bm25 (BM25 "
                              "over the words), bm25+rm3 (BM25 over the words, stop words "
                              "dropped, expanded by pseudo-relevance feedback from the best "
                              "10), sparse (sparse vectors of --sparse-field) or fused (SSR "
                              "and BM25)."),
            click.option("--k1", type=float, help="BM25's k1 (default 0.9)."),
            click.option("--b", "b", type=float, help="BM25's b (default 0.4)."),
            click.option("--field", "fields", metavar="NAME[=WEIGHT[,B]]", multiple=True,
                         help="BM25F: score these fields (repeat), e.g. --field title=2 "
                              "--field text."),
            click.option("--sparse-field", metavar="NAME",
                         help="The sparse-vector field --rank sparse uses (default: the "
                              "database's only one)."),
        ]
        @functools.wraps(f)
        def wrapped(*args, rank, k1, b, fields, sparse_field, **kwargs):
            kwargs["ranking"] = dict(rank=rank, k1=k1, b=b, sparse_field=sparse_field,
                                     fields=dict(map(_field, fields)) or None)
            return f(*args, **kwargs)
        for option in reversed(options):
            wrapped = option(wrapped)
        return wrapped
    return decorate


@click.command()
@db_option
@click.argument("gcl")
@click.option("-k", "k", default=10, show_default=True, type=click.IntRange(0),
              help="How many results.")
@click.option("--container", default=":", show_default=True,
              help="What to rank: a GCL expression for the regions that are results.")
@click.option("--strict", is_flag=True,
              help="Reject queries that lenient parsing would repair.")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object per result: rank, docno, score, cover [p, q] (null "
                   "when the hit holds no word of the query itself), snippet.")
@rank_options("ssr")
def query(db, gcl, k, container, strict, as_json, ranking):
    """Rank documents for a GCL query by shortest-substring ranking, or by BM25.

    GCL is Cottontail's S-expression notation: (^ A B) all of, (+ A B) one of,
    "a b" a phrase, (<< A B) A inside B, (>> A B) A containing B, (... A B) A
    then B, (>= F 2) F with value >= 2. Give - to read one query per line from
    stdin (with --json, one line per query; a bad query does not stop the batch).
    --rank bm25 orders the documents that match by BM25 over the query's words.

    \b
    Example:
      annodb query --db bible.db '(^ "living creature" (+ sea birds))'
      annodb query --db bible.db -k 3 --json '(<< god title:)'
      annodb query --db bible.db --rank bm25 '(+ light darkness)'
      printf 'light\\n(^ day night)\\n' | annodb query --db bible.db --json -
    """
    database = open_db(db, readonly=True)
    lenient = not strict
    if gcl == "-":
        failed = False
        for line in sys.stdin:
            text = line.strip()
            if not text:
                continue
            with database.read() as r:
                try:
                    results = r.search(text, k=k, container=container, lenient=lenient,
                                       **ranking)
                except (QueryError, RankingError) as err:
                    failed = True
                    if as_json:
                        echo_json({"query": text, "results": [], "warnings": [],
                                   "error": str(err)})
                    else:
                        click.echo(f"annodb: error: {text}: {err}", err=True)
                    continue
            if as_json:
                echo_json({"query": text, "results": [h.as_dict() for h in results],
                           "warnings": results.warnings, "error": None})
            else:
                _warn(results.warnings)
                click.echo(f"# {text}")
                _show(results, False)
        sys.exit(2 if failed else 0)
    with database.read() as r:
        try:
            results = r.search(gcl, k=k, container=container, lenient=lenient, **ranking)
        except (QueryError, RankingError) as err:
            fail(str(err), 2)
        _warn(results.warnings)
        _show(results, as_json)
    if not results.total:
        click.echo(f"annodb: no {'document' if container == ':' else container} holds a "
                   f"match of {results.query}", err=True)


@click.command()
@db_option
@click.argument("text")
@click.option("-k", "k", default=10, show_default=True, type=click.IntRange(0),
              help="How many results.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per result.")
@rank_options(rankers.TEXT_RANK)
def search(db, text, k, as_json, ranking):
    """Free-text search, for when you would rather not write GCL.

    By default the words are ranked by BM25, each with the words sharing its
    English stem, expanded by the words of the best results (bm25+rm3; stop words
    such as "the" and "of" dropped first); --rank bm25 ranks the words alone,
    --rank ssr Boolean tiers of them by SSR (all the words together first, then
    smaller subsets), --rank fused SSR and BM25 both. The query's own words are
    printed to stderr.

    \b
    Example:
      annodb search --db bible.db 'waters divided'
      annodb search --db bible.db 'contact bob@example.com at 10:30'   # any text
      annodb search --db bible.db --rank bm25 --k1 1.2 --b 0.75 'living water'
    """
    if not text.strip():
        fail("an empty query: give the words to search for", 2)
    database = open_db(db, readonly=True)
    with database.read() as r:
        try:
            results = r.search_text(text, k=k, **ranking)
        except RankingError as err:
            fail(str(err), 2)
    click.echo(f"annodb: ran {results.query or '(nothing: no word is in the database)'} "
               f"(ranked by {ranking['rank']})", err=True)
    _show(results, as_json)


@click.command()
@db_option
@click.argument("gcl")
@click.option("--strict", is_flag=True, help="Reject queries that lenient parsing would repair.")
@click.option("--json", "as_json", is_flag=True,
              help='Print {"query": ..., "count": N, "warnings": [...]} (the lenient '
                   'repairs and terms naming no feature).')
def count(db, gcl, strict, as_json):
    """Count the intervals a GCL query denotes (its minimal matches).

    \b
    Example:
      annodb count --db bible.db '"living creature"'
      annodb count --db bible.db '(>> : (= :chapter: 2))'
      annodb count --db bible.db --json '(^ god light'   # warnings: the ')' added
    """
    database = open_db(db, readonly=True)
    with database.read() as r:
        try:
            node, warnings = prepare(r, gcl, lenient=not strict)
        except QueryError as err:
            fail(str(err), 2)
        _warn(warnings)
        n = r.count(node)
    if as_json:
        echo_json({"query": gcl, "count": n, "warnings": [str(w) for w in warnings]})
    else:
        click.echo(n)
