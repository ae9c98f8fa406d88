"""A memory's metadata (annodb.Memory): keys, labels, values, times, and `where` filters
compiled into the query algebra (ARCHITECTURE.md "Agent memory").

A memory is a document (container `:`) whose record holds its text (`text`) and metadata:

- a number or a bool is a value on the feature `:key:` (records.py's scheme), so
  `where={"importance": (">=", 3)}` is `(>= :importance: 3)`;
- a string is a label, the feature `key:value` (whitespace, `( ) " %` in the value written
  `%XX`, and the empty string as `key:%`, so a label never ends in `:` and never names a
  container or a field such as `topic:` or `title:`), so `where={"user": "alice"}` is the
  feature `user:alice`, matched exactly; each word of it is also an annotation
  `(label)WORD` over the memory (recall.py's LABEL_WORD: what lets a question naming
  `alice` favour her memories; no query text can name it, as `(` is the algebra's);
- a time (`datetime`, or seconds since the epoch) is a number: seconds since the epoch. A
  `datetime` with a timezone is converted; a naive one is taken as UTC (not local time).
  A date the memory's text names relative to its `time` ("yesterday", "last week") is
  written as the values `(event)from` and `(event)to` over it (recall.py's EVENT_FROM
  and EVENT_TO: what lets a question naming that date find it; no key can name them).
  A memory whose text asks something has the share of its tokens in sentences ending in
  a question mark written as the value `(text)asks` over it (recall.py's ASKING: what
  ranks it below a memory that states as much).

Keys are names without whitespace or `( ) " :`. RESERVED keys are refused as metadata:
`text` and `docno` (the record's own), `key` (give it as `remember(key=...)`),
`superseded` (set when a newer memory replaces one), and the names of the features annodb
writes for its own agents (judgments.py): `judgment`, `note`, `order` and `call`, whose
features `judgment:T`, `note:T`, `order:T` and `call:T` a label would otherwise forge (a
grade, a note's link, a discovery order). (`topic` is free: a topic's record is the
document `topic:T` in the container `topic:`, which no label can name.)

`where` maps each key to a condition; all must hold. A condition is a value (exact match),
a list of values (any of), `(op, value)` with op one of = != < <= > >= (strings: = and !=
only), `("in", [values])`, `("not in", [values])` or `("exists", True|False)`. A condition
on a key a memory lacks is false for =, comparisons and in, true for != and not in, for
numbers and strings alike; `("exists", False)` asks for the memories without the key.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
import unicodedata

import numpy as np

from . import query as _query
from .errors import AnnodbError
from .query import Combine, Compare, Feature

DOCUMENT = Feature(":")
TEXT = "text"                      # the record field holding a memory's text
TIME = "time"                      # when it was remembered: seconds since the epoch
KEY = "key"                        # what it is about: a newer memory with its key replaces it
SUPERSEDED = "superseded"          # the time a newer memory replaced it
AGENT_NAMES = ("judgment", "note", "order", "call")   # judgments.py's features `name:T`
RESERVED = (TEXT, "docno", KEY, SUPERSEDED) + AGENT_NAMES
OPERATORS = ("=", "!=", "<", "<=", ">", ">=")
SET_OPERATORS = ("in", "not in")
_BAD_KEY = re.compile(r'[\s()":]')
_ESCAPE = re.compile(r'[\s()"%]')
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def check_key(key) -> str:
    """The key, or AnnodbError when it cannot name metadata (not a feature name part)."""
    if not isinstance(key, str) or not key or _BAD_KEY.search(key):
        raise AnnodbError(f"metadata key {key!r}: need a non-empty name without whitespace "
                          'or ( ) " :')
    return key


def check_own_key(key) -> str:
    """check_key, and AnnodbError for a RESERVED key (one a caller may not set)."""
    if check_key(key) in RESERVED:
        raise AnnodbError(f"metadata key {key!r} is reserved (annodb writes it itself: "
                          f"{', '.join(RESERVED)}); choose another name")
    return key


def nfc(text: str) -> str:
    """`text` in Unicode's composed form (NFC): "é" typed as e and a combining accent (as
    macOS and some PDFs give it) is the one character other keyboards give, so a word, a
    label or a key matches whichever way it was typed."""
    return text if unicodedata.is_normalized("NFC", text) else \
        unicodedata.normalize("NFC", text)


def label(key: str, value: str) -> str:
    """The feature of a string metadata value: `key:value`, escaped so it can be queried
    (and `key:%` for "", which `%` escaped as `%25` never gives); the value in NFC."""
    value = nfc(value)
    if value == "":
        return f"{check_key(key)}:%"
    return f"{check_key(key)}:" + _ESCAPE.sub(
        lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), value)


def value_feature(key: str) -> str:
    """The feature holding a key's numbers: `:key:`."""
    return f":{check_key(key)}:"


def plain(value):
    """A numpy scalar (np.int64, np.float32, np.bool_, np.str_: what code computing
    metadata with numpy or pandas hands over) as the Python value it holds, and an
    np.datetime64 (no zone: UTC, as a naive datetime) as its seconds since the epoch;
    anything else as it is."""
    if isinstance(value, (np.number, np.bool_, np.str_)):
        return value.item()
    if isinstance(value, np.datetime64):
        if np.isnat(value):
            raise AnnodbError("NaT (numpy's missing time) is not a time; leave the key out")
        return float((value - np.datetime64(0, "s")) / np.timedelta64(1, "s"))
    return value


def seconds(value, what: str = "time") -> float:
    """A time as seconds since the epoch: a number, a datetime (naive: UTC) or an ISO 8601
    string ("2025-03-01", "2025-03-01T09:00:00Z"; no zone: UTC), as MCP's tools take."""
    value = plain(value)
    if isinstance(value, bool):         # (a number to Python, but never meant as a time)
        raise AnnodbError(f"{what}: {value!r} is not a time; give a datetime, seconds since "
                          "the epoch or an ISO 8601 time (2025-03-01T09:00:00Z)")
    if isinstance(value, str):
        try:
            value = _dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise AnnodbError(f"{what}: {value!r} is neither a datetime, seconds since the "
                              "epoch nor an ISO 8601 time (2025-03-01T09:00:00Z)") from None
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        return (value - _EPOCH).total_seconds()
    if isinstance(value, _dt.date):
        raise AnnodbError(f"{what}: {value!r} is a date; give a datetime or seconds")
    return number(what, value)


def duration(value, what: str = "recency") -> float:
    """A positive duration in seconds: a number or a timedelta."""
    if isinstance(value, _dt.timedelta):
        value = value.total_seconds()
    value = number(what, value)
    if value <= 0:
        raise AnnodbError(f"{what}: a half-life must be > 0 seconds, not {value}")
    return value


def number(key: str, value) -> float:
    """A finite number (a bool is 0 or 1, a datetime its seconds; numpy's too), or
    AnnodbError."""
    value = plain(value)
    if isinstance(value, _dt.datetime):
        return seconds(value, key)
    if isinstance(value, (bool, int, float)):
        try:
            value = float(value)
        except OverflowError:
            raise AnnodbError(f"metadata {key!r}: an integer of {len(str(abs(value)))} digits "
                              "is too large for a value (at most about 1.8e308)") from None
        if math.isfinite(value):
            return value
        raise AnnodbError(f"metadata {key!r}: {value!r} is not a finite number")
    kind = ("None: leave the key out instead" if value is None else
            "a string, not a number" if isinstance(value, str) else
            "a list: a key holds one value (a string, number, bool or time); give one "
            "string, or a key for each" if isinstance(value, (list, tuple, set, frozenset))
            else f"a {type(value).__name__}: a key holds a string (a label), a number or "
            "bool (a value) or a time (a datetime)")
    raise AnnodbError(f"metadata {key!r}: {value!r} is {kind}")


def stored(key: str, value):
    """The value a record stores for metadata `key` (a string, or a number; a datetime as
    its seconds; a numpy scalar as the Python value it holds)."""
    value = plain(value)
    if isinstance(value, str):
        return nfc(value)
    if isinstance(value, _dt.datetime):
        return seconds(value, key)
    as_float = number(key, value)
    if type(value) is int and not -2 ** 63 <= value < 2 ** 64:
        return as_float        # (a record keeps such an int as a string; its value is this)
    return value


def _term(key: str, value) -> _query.Node:
    """The exact-match condition for one value of `key`."""
    value = plain(value)
    if isinstance(value, str):
        return Feature(label(key, value))
    return Compare("=", Feature(value_feature(key)), number(key, value))


def _any_of(key: str, values) -> _query.Node:
    if isinstance(values, np.ndarray):
        values = values.tolist()
    if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple, set,
                                                                   frozenset)):
        raise AnnodbError(f"where {key!r}: in / not in take a list of values")
    nodes = tuple(dict.fromkeys(_term(key, v) for v in values))
    if not nodes:
        raise AnnodbError(f"where {key!r}: an empty list matches nothing")
    return nodes[0] if len(nodes) == 1 else Combine("+", nodes)


def _is_pair(want) -> bool:
    return isinstance(want, (list, tuple)) and len(want) == 2 and isinstance(want[0], str) \
        and (want[0] in OPERATORS or want[0] in SET_OPERATORS or want[0] == "exists")


def conditions(key: str, want, labels_of) -> list[tuple[str, _query.Node]]:
    """(containment operator, node) pairs a memory must satisfy for `where[key] = want`:
    `>>` (contains the node) or `!>` (contains none). `labels_of(key)` lists the key's
    string labels (for exists)."""
    check_key(key)
    if isinstance(want, np.ndarray):         # (any of its values, as a list's)
        want = want.tolist()
    if isinstance(want, (list, tuple)) and len(want) != 2 and want and \
            isinstance(want[0], str) and want[0] in OPERATORS + SET_OPERATORS + ("exists",):
        raise AnnodbError(f"where {key!r}: {want[0]} takes one value, as a pair "
                          f"({want[0]!r}, value), not {len(want) - 1}")
    if isinstance(want, (list, tuple)) and len(want) == 2 and isinstance(want[0], str) \
            and want[0] and set(want[0]) <= set("<>=!~^$*%") and not _is_pair(want):
        raise AnnodbError(f"where {key!r}: unknown operator {want[0]!r}; the operators: "
                          f"{', '.join(OPERATORS + SET_OPERATORS)}, exists")
    if key == TIME:           # an ISO 8601 string is a time here, as remember's time= takes
        want = _times(want)
    if _is_pair(want):
        op, value = want
        if op == "exists":
            if not isinstance(value, bool):
                raise AnnodbError(f"where {key!r}: exists takes True or False")
            names = (value_feature(key),) + tuple(labels_of(key))
            node = Feature(names[0]) if len(names) == 1 else \
                Combine("+", tuple(map(Feature, names)))
            return [(">>" if value else "!>", node)]
        if op in SET_OPERATORS:
            return [(">>" if op == "in" else "!>", _any_of(key, value))]
        if isinstance(value, (list, tuple, set, frozenset)):
            raise AnnodbError(f"where {key!r}: {op} compares one value (in / not in take "
                              "a list)")
        if isinstance(value, str):
            if op not in ("=", "!="):
                raise AnnodbError(f"where {key!r}: {op} compares numbers; strings take = or !=")
            return [(">>" if op == "=" else "!>", Feature(label(key, value)))]
        if op == "!=":        # true where the key is missing: "contains no (= :key: x)"
            return [("!>", _term(key, value))]
        return [(">>", Compare(op, Feature(value_feature(key)), number(key, value)))]
    if isinstance(want, (list, tuple, set, frozenset)):
        return [(">>", _any_of(key, want))]
    return [(">>", _term(key, want))]


def _times(want):
    """A condition on `time` with each ISO 8601 string in it as seconds since the epoch:
    a plain value, the values of a list, or an operator's value (or list)."""
    def one(value):
        value = plain(value)
        return seconds(value, f"where {TIME!r}") if isinstance(value, str) else value

    def each(values):
        if isinstance(values, np.ndarray):
            values = values.tolist()
        if isinstance(values, (list, tuple, set, frozenset)):
            return [one(v) for v in values]
        return one(values)
    if _is_pair(want):
        return want if want[0] == "exists" else (want[0], each(want[1]))
    return each(want)


def needed(where: dict | None) -> list[tuple[str, str | None, bool]]:
    """(key, string or None, numbers) for each condition of `where` that only a memory
    holding the key satisfies (=, in, comparisons, exists True), with the string label it
    names (a plain string or ("=", string)) and whether only a number satisfies it (a
    comparison, or numbers to equal): what to look for when a filter matched nothing."""
    out: list[tuple[str, str | None, bool]] = []
    for key, want in (where or {}).items():
        if key == TIME:
            want = _times(want)
        if _is_pair(want):
            op, value = want
            if op in ("!=", "not in") or op == "exists":
                if op == "exists" and value:
                    out.append((key, None, False))
                continue
            if op == "in":
                want = value
            else:
                value = plain(value)
                out.append((key, value if isinstance(value, str) else None,
                            not isinstance(value, str)))
                continue
        if isinstance(want, (list, tuple, set, frozenset, np.ndarray)):
            values = [plain(v) for v in want]
            out.append((key, None, not any(isinstance(v, str) for v in values)))
        else:
            want = plain(want)
            out.append((key, want if isinstance(want, str) else None,
                        not isinstance(want, str)))
    return out


def where_node(where: dict | None, base: _query.Node = DOCUMENT, labels_of=None
               ) -> _query.Node:
    """The query selecting the `base` intervals (memories) that satisfy `where`.
    `labels_of(key)`: the key's string labels, needed for ("exists", ...)."""
    if where is not None and not isinstance(where, dict):
        raise AnnodbError(f"where is a dict of conditions, not {type(where).__name__}")
    node = base
    for key, want in (where or {}).items():
        for op, cond in conditions(key, want, labels_of or _no_labels):
            node = Combine(op, (node, cond))
    return node


def _no_labels(key: str) -> list[str]:
    raise AnnodbError(f"where {key!r}: exists needs the database (use Memory.recall)")


def current_node(node: _query.Node, as_of: float | None, include_superseded: bool,
                 any_superseded: bool = True) -> _query.Node:
    """`node` (memories, or their `:time:`) narrowed to those current: not superseded (by
    default), or as of `as_of`: remembered by then and not superseded by then.
    `any_superseded` False: no memory is superseded (the condition is left out)."""
    include_superseded = include_superseded or not any_superseded
    if as_of is not None:
        node = Combine(">>", (node, Compare("<=", Feature(value_feature(TIME)), as_of)))
        if not include_superseded:
            node = Combine("!>", (node, Compare("<=", Feature(value_feature(SUPERSEDED)),
                                                as_of)))
        return node
    if include_superseded:
        return node
    return Combine("!>", (node, Feature(value_feature(SUPERSEDED))))
