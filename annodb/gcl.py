"""GCL evaluation: a query AST -> the GC-list it denotes, on one read snapshot (DESIGN §4).

Every node evaluates to an Intervals (starts, ends, values) by numba kernels over whole
lists. Identical subexpressions are evaluated once per query (a memo keyed by the frozen
AST node), so `(+ (^ "a b" x) (^ "a b" y))` solves the phrase once.

The windows `(# n)` are "every window of n addresses" of the database's address space
[0, next address). Inside a containment operator they need no materialising:
`(<< A (# n))` keeps the A-intervals of at most n addresses, `(>> A (# n))` those of at least
n, and their complements likewise; elsewhere they are materialised over the address space,
which is refused (QueryError) past MAX_WINDOWS windows.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from . import kernels
from .database import Intervals
from .errors import QueryError
from .query import Combine, Compare, Feature, Link, Node, Parsed, Term, Window, parse

MAX_WINDOWS = 20_000_000
# A word's list longer than this is not decoded whole when a few positions of it are all a
# query needs (the neighbours of a rare operand's matches, a phrase's candidates): only the
# blocks holding them are read. Below it, decoding the list is cheaper than planning.
PARTIAL_OVER = 200_000
PARTIAL_RATIO = 500  # ... and only when it holds PARTIAL_RATIO x more points than positions

_COMPARE = {
    "=": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal,
    ">": np.greater, ">=": np.greater_equal,
}
_MERGE = {"^": kernels.both_of, "+": kernels.one_of, "...": kernels.followed_by}
_SELECT = {"<<": kernels.contained_in, ">>": kernels.containing,
           "!<": kernels.not_contained_in, "!>": kernels.not_containing}
# (# n) as the right operand of a containment operator: keep A-intervals whose length
# (q - p + 1) compares so with n.
_WINDOW_SELECT = {"<<": np.less_equal, "!<": np.greater, ">>": np.greater_equal,
                  "!>": np.less}


@lru_cache(maxsize=4096)
def _parse(text: str, lenient: bool) -> tuple[Node, tuple[str, ...]]:
    parsed = parse(text, lenient=lenient)
    return parsed.node, tuple(parsed.warnings)


def _members(x: np.ndarray, sorted_values: np.ndarray) -> np.ndarray:
    """Which of x are in sorted_values."""
    if not len(sorted_values):
        return np.zeros(len(x), dtype=bool)
    i = np.searchsorted(sorted_values, x)
    i[i == len(sorted_values)] = 0
    return sorted_values[i] == x


def as_node(gcl, *, lenient: bool = False) -> tuple[Node, list[str]]:
    """Accept query text, a Parsed or an AST node; return (node, warnings). Query text is
    parsed once per process (the AST is immutable)."""
    if isinstance(gcl, str):
        node, warnings = _parse(gcl, lenient)
        return node, list(warnings)
    if isinstance(gcl, Parsed):
        return gcl.node, list(gcl.warnings)
    if isinstance(gcl, (Term, Feature, Combine, Window, Link, Compare)):
        return gcl, []
    raise TypeError(f"a query is text or a parsed query, not {type(gcl).__name__}")


def evaluate(snapshot, gcl, *, lenient: bool = False) -> Intervals:
    node, _ = as_node(gcl, lenient=lenient)
    return Evaluator(snapshot).eval(node)


class Evaluator:
    """Evaluates AST nodes against one snapshot; remembers every subexpression it solved."""

    def __init__(self, snapshot):
        self.snapshot = snapshot
        self.memo: dict[Node, Intervals] = {}

    def eval(self, node: Node) -> Intervals:
        found = self.memo.get(node)
        if found is None:
            found = self.memo[node] = self._eval(node)
        return found

    def _eval(self, node: Node) -> Intervals:
        if isinstance(node, Term):
            return self._term(node.tokens)
        if isinstance(node, Feature):
            return self.snapshot.intervals(node.name)
        if isinstance(node, Combine) and node.op == "^":
            return self._all_of(node.args)
        if isinstance(node, Combine):
            acc = self.eval(node.args[0])
            for arg in node.args[1:]:
                acc = self._combine(node.op, acc, arg)
            return acc
        if isinstance(node, Compare):
            a = self.eval(node.arg)
            keep = _COMPARE[node.op](a.values, node.value)
            return Intervals(a.starts[keep], a.ends[keep], a.values[keep])
        if isinstance(node, Link):
            return self._link(self.eval(node.arg))
        if isinstance(node, Window):
            return self._windows(node.size)
        raise TypeError(f"not a query node: {node!r}")

    def _term(self, toks: tuple[str, ...]) -> Intervals:
        if not toks:
            return Intervals.empty()
        if len(toks) == 1:
            return self.snapshot.intervals(toks[0])
        counts = [self.snapshot.list_count(t) for t in toks]
        if min(counts) == 0:
            return Intervals.empty()
        if max(counts) <= PARTIAL_OVER:  # short lists: one merge
            lists = [self.eval(Term((t,))).starts for t in toks]
            offsets = np.zeros(len(lists) + 1, dtype=np.int64)
            offsets[1:] = np.cumsum([len(x) for x in lists])
            starts = kernels.phrase(np.concatenate(lists), offsets)
        else:
            # rarest word first; a common word's list is read only where candidates are, or
            # searched at them (merging the whole list of "the" took up to 80 ms)
            order = sorted(range(len(toks)), key=counts.__getitem__)
            r = order[0]
            starts = self.eval(Term((toks[r],))).starts - r
            starts = starts[starts >= 0]
            for i in order[1:]:
                if not len(starts):
                    break
                want = starts + i
                if self._partial(toks[i], counts[i], len(want)):
                    have = self.snapshot.points_near(toks[i], want)
                else:
                    have = self.eval(Term((toks[i],))).starts
                starts = starts[_members(want, have)]
        return Intervals(starts, starts + (len(toks) - 1), np.zeros(len(starts)))

    def _partial(self, token: str, count: int, positions: int) -> bool:
        """Read only the blocks of `token`'s list near `positions` positions?"""
        return (count > PARTIAL_OVER and positions * PARTIAL_RATIO < count and
                not self.snapshot.is_loaded(token) and not len(self.snapshot.erased()[0]))

    def _all_of(self, args) -> Intervals:
        """`(^ A B ...)`. All-of is associative and commutative, so the operands are folded
        rarest words last: a common word then only needs its postings next to the matches
        so far (the last one at or before, the first at or after each start), read from
        the blocks that hold them."""
        words = {i: a.tokens[0] for i, a in enumerate(args)
                 if isinstance(a, Term) and len(a.tokens) == 1}
        counts = {i: self.snapshot.list_count(w) for i, w in words.items()}
        common = [i for i in words if self._partial(words[i], counts[i], 1)]
        if not common:
            acc = self.eval(args[0])
            for arg in args[1:]:
                acc = self._combine("^", acc, arg)
            return acc
        rest = [i for i in range(len(args)) if i not in common]
        common.sort(key=counts.__getitem__)
        if not rest:
            rest = [common.pop(0)]
        acc = self.eval(args[rest[0]])
        for i in rest[1:]:
            acc = self._combine("^", acc, args[i])
        for i in common:
            if not len(acc):
                break
            if self._partial(words[i], counts[i], len(acc)):
                b = self.snapshot.points_near(words[i], acc.starts)
                s, e = kernels.both_of(acc.starts, acc.ends, b, b)
                acc = Intervals(s, e, np.zeros(len(s)))
            else:
                acc = self._combine("^", acc, args[i])
        return acc

    def _combine(self, op: str, a: Intervals, b_node: Node) -> Intervals:
        if op in _SELECT:
            if isinstance(b_node, Window):
                lengths = a.ends - a.starts + 1
                keep = _WINDOW_SELECT[op](lengths, b_node.size)
                return Intervals(a.starts[keep], a.ends[keep], a.values[keep])
            b = self.eval(b_node)
            idx = _SELECT[op](a.starts, a.ends, b.starts, b.ends)
            return Intervals(a.starts[idx], a.ends[idx], a.values[idx])
        b = self.eval(b_node)
        s, e = _MERGE[op](a.starts, a.ends, b.starts, b.ends)
        return Intervals(s, e, np.zeros(len(s)))

    def _link(self, a: Intervals) -> Intervals:
        v = a.values
        v = v[np.isfinite(v) & (v >= 0) & (v == np.floor(v))]
        addrs = np.unique(v.astype(np.int64))
        return self._live(Intervals(addrs, addrs.copy(), np.zeros(len(addrs))))

    def _windows(self, n: int) -> Intervals:
        size = self.snapshot.address_space()
        count = size - n + 1
        if count <= 0:
            return Intervals.empty()
        if count > MAX_WINDOWS:
            raise QueryError(
                f"(# {n}) would make {count} windows; use it inside << or >> (for example "
                f"(<< (^ a b) (# {n})))", 0, "a window inside a containment operator")
        starts = np.arange(count, dtype=np.int64)
        return self._live(Intervals(starts, starts + (n - 1), np.zeros(count)))

    def _live(self, a: Intervals) -> Intervals:
        es, ee = self.snapshot.erased()
        if len(es) and len(a):
            keep = kernels.drop_erased(a.starts, a.ends, es, ee)
            return Intervals(a.starts[keep], a.ends[keep], a.values[keep])
        return a
