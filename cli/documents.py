"""The commands on one document or the database's counts: `stats`, `show`, `annotate`,
`delete`."""

from __future__ import annotations

import json
import math

import click

from annodb import tokenizer as _tokenizer
from annodb.errors import NotFoundError

from .main import db_option, echo_json, open_db


@click.command()
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the statistics as JSON.")
def stats(db, as_json):
    """Print the database's counts: documents, tokens, features, size.

    \b
    Example:
      annodb stats --db bible.db
      annodb stats --db bible.db --json
    """
    with open_db(db, readonly=True) as database:
        result = database.stats().as_dict()
    if as_json:
        echo_json(result)
        return
    width = max(len(k) for k in result)
    for key, value in result.items():
        click.echo(f"{key:<{width}}  {value}")


def _document_dict(doc) -> dict:
    return {
        "docno": doc.docno, "start": doc.start, "end": doc.end, "tokens": doc.tokens,
        "text": doc.text,
        "fields": [{"name": f.name, "path": f.path, "start": f.start, "end": f.end,
                    "text": doc.text[f.char_start:f.char_end]} for f in doc.fields],
        "meta": doc.meta,
    }


@click.command()
@click.argument("docno")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the whole document as JSON.")
def show(docno, db, as_json):
    """Print the document DOCNO: its address range, fields and metadata.

    \b
    Example:
      annodb show --db bible.db Gen.1.1
      annodb show --db bible.db Gen.1.1 --json
    """
    with open_db(db, readonly=True) as database, database.read() as snapshot:
        doc = snapshot.document(docno)
    if as_json:
        echo_json(_document_dict(doc))
        return
    click.echo(f"docno: {doc.docno}")
    click.echo(f"range: {doc.start}..{doc.end} ({doc.tokens} token{'s' * (doc.tokens != 1)})")
    for key, value in doc.meta.items():
        click.echo(f"{key}: {json.dumps(value, ensure_ascii=False)}")
    named = [f for f in doc.fields if f.name or f.path]
    if named:
        for f in named:
            click.echo(f"{f.path or f.name}: {doc.text[f.char_start:f.char_end]}")
    else:
        click.echo("")
        click.echo(doc.text)


@click.command()
@click.argument("feature")
@click.argument("docno")
@db_option
@click.option("--value", type=float, default=0.0, show_default=True,
              help="The number the annotation carries.")
def annotate(feature, docno, db, value):
    """Annotate the whole of document DOCNO with FEATURE (and a value).

    \b
    Example:
      annodb annotate --db bible.db judgment:creation Gen.1.1 --value 3
    """
    if feature == ":" or any(c.isspace() or c in '()"' for c in feature):
        # (a query names a feature by one raw term: "judgment: t1" could never be found,
        # and ':' alone is every document's own)
        raise click.BadParameter(
            f"{feature!r} is not a feature name a query can use: one word without spaces, "
            "parentheses or quotes, not ':' alone (e.g. judgment:t1)", param_hint="FEATURE")
    if not math.isfinite(value):    # (as the server refuses it: no comparison means it)
        raise click.BadParameter(f"{value!r} is not a finite number", param_hint="--value")
    with open_db(db) as database, database.write() as w:
        doc = w.document(docno)
        w.annotate(feature, doc.start, doc.end, value)
    click.echo(f"annotated {docno} [{doc.start}, {doc.end}] with {feature} = {value:g}",
               err=True)
    if _tokenizer.tokens(feature) == [feature]:
        click.echo(f"annodb: note: {feature!r} is also a word: its list holds the text's "
                   f"{feature!r} too, and a query of it finds both (a name with a ':', "
                   f"such as {feature + ':'!r}, keeps a label apart)", err=True)


@click.command()
@click.argument("docno")
@db_option
def delete(docno, db):
    """Delete document DOCNO (its text and every annotation inside it).

    \b
    Example:
      annodb delete --db bible.db Gen.1.1
    """
    with open_db(db) as database, database.write() as w:
        if not w.delete(docno):
            raise NotFoundError(f"no document with docno {docno!r}")
    click.echo(f"deleted {docno}", err=True)
