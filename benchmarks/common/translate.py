"""Translate a GCL query (the real queries use ^, + , terms and phrases) for the peers.

The peers get the same Boolean query: all-of -> AND, one-of -> OR, a phrase -> a phrase, a
term -> a term, with the terms tokenized by annodb's tokenizer so both sides look up the
same words. Anything else (containment, values, windows) has no peer equivalent: None.
"""

from __future__ import annotations

from annodb.query import Combine, Term


def fts5(node) -> str | None:
    """An FTS5 MATCH expression, or None."""
    if isinstance(node, Term):
        if not node.tokens:
            return None
        return '"' + " ".join(t.replace('"', '""') for t in node.tokens) + '"'
    if isinstance(node, Combine) and node.op in ("^", "+"):
        parts = [fts5(a) for a in node.args]
        if any(p is None for p in parts):
            return None
        return "(" + (" AND " if node.op == "^" else " OR ").join(parts) + ")"
    return None


def tantivy(node, index, field: str):
    """A tantivy Query object, or None."""
    import tantivy as tv
    if isinstance(node, Term):
        if not node.tokens:
            return None
        if len(node.tokens) == 1:
            return tv.Query.term_query(index.schema, field, node.tokens[0])
        return tv.Query.phrase_query(index.schema, field, list(node.tokens))
    if isinstance(node, Combine) and node.op in ("^", "+"):
        parts = [tantivy(a, index, field) for a in node.args]
        if any(p is None for p in parts):
            return None
        occur = tv.Occur.Must if node.op == "^" else tv.Occur.Should
        return tv.Query.boolean_query([(occur, p) for p in parts])
    return None
