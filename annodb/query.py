"""The query parser: query text -> a plain AST, and an AST -> canonical query text
(ARCHITECTURE.md "Query language").

Queries are S-expressions in Cottontail's notation. An atom is a quoted string `"..."` (no
escapes: the next `"` ends it) or a raw term (a maximal run of characters other than
whitespace, `(`, `)` and `"`). An operator is recognised only as the first item after `(`;
one table (OPERATORS) gives each operator its AST node and its arity.

Terms: a quoted term is tokenized like text (0 tokens match nothing, 1 is a term, n a
phrase). A raw term containing a structural character (`: < > # @ =`) names a feature
verbatim; any other raw term is tokenized like a quoted one (`covid-19` is "covid 19").
The parser cannot know whether such a feature exists: `resolve` settles that when the
query meets a database. A raw term naming no feature of it (`10:30`, `bob@example.com`)
gets a warning; lenient mode searches its words instead (`"10 30"`), strict mode keeps the
feature (which matches nothing) — never a silent empty result.

`parse(text)` is strict: anything malformed raises one QueryError naming the offset and what
was expected there. `parse(text, lenient=True)` makes the two repairs that are unambiguous —
it closes parentheses left open at the end, and unwraps a lone parenthesised term `("x y")` —
and reports each in `Parsed.warnings`; everything else raises as in strict mode.

The parser is iterative (an explicit stack), so nesting depth is a checked limit
(MAX_DEPTH), never a RecursionError. `format(node)` prints canonical text:
`parse(format(node)).node == node`.
"""

from __future__ import annotations

import math
import re

import msgspec

from .errors import QueryError
from .tokenizer import tokens


class Term(msgspec.Struct, frozen=True):
    """A text term, quoted or raw, tokenized: 0 tokens matches nothing; 1 a term; n a phrase."""
    tokens: tuple[str, ...]


class Feature(msgspec.Struct, frozen=True):
    """A raw term naming a feature verbatim (`title:`, `:`, `judgment:2024-152259`)."""
    name: str


class Combine(msgspec.Struct, frozen=True):
    """`(op A B ...)`, n-ary kept flat (the evaluator folds left); always >= 2 args."""
    op: str
    args: tuple["Node", ...]


class Window(msgspec.Struct, frozen=True):
    """`(# n)`: every window of n addresses."""
    size: int


class Link(msgspec.Struct, frozen=True):
    """`(@ A)`: the addresses stored as A's values."""
    arg: "Node"


class Compare(msgspec.Struct, frozen=True):
    """`(op A x)`: the intervals of A whose value compares so with x."""
    op: str
    arg: "Node"
    value: float


Node = Term | Feature | Combine | Window | Link | Compare


class Parsed(msgspec.Struct):
    node: Node
    warnings: list[str]          # each repair made in lenient mode, with its offset


# op: (AST node, operand kinds, fewest, most (None: any)). Operand kinds, one letter per
# position, the last one repeating: e an expression, i a positive integer, x a number.
OPERATORS = {
    "^": (Combine, "e", 1, None),
    "+": (Combine, "e", 1, None),
    "...": (Combine, "e", 1, None),
    "<<": (Combine, "e", 2, None),
    ">>": (Combine, "e", 2, None),
    "!<": (Combine, "e", 2, None),
    "!>": (Combine, "e", 2, None),
    "#": (Window, "i", 1, 1),
    "@": (Link, "e", 1, 1),
    "=": (Compare, "ex", 2, 2),
    "!=": (Compare, "ex", 2, 2),
    "<": (Compare, "ex", 2, 2),
    "<=": (Compare, "ex", 2, 2),
    ">": (Compare, "ex", 2, 2),
    ">=": (Compare, "ex", 2, 2),
}
_EXPECTED = {"e": "a term, phrase or '('", "i": "a positive integer", "x": "a number"}
_AN_OPERATOR = "an operator (" + " ".join(OPERATORS) + ")"

STRUCTURAL = frozenset(":<>#@=")
MAX_DEPTH = 200                  # nested parentheses
_MAX_WINDOW = 2**63 - 1          # addresses are int64

# One lexeme per match: whitespace | ( | ) | "quoted" (group 4 empty: unterminated) | raw.
_LEXEME = re.compile(r'\s+|(\()|(\))|"([^"]*)("?)|([^\s()"]+)')
_RAW = re.compile(r'[^\s()"]+')
_INTEGER = re.compile(r"[0-9]+")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _lex(text: str) -> list[tuple[str, str, int, int]]:
    """(kind, value, start, end) per lexeme; kind is '(' ')' 'q' (quoted) or 'r' (raw)."""
    out = []
    for m in _LEXEME.finditer(text):
        last = m.lastindex  # (the group that matched: None for whitespace)
        if last is None:
            continue
        start, end = m.span()
        if last == 5:
            out.append(("r", m.group(5), start, end))
        elif last == 1:
            out.append(("(", "(", start, end))
        elif last == 2:
            out.append((")", ")", start, end))
        else:
            if not m.group(4):
                raise QueryError("unterminated quoted term", start, "a closing '\"'")
            out.append(("q", m.group(3), start, end))
    return out


# Atoms already made, by (kind, text): the real queries repeat their words, and a Term is
# immutable, so parsing one costs a lookup instead of tokenizing it again. Bounded: emptied
# when full.
_ATOMS: dict[tuple[str, str], "Term | Feature"] = {}
_ATOMS_MAX = 1 << 16


def _atom(kind: str, value: str) -> Term | Feature:
    key = (kind, value)
    found = _ATOMS.get(key)
    if found is None:
        if kind == "r" and not STRUCTURAL.isdisjoint(value):
            found = Feature(value)
        else:
            found = Term(tuple(tokens(value)))
        if len(_ATOMS) >= _ATOMS_MAX:
            _ATOMS.clear()
        _ATOMS[key] = found
    return found


def _number(kind: str, value: str, slot: str, offset: int) -> int | float:
    """The integer (slot 'i') or number (slot 'x') written as `value`, or a QueryError."""
    if kind == "r" and slot == "i" and _INTEGER.fullmatch(value):
        digits = value.lstrip("0")
        if digits and len(digits) <= 19 and int(digits) <= _MAX_WINDOW:
            return int(digits)
        if digits:     # (a positive integer, past what a window can be)
            raise QueryError(f"expected a positive integer of at most {_MAX_WINDOW:,}, "
                             f"found {_shown(value)}", offset, _EXPECTED[slot])
    elif kind == "r" and slot == "x" and _NUMBER.fullmatch(value):
        if math.isfinite(float(value)):
            return float(value)
    found = {"(": "'('", "q": "a quoted term"}.get(kind) or _shown(value)
    raise QueryError(f"expected {_EXPECTED[slot]}, found {found}", offset, _EXPECTED[slot])


def _shown(found: str) -> str:
    return found if len(found) <= 40 else found[:37] + "..."


def _arity(op: str) -> str:
    _, _, fewest, most = OPERATORS[op]
    operands = "operand" if fewest == 1 else "operands"
    return f"'{op}' takes {'exactly' if fewest == most else 'at least'} {fewest} {operands}"


class _Frame:
    """An open `(op ...`: its operands so far (nodes, or numbers in number slots)."""
    __slots__ = ("op", "items")

    def __init__(self, op: str):
        self.op = op
        self.items: list = []

    def slot(self, offset: int) -> str:
        """The kind of the next operand, starting at `offset`, or a QueryError if none fits."""
        _, kinds, _, most = OPERATORS[self.op]
        n = len(self.items)
        if most is not None and n >= most:
            raise QueryError(f"too many operands: {_arity(self.op)}", offset, "')'")
        return kinds[min(n, len(kinds) - 1)]

    def close(self, offset: int) -> Node:
        """The node for this frame, closed by the ')' at `offset`."""
        cls, kinds, fewest, _ = OPERATORS[self.op]
        n, args = len(self.items), self.items
        if n < fewest:
            raise QueryError(f"too few operands: {_arity(self.op)}", offset,
                             _EXPECTED[kinds[min(n, len(kinds) - 1)]])
        if cls is Combine:
            return args[0] if n == 1 else Combine(self.op, tuple(args))
        if cls is Compare:
            return Compare(self.op, args[0], args[1])
        return cls(args[0])


_COMBINING = frozenset(op for op, (cls, _, _, _) in OPERATORS.items() if cls is Combine)


def _parse_plain(text: str) -> Node | None:
    """The query when it is well formed and only combines terms (^ + ... << >> !< !>),
    as agents' queries nearly always are, by one findall and no offsets; None for
    anything else (an error to report or a repair to make, with offsets, or another
    operator), which parse's full path takes. Where it answers, parse's full path gives
    the same node and no warnings, strict or lenient."""
    if text.count('"') % 2:
        return None  # (an unterminated quote: findall cannot tell it from whitespace)
    try:
        text.encode()
    except UnicodeEncodeError:
        return None
    stack: list[tuple[str, list]] = []
    top: list[Node] = []
    opening = False
    for paren, close, quoted, ends, raw in _LEXEME.findall(text):
        if opening:
            if raw not in _COMBINING or len(stack) >= MAX_DEPTH:
                return None
            stack.append((raw, []))
            opening = False
        elif paren:
            if not stack and top:
                return None
            opening = True
        elif close:
            if not stack:
                return None
            op, args = stack.pop()
            if len(args) < OPERATORS[op][2]:
                return None
            node = args[0] if len(args) == 1 else Combine(op, tuple(args))
            (stack[-1][1] if stack else top).append(node)
        elif raw or ends:
            if not stack and top:
                return None
            (stack[-1][1] if stack else top).append(_atom("r", raw) if raw else
                                                    _atom("q", quoted))
    if opening or stack or len(top) != 1:
        return None
    return top[0]


def parse(text: str, *, lenient: bool = False) -> Parsed:
    """Parse a query; strict by default. Raises QueryError (and only that) if malformed."""
    node = _parse_plain(text)
    if node is not None:
        return Parsed(node, [])
    return _parse_full(text, lenient)


def _parse_full(text: str, lenient: bool) -> Parsed:
    """parse, every query: offsets kept for the errors and the repairs' warnings."""
    try:
        text.encode()
    except UnicodeEncodeError as err:
        raise QueryError("the query is not valid Unicode (a lone surrogate)", err.start,
                         "valid UTF-8 text") from None
    lexemes = _lex(text)
    warnings: list[str] = []      # lenient mode's repairs; strict mode raises instead
    depth = lowest = 0
    for kind, *_ in lexemes:
        depth += (kind == "(") - (kind == ")")
        lowest = min(lowest, depth)
    if lenient and depth > 0 and lowest >= 0:    # else strict mode raises at the end
        warnings.append(f"offset {len(text)}: added {depth} missing ')' at the end of the query")
        lexemes += [(")", ")", len(text), len(text))] * depth

    stack: list[_Frame] = []
    top: list[Node] = []          # the query's one expression, once parsed
    i = 0
    while i < len(lexemes):
        kind, value, start, end = lexemes[i]
        items: list = stack[-1].items if stack else top
        if kind == ")":
            if not stack:
                raise QueryError("unbalanced ')'", start, "end of query")
            node = stack.pop().close(start)
            (stack[-1].items if stack else top).append(node)
            i += 1
            continue
        # An operand starts here: does one fit?
        if not stack and top:
            raise QueryError("trailing input after a complete query (several terms? join "
                             "them with an operator: (^ a b) all of them, (+ a b) any of "
                             "them; or search them as free text)", start, "end of query")
        slot = stack[-1].slot(start) if stack else "e"
        if slot != "e":
            items.append(_number(kind, value, slot, start))
            i += 1
        elif kind != "(":
            items.append(_atom(kind, value))
            i += 1
        else:
            if len(stack) >= MAX_DEPTH:
                raise QueryError(f"parentheses nested deeper than {MAX_DEPTH} levels", start)
            if i + 1 == len(lexemes):
                raise QueryError("'(' at the end of the query", len(text), _AN_OPERATOR)
            kind, value, start, end = lexemes[i + 1]
            if kind == "r" and value in OPERATORS:
                stack.append(_Frame(value))
                i += 2
            elif kind == ")":
                raise QueryError("empty parentheses '()'", start, _AN_OPERATOR)
            elif kind in ("r", "q") and i + 2 < len(lexemes) and lexemes[i + 2][0] == ")":
                shown = _shown(text[start:end])
                if not lenient:
                    raise QueryError(f"expected an operator, found the lone term {shown} in "
                                     "parentheses; write it without them", start, _AN_OPERATOR)
                warnings.append(f"offset {start}: unwrapped the lone parenthesised term {shown}")
                items.append(_atom(kind, value))
                i += 3
            else:
                found = "'('" if kind == "(" else _shown(text[start:end])
                raise QueryError(f"expected an operator after '(', found {found}", start,
                                 _AN_OPERATOR)
    if stack:
        raise QueryError(f"missing ')': {len(stack)} '(' left open", len(text), "')'")
    if not top:
        raise QueryError("empty query", len(text), "a term, phrase or '('")
    return Parsed(top[0], warnings)


def map_leaves(node: Node, fn) -> Node:
    """`node` with each term and feature replaced by fn(leaf) (the rest rebuilt only where
    something changed; each distinct leaf is passed to fn once)."""
    return _map_leaves(node, fn, {})


def _map_leaves(n: Node, fn, done: dict) -> Node:
    # (a module function, not a closure calling itself: that closure would be a reference
    # cycle holding `fn`, and with it the query's snapshot, until the cyclic GC ran)
    if isinstance(n, (Term, Feature)):
        found = done.get(n)
        if found is None:
            found = done[n] = fn(n)
        return found
    if isinstance(n, Combine):
        args = tuple(_map_leaves(a, fn, done) for a in n.args)
        return n if args == n.args else Combine(n.op, args)
    if isinstance(n, Link):
        arg = _map_leaves(n.arg, fn, done)
        return n if arg is n.arg else Link(arg)
    if isinstance(n, Compare):
        arg = _map_leaves(n.arg, fn, done)
        return n if arg is n.arg else Compare(n.op, arg, n.value)
    return n


def resolve(node: Node, known, *, lenient: bool = False) -> tuple[Node, list[str]]:
    """The query `node` as it runs on a database, and a warning for each raw term with a
    structural character that names no feature there (`known(name)` is false). Lenient: the
    term's words are searched instead (a Term), and the warning says so; strict: the term is
    kept (it matches nothing) and the warning says how to search its words."""
    warnings: list[str] = []

    def leaf(n: Term | Feature) -> Node:
        if isinstance(n, Feature):
            return _resolve_feature(n, known, lenient, warnings)
        return n

    return map_leaves(node, leaf), warnings


def _resolve_feature(node: Feature, known, lenient: bool, warnings: list[str]) -> Node:
    if known(node.name):
        return node
    words = tokens(node.name)
    name = f"'{_shown(node.name)}'"
    if not words:
        warnings.append(f"{name} names no feature of the database and has no words: it "
                        "matches nothing")
        return node
    phrase = '"' + " ".join(words) + '"'
    if lenient:
        warnings.append(f"{name} names no feature of the database; searched its words "
                        f"{phrase} instead")
        return Term(tuple(words))
    warnings.append(f"{name} names no feature of the database, so it matches nothing (a "
                    f"raw term with one of : < > # @ = names a feature); to search its "
                    f"words, quote it: \"{node.name}\"")
    return node


def _raw_ok(word: str) -> bool:
    return _RAW.fullmatch(word) is not None


_FORMATTED: dict[Term, str] = {}  # a term's text, as _ATOMS (bounded, emptied when full)


def _format_atom(node: Term | Feature) -> str:
    if isinstance(node, Feature):
        if not _raw_ok(node.name) or STRUCTURAL.isdisjoint(node.name):
            raise ValueError(f"feature name {node.name!r} cannot be written in a query")
        return node.name
    found = _FORMATTED.get(node)
    if found is None:
        if len(node.tokens) == 1 and _raw_ok(node.tokens[0]) and \
                _atom("r", node.tokens[0]) == node:
            found = node.tokens[0]
        else:
            found = '"' + " ".join(node.tokens) + '"'
        if len(_FORMATTED) >= _ATOMS_MAX:
            _FORMATTED.clear()
        _FORMATTED[node] = found
    return found


def _format_number(value: float) -> str:
    if not math.isfinite(value):
        raise ValueError(f"{value!r} cannot be written in a query")
    return str(int(value)) if value.is_integer() and abs(value) < 1e16 else repr(float(value))


def format(node: Node) -> str:
    """Canonical query text for `node`: single spaces, `parse(format(n)).node == n`."""
    out: list[str] = []
    todo: list = [node]           # nodes to print, and literal text between them
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, (Term, Feature)):
            out.append(_format_atom(item))
        elif isinstance(item, Window):
            out.append(f"(# {item.size})")
        else:
            if isinstance(item, Combine):
                head, args, tail = item.op, item.args, ")"
            elif isinstance(item, Link):
                head, args, tail = "@", (item.arg,), ")"
            elif isinstance(item, Compare):
                head, args, tail = item.op, (item.arg,), f" {_format_number(item.value)})"
            else:
                raise TypeError(f"not a query node: {item!r}")
            out.append("(" + head)
            todo.append(tail)
            for arg in reversed(args):
                todo += [arg, " "]
    return "".join(out)
