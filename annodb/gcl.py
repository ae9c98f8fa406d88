"""GCL evaluation: a query AST -> the GC-list it denotes, on one read snapshot
(ARCHITECTURE.md "Query language").

Every node evaluates to an Intervals (starts, ends, values) by numba kernels over sorted
arrays. Identical subexpressions are evaluated once per query (a memo keyed by the frozen
AST node), so `(+ (^ "a b" x) (^ "a b" y))` solves the phrase once; `(+ a a)` and
`(^ a a)` are `a` (both are idempotent).

Two ways to evaluate, both exact:

- `eval(node)`: the node's whole result (what `count` and `query` return).
- `eval_in(node, region)`: the node's intervals lying inside one of the region's ranges
  (sorted, disjoint). Ranking needs only covers inside the containers that can hold one,
  so it evaluates in the region of those containers: an operand's common word is read
  only in the blocks overlapping the region, never whole. Inside a range r, `(^ A B)`,
  `(... A B)` and `(+ A B)` need only A and B inside r, so all-of narrows the region to
  the ranges holding its rarest operand before it evaluates the others; `(>> A B)` and
  `(!> A B)` need B inside A's intervals; `(<< A B)` and `(!< A B)` need the B-intervals
  containing A's, which for a feature are found by probing its blocks.

Plans follow the lists' counts (read without decoding a list): all-of and phrases start
from the rarest operand and read the others only near the candidates so far; one-of merges
its operands pairwise, so n operands cost O(N log n), not O(N n).

A Budget bounds one query's work inside evaluation: postings decoded plus intervals
produced, and a deadline, checked before each list is read and after each node, so a
query over its limit stops there with QueryCostError instead of running on.

The windows `(# n)` are "every window of n addresses" of the database's address space
[0, next address). Inside a containment operator they need no materialising:
`(<< A (# n))` keeps the A-intervals of at most n addresses, `(>> A (# n))` those of at least
n, and their complements likewise; elsewhere they are materialised over the address space,
which is refused (QueryError) past MAX_WINDOWS windows.
"""

from __future__ import annotations

import itertools
import time
from functools import lru_cache

import numpy as np

from . import kernels
from .errors import QueryCostError, QueryError
from .intervals import Intervals
from .query import (Combine, Compare, Feature, Link, Node, Parsed, Term, Window, map_leaves,
                    parse, resolve)
from .storage import MAX_ADDRESS, zero_values
from .tokenizer import strip_diacritics

MAX_WINDOWS = 20_000_000
# A word's list longer than this is not decoded whole when a few positions of it are all a
# query needs (the neighbours of a rare operand's matches): only the blocks holding them
# are read. Below it, decoding the list is cheaper than planning.
PARTIAL_OVER = 200_000
PARTIAL_RATIO = 500  # ... and only when it holds PARTIAL_RATIO x more points than positions
MAX_LEAVES = 10_000  # distinct terms, phrases and features in one query
MAX_GROUPED_WORDS = 64  # words of a query's phrases and terms, at most, for covers_in_blocks
_REGION_KEYS = itertools.count()
_UNSEEN = object()
_LEAF_COUNTS: dict = {}  # node -> its distinct leaves' number (Evaluator.check), bounded

_COMPARE = {
    "=": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal,
    ">": np.greater, ">=": np.greater_equal,
}
_SELECT = {"<<": "contained_in", ">>": "containing", "!<": "not_contained_in",
           "!>": "not_containing"}   # the kernels, by name (imported on first use)
# (# n) as the right operand of a containment operator: keep A-intervals whose length
# (q - p + 1) compares so with n.
_WINDOW_SELECT = {"<<": np.less_equal, "!<": np.greater, ">>": np.greater_equal,
                  "!>": np.less}


@lru_cache(maxsize=4096)
def _parse(text: str, lenient: bool) -> tuple[Node, tuple[str, ...], bool]:
    """(node, warnings, whether it names a feature: resolve has nothing to do if not)."""
    parsed = parse(text, lenient=lenient)
    node = parsed.node
    found = leaves(node)
    _count_leaves(node, len(found))  # (Evaluator.check asks next)
    return node, tuple(parsed.warnings), any(isinstance(n, Feature) for n in found)


def as_node(gcl, *, lenient: bool = False) -> tuple[Node, list[str]]:
    """Accept query text, a Parsed or an AST node; return (node, warnings). Query text is
    parsed once per process (the AST is immutable)."""
    if isinstance(gcl, str):
        node, warnings, _ = _parse(gcl, lenient)
        return node, list(warnings)
    if isinstance(gcl, Parsed):
        return gcl.node, list(gcl.warnings)
    if isinstance(gcl, (Term, Feature, Combine, Window, Link, Compare)):
        return gcl, []
    raise TypeError(f"a query is text or a parsed query, not {type(gcl).__name__}")


def prepare(snapshot, gcl, *, lenient: bool = False) -> tuple[Node, list[str]]:
    """`as_node` for a query meeting the database of `snapshot`: query text (or a Parsed)
    also has its raw terms naming no feature there resolved (query.resolve: a warning;
    lenient, their words searched instead). An AST node is taken as it is."""
    if isinstance(gcl, str):
        node, said, features = _parse(gcl, lenient)
        warnings = list(said)
        if not features:  # (resolve changes features only)
            return node, warnings
    else:
        node, warnings = as_node(gcl, lenient=lenient)
    if isinstance(gcl, (str, Parsed)):
        node, more = resolve(node, snapshot.has_feature, lenient=lenient)
        warnings += more
    return node, warnings


def evaluate(snapshot, gcl, *, lenient: bool = False, budget: "Budget | None" = None
             ) -> Intervals:
    node, _ = prepare(snapshot, gcl, lenient=lenient)
    ev = Evaluator(snapshot, budget)
    ev.check(node)
    return ev.eval(node)


class Budget:
    """The work one query may do: `postings` (intervals decoded from storage plus
    intervals the operators produce) and `seconds` from now. None: no limit."""

    def __init__(self, postings: int | None = None, seconds: float | None = None):
        self.postings = postings
        self.seconds = seconds
        self.deadline = None if seconds is None else time.monotonic() + seconds
        self.spent = 0

    def afford(self, n: int, what: str) -> None:
        """QueryCostError unless n more postings fit (checked before the work is done)."""
        if self.postings is not None and self.spent + n > self.postings:
            raise QueryCostError(
                f"query too expensive: {what} would take it past its budget of "
                f"{self.postings:,} postings ({self.spent + n:,}); make it more selective")

    def spend(self, n: int) -> None:
        self.spent += n
        if self.postings is not None and self.spent > self.postings:
            raise QueryCostError(
                f"query too expensive: it read or produced {self.spent:,} intervals, past "
                f"its budget of {self.postings:,}; make it more selective")
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise QueryCostError(
                f"query too expensive: it ran past its time limit of {self.seconds:g}s; "
                "make it more selective")


class Region:
    """Sorted, disjoint address ranges [los[i], his[i]]; `key` tells regions apart in a
    memo (unique to each Region made)."""

    __slots__ = ("los", "his", "key")

    def __init__(self, los: np.ndarray, his: np.ndarray):
        self.los, self.his, self.key = los, his, next(_REGION_KEYS)

    def __len__(self) -> int:
        return len(self.los)

    @staticmethod
    def around(boxes: Intervals) -> "Region":
        """The ranges of a GC-list of containers (merged where they overlap)."""
        s, e = boxes.starts, boxes.ends
        if len(s) > 1 and not bool((s[1:] > e[:-1]).all()):
            s, e = kernels.merge_ranges(s, e)
        return Region(s, e)

    def holding(self, a: Intervals) -> "Region":
        """The ranges that hold at least one interval of `a` (a inside this region)."""
        idx = kernels.containing(self.los, self.his, a.starts, a.ends)
        if len(idx) == len(self.los):
            return self
        return Region(self.los[idx], self.his[idx])

    def select(self, a: Intervals) -> Intervals:
        """The intervals of `a` lying inside a range."""
        return a.take(kernels.contained_in(a.starts, a.ends, self.los, self.his))


def leaves(node: Node) -> set:
    """The distinct terms, phrases and features of a query."""
    out, todo = set(), [node]
    while todo:
        n = todo.pop()
        if isinstance(n, (Term, Feature)):
            out.add(n)
        elif isinstance(n, Combine):
            todo.extend(n.args)
        elif isinstance(n, (Link, Compare)):
            todo.append(n.arg)
    return out


def _count_leaves(node: Node, n: int) -> int:
    """Keep n as the node's number of distinct leaves (bounded: emptied when full)."""
    if len(_LEAF_COUNTS) >= 4096:
        _LEAF_COUNTS.clear()
    _LEAF_COUNTS[node] = n
    return n


def _distinct(args: tuple) -> list:
    """The operands without repeats (for the idempotent ^ and +), in order."""
    return list(dict.fromkeys(args))


class Evaluator:
    """Evaluates AST nodes against one snapshot (anything with `.lists`, a lists.Lists, and
    `.address_space()`); remembers every subexpression it solved."""

    def __init__(self, snapshot, budget: Budget | None = None):
        self.snapshot = snapshot
        self.lists = snapshot.lists
        self.budget = budget or Budget()
        self.memo: dict[Node, Intervals] = {}
        self.memo_in: dict = {}
        self._estimates: dict[Node, int] = {}
        self._cheap: dict[str, Intervals | None] = {}  # see cheap()
        self._read = self.lists.read
        # a database made with fold_diacritics stores its words without them: so are a
        # query's (the parser cannot know; see folded)
        self._fold = getattr(snapshot, "fold_diacritics", False)
        self._folded: dict[Node, Node] = {}

    def folded(self, node: Node) -> Node:
        """The node with its words as this database stores them: without diacritics in a
        database made with fold_diacritics (every entry point applies it), else itself."""
        if not self._fold:
            return node
        found = self._folded.get(node)
        if found is None:
            found = map_leaves(node, _strip_term)
            self._folded[node] = self._folded[found] = found
        return found

    # ------------------------------------------------------------------ accounting

    def _spent(self, result: Intervals) -> Intervals:
        read = self.lists.read  # (charge, inlined: a query charges ~12 times)
        self.budget.spend(len(result) + read - self._read)
        self._read = read
        return result

    def charge(self, produced: int) -> None:
        """Charge the budget for `produced` intervals and what the lists decoded since."""
        read = self.lists.read
        self.budget.spend(produced + read - self._read)
        self._read = read

    def check(self, node: Node) -> None:
        """QueryCostError for a query with more distinct leaves than MAX_LEAVES."""
        n = _LEAF_COUNTS.get(node)
        if n is None:
            n = _count_leaves(node, len(leaves(node)))
        if n > MAX_LEAVES:
            raise QueryCostError(f"query too expensive: {n:,} distinct terms, phrases and "
                                 f"features, more than the limit of {MAX_LEAVES:,}")

    def cheap(self, feature: str) -> Intervals | None:
        """The whole list when it is decoded or about a block long (Lists._whole_if_cheap),
        else None, asked once per query: a word is looked for in several ranges and
        regions. (A None is kept: a list decoded later is found by Lists.part/inside,
        which every None falls back to, so the answer is the same, only slower.)"""
        found = self._cheap.get(feature, _UNSEEN)
        if found is _UNSEEN:
            found = self._cheap[feature] = self.lists._whole_if_cheap(feature)
        return found  # type: ignore[return-value]

    def _whole(self, feature: str) -> Intervals:
        if self.lists.cached(feature) is None:
            self.budget.afford(self.lists.count(feature), f"reading the list of {feature!r}")
        return self.lists.whole(feature)

    # ------------------------------------------------------------------ estimates

    def estimate(self, node: Node) -> int:
        """An upper bound of the node's intervals (or of the work to find them), from the
        lists' counts: nothing is decoded."""
        if self._fold:
            node = self.folded(node)
        found = self._estimates.get(node)
        if found is not None:
            return found
        if node in self.memo:
            found = len(self.memo[node])
        elif isinstance(node, Term):
            toks = node.tokens
            found = self.lists.count(toks[0]) if len(toks) == 1 else \
                min((self.lists.count(t) for t in toks), default=0)
        elif isinstance(node, Feature):
            found = self.lists.count(node.name)
        elif isinstance(node, Combine) and node.op in ("^", "..."):
            found = min(self.estimate(a) for a in node.args)
        elif isinstance(node, Combine) and node.op == "+":
            found = sum(self.estimate(a) for a in node.args)
        elif isinstance(node, Combine):
            found = self.estimate(node.args[0])
        elif isinstance(node, (Compare, Link)):
            found = self.estimate(node.arg)
        else:
            found = self.snapshot.address_space()
        self._estimates[node] = found
        return found

    # ------------------------------------------------------------------ whole results

    def eval(self, node: Node) -> Intervals:
        if self._fold:
            node = self.folded(node)
        found = self.memo.get(node)
        if found is None:
            found = self.memo[node] = self._spent(self._eval(node))
        return found

    def _eval(self, node: Node) -> Intervals:
        if isinstance(node, Term):
            return self._term(node.tokens, None)
        if isinstance(node, Feature):
            return self._whole(node.name)
        if isinstance(node, Combine) and node.op == "^":
            return self._all_of(_distinct(node.args))
        if isinstance(node, Combine) and node.op == "+":
            return self._one_of([self.eval(a) for a in _distinct(node.args)])
        if isinstance(node, Combine) and node.op == "...":
            acc = self.eval(node.args[0])
            for arg in node.args[1:]:
                b = self.eval(arg)
                s, e = kernels.followed_by(acc.starts, acc.ends, b.starts, b.ends)
                acc = Intervals(s, e, np.zeros(len(s)))
            return acc
        if isinstance(node, Combine):
            first, rest = node.args[0], node.args[1:]
            probed = self._containing(first, rest[0]) if node.op == ">>" else None
            if probed is None:
                acc = self.eval(first)
            else:
                acc, rest = probed, rest[1:]
            for arg in rest:
                acc = self._select(node.op, acc, arg, None)
            return acc
        if isinstance(node, Compare):
            return _compare(node, self.eval(node.arg))
        if isinstance(node, Link):
            return self._link(self.eval(node.arg))
        if isinstance(node, Window):
            return self._windows(node.size)
        raise TypeError(f"not a query node: {node!r}")

    def _word(self, token: str, region: Region | None) -> Intervals:
        if region is None:
            return self._whole(token)
        found = self.cheap(token)
        if found is not None:  # (as Lists.inside does with it)
            return found.take(kernels.contained_in(found.starts, found.ends, region.los,
                                                   region.his))
        return self.lists.inside(token, region.los, region.his)

    def _term(self, toks: tuple[str, ...], region: Region | None) -> Intervals:
        """A word or a phrase (inside `region` when given). A phrase is solved from its
        rarest word; each run of one word (`a a a` is one run of three) is then checked at
        the candidates left, rarest word first, reading a long list only where the
        candidates are. Repeating a word costs nothing more than its run's length."""
        if not toks:
            return Intervals.empty()
        if len(toks) == 1:
            return self._word(toks[0], region)
        counts = {t: self.lists.count(t) for t in toks}
        if min(counts.values()) == 0:
            return Intervals.empty()
        runs: list[list] = []  # (word, offset, length) of each run of one word
        for i, t in enumerate(toks):
            if runs and runs[-1][0] == t:
                runs[-1][2] += 1
            else:
                runs.append([t, i, 1])
        runs.sort(key=lambda r: (counts[r[0]], -r[2], r[1]))
        word, offset, length = runs[0]
        starts = self._word(word, region).starts
        if offset:
            starts = starts - offset
            starts = starts[starts >= 0]
        rest = runs[1:] if length == 1 else runs  # (a run of 2+ is checked at its start)
        for word, offset, length in rest:
            if not len(starts):
                break
            lo = starts + offset
            self.budget.spend(len(lo))
            whole = self.cheap(word)  # (what Lists.part gives when there is one)
            at = (self.lists.part(word, lo, lo + (length - 1)) if whole is None
                  else whole).starts
            starts = starts[kernels.runs_at(at, lo, length)]
        return Intervals(starts, starts + (len(toks) - 1), np.zeros(len(starts)))

    def _partial(self, token: str, count: int, positions: int) -> bool:
        """Read only the blocks of `token`'s list near `positions` positions?"""
        return (count > PARTIAL_OVER and positions * PARTIAL_RATIO < count and
                self.lists.cached(token) is None and self.lists.points_only(token))

    def _all_of(self, args: list) -> Intervals:
        """`(^ A B ...)`. All-of is associative and commutative, so the operands are folded
        rarest first, and a common word needs only its postings next to the matches so far
        (the last one at or before, the first at or after each start), read from the
        blocks that hold them."""
        if len(args) == 1:
            return self.eval(args[0])
        args = sorted(args, key=self.estimate)
        acc = self.eval(args[0])
        for arg in args[1:]:
            if not len(acc):
                break
            if isinstance(arg, Term) and len(arg.tokens) == 1 and \
                    self._partial(arg.tokens[0], self.estimate(arg), len(acc)):
                b = self.lists.near(arg.tokens[0], acc.starts)
                s, e = kernels.both_of(acc.starts, acc.ends, b, b)
            else:
                b = self.eval(arg)
                s, e = kernels.both_of(acc.starts, acc.ends, b.starts, b.ends)
            acc = self._spent(Intervals(s, e, np.zeros(len(s))))
        return acc

    def _one_of(self, parts: list[Intervals]) -> Intervals:
        """`(+ ...)` of evaluated operands, merged pairwise (a balanced tree of merges)."""
        parts = [p for p in parts if len(p)]
        if not parts:
            return Intervals.empty()
        while len(parts) > 1:
            merged = []
            for a, b in zip(parts[0::2], parts[1::2]):
                s, e = kernels.one_of(a.starts, a.ends, b.starts, b.ends)
                merged.append(self._spent(Intervals(s, e, np.zeros(len(s)))))
            if len(parts) % 2:
                merged.append(parts[-1])
            parts = merged
        only = parts[0]
        return only if not only.values.any() else \
            Intervals(only.starts, only.ends, np.zeros(len(only)))

    def _select(self, op: str, a: Intervals, b_node: Node, region: Region | None
                ) -> Intervals:
        """`(op A B)` for a containment operator, A evaluated. The B-intervals that decide:
        inside A's (>>, !>), or containing A's (<<, !<) — for a feature or a word, found by
        probing its blocks at A's intervals when A is the shorter side."""
        if isinstance(b_node, Window):
            lengths = a.ends - a.starts + 1
            return a.take(np.flatnonzero(_WINDOW_SELECT[op](lengths, b_node.size)))
        if not len(a):
            return a
        name = list_name(b_node)
        if op in ("<<", "!<") and b_node not in self.memo and name is not None:
            if region is not None or len(a) * 4 < self.estimate(b_node):
                b = self._spent(self.lists.containing(name, a.starts, a.ends))
            else:
                b = self.eval(b_node)
        elif op in (">>", "!>") and region is None and b_node not in self.memo and \
                self.estimate(b_node) > 4 * len(a):
            b = self.eval_in(b_node, Region.around(a))
        elif region is not None and op in (">>", "!>"):
            b = self.eval_in(b_node, region.holding(a))
        else:
            b = self.eval(b_node)
        return a.take(getattr(kernels, _SELECT[op])(a.starts, a.ends, b.starts, b.ends))

    def _containing(self, a_node: Node, b_node: Node) -> Intervals | None:
        """`(>> A B)` for a feature or word A with a long list and a B much shorter: A's
        intervals containing one of B's, found by probing A's blocks at B's intervals
        (the documents holding a label: `(>> : judgment:T)`). None when A is short or not
        a list, or B is a window."""
        name = list_name(a_node)
        if name is None or isinstance(b_node, Window) or a_node in self.memo or \
                self.lists.cached(name) is not None or \
                self.estimate(a_node) <= 4 * self.estimate(b_node):
            return None
        b = self.eval(b_node)
        return self._spent(self.lists.containing(name, b.starts, b.ends))

    def _link(self, a: Intervals) -> Intervals:
        v = a.values
        v = v[np.isfinite(v) & (v >= 0) & (v == np.floor(v)) & (v < MAX_ADDRESS)]  # (exact)
        addrs = np.sort(v.astype(np.int64))
        addrs = addrs[np.concatenate(([True], addrs[1:] != addrs[:-1]))] if len(addrs) else addrs
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
        self.budget.afford(count, f"(# {n})")
        starts = np.arange(count, dtype=np.int64)
        return self._live(Intervals(starts, starts + (n - 1), np.zeros(count)))

    def _live(self, a: Intervals) -> Intervals:
        es, ee = self.lists.erased()
        if len(es) and len(a):
            return a.take(kernels.drop_erased(a.starts, a.ends, es, ee))
        return a

    # ------------------------------------------------------------------ inside a region

    def eval_in(self, node: Node, region: Region) -> Intervals:
        """The node's intervals lying inside one of the region's ranges: exactly
        `region.select(self.eval(node))`, reading only what lies in the region."""
        if self._fold:
            node = self.folded(node)
        found = self.memo.get(node)
        if found is not None:
            return region.select(found)
        key = (node, region.key)
        found = self.memo_in.get(key)
        if found is None:
            found = self.memo_in[key] = self._spent(self._eval_in(node, region))
        return found

    def _unbounded(self, node: Node) -> Intervals | None:
        """The node's whole result when it is at hand (solved already, or a word whose list
        is decoded or short), else None. An all-of inside a region may fold it in instead
        of its part in the region (the kernel gallops through it): a cover lying inside a
        range holds only intervals lying inside it, and is minimal among those as among
        all, so the covers the region's select keeps are the same."""
        found = self.memo.get(node)
        if found is None and isinstance(node, Term) and len(node.tokens) == 1:
            found = self.cheap(node.tokens[0])
        return found

    def _eval_in(self, node: Node, region: Region) -> Intervals:
        if not len(region):
            return Intervals.empty()
        if isinstance(node, Term):
            toks = node.tokens
            return self._word(toks[0], region) if len(toks) == 1 else \
                self._term(toks, region)
        if isinstance(node, Feature):
            return self.lists.inside(node.name, region.los, region.his)
        if isinstance(node, Combine) and node.op in ("^", "..."):
            args = _distinct(node.args) if node.op == "^" else list(node.args)
            rarest = min(args, key=self.estimate)
            first = self.eval_in(rarest, region)
            if not len(first):
                return Intervals.empty()
            narrowed = region.holding(first)
            if narrowed is not region:  # (its ranges are some of region's: first's there)
                self.memo_in[(rarest, narrowed.key)] = self._spent(narrowed.select(first))
                region = narrowed
            if node.op == "^":  # (rarest first: the others are not read once none is left)
                acc = self.eval_in(rarest, region)
                for arg in sorted(args, key=self.estimate)[1:]:  # ([0] is rarest: min's)
                    b = self._unbounded(arg)
                    if b is None:
                        b = self.eval_in(arg, region)
                    s, e = kernels.both_of(acc.starts, acc.ends, b.starts, b.ends)
                    acc = self._spent(Intervals(s, e, np.zeros(len(s))))
                    if not len(acc):
                        return acc
            else:
                parts = {arg: self.eval_in(arg, region) for arg in args}
                acc = parts[args[0]]
                for arg in args[1:]:
                    b = parts[arg]
                    s, e = kernels.followed_by(acc.starts, acc.ends, b.starts, b.ends)
                    acc = self._spent(Intervals(s, e, np.zeros(len(s))))
            return region.select(acc)
        if isinstance(node, Combine) and node.op == "+":
            return self._one_of([self.eval_in(a, region) for a in _distinct(node.args)])
        if isinstance(node, Combine):
            acc = self.eval_in(node.args[0], region)
            for arg in node.args[1:]:
                acc = self._select(node.op, acc, arg, region)
            return acc
        if isinstance(node, Compare):
            return _compare(node, self.eval_in(node.arg, region))
        return region.select(self.eval(node))  # (@ A), (# n): their whole result

    # ------------------------------------------------------------------ ranking

    def covers_in_blocks(self, node: Node, firsts: np.ndarray
                         ) -> tuple[Intervals, np.ndarray] | None:
        """The covers of a query of the common shape, `(^ G1 G2 ...)` of words, phrases and
        `(+ ...)` of them (or one such G), lying in the blocks of a disjoint container
        list (its directory `firsts`) that hold a driver, and the first starts of the
        blocks holding them (where their containers are), found by kernels.all_of_groups:
        one call when every word's list is at hand (decoded already or short: see cheap),
        else one more for each round of reads it asks for (a common word's blocks inside
        those ranges, or only at the candidates of the phrases holding it); None when the
        query has another shape or its rarest operand's words are not at hand. What a
        ranking takes of them is what it takes of eval_in's in those blocks: the covers
        inside the containers."""
        shape = _grouped(self.folded(node))
        if shape is None:
            return None
        words, toks, leaf_at, group_at = shape
        arrays: list[np.ndarray] = []
        counts: list[int] = []
        have: list[int] = []
        lists = self.lists
        distinct = list(dict.fromkeys(words))
        known = dict(zip(distinct, lists.at_hand(distinct)))
        for w in words:
            found, count, points = known[w]
            if not points and (found is None or found.ends is not found.starts):
                return None
            arrays.append(Intervals.empty().starts if found is None else found.starts)
            counts.append(count)
            have.append(int(found is not None))
        while True:
            # (its arrays end to end in one, each taken out as it is needed: see
            # kernels.all_of_groups_packed)
            out, work = kernels.all_of_groups_packed(arrays, counts, have, toks, leaf_at,
                                                     group_at, firsts)
            self.charge(work)
            ns, nn, npos, nruns, nlos = out[:5].tolist()
            a = 5 + 2 * ns
            need = out[a:a + nn]
            d = a + nn + npos + nruns
            if not np.count_nonzero(need):
                return Intervals(out[5:5 + ns], out[5 + ns:a], zero_values(ns)), \
                    out[d:d + nlos]
            if need[0] < 0:
                return None
            pos = out[a + nn:a + nn + npos]
            runs = out[a + nn + npos:d].tolist()
            los, his = out[d:d + nlos], out[d + nlos:d + 2 * nlos]
            for i in np.flatnonzero(need).tolist():
                if need[i] == 2:
                    arrays[i] = lists.part(words[i], los, his).starts
                else:
                    at = pos[runs[i]:runs[i + 1]]
                    arrays[i] = lists.part(words[i], at, at).starts
                have[i] = 1

    def drivers(self, node: Node) -> Intervals:
        """A GC-list such that every container holding an interval of the node also holds
        one of these: what finds the containers a ranking needs. For all-of and followed-by
        the rarest operand's, for one-of all operands', for a containment or a value filter
        its left operand's; else the node's own intervals."""
        if self._fold:
            node = self.folded(node)
        if isinstance(node, Combine) and node.op in ("^", "..."):
            return self.drivers(min(node.args, key=self.estimate))
        if isinstance(node, Combine) and node.op == "+":
            return self._one_of([self.drivers(a) for a in _distinct(node.args)])
        if isinstance(node, Combine):
            return self.drivers(node.args[0])
        if isinstance(node, Compare):
            return self.eval(node)
        return self.eval(node)


def _grouped(node: Node):
    """A query `(^ G1 G2 ...)` (or one G), each G a word, a phrase or `(+ ...)` of them, as
    kernels.all_of_groups takes it: (its words, one place for each word of each word or
    phrase, so that what is read of a word for one phrase serves that phrase only; those
    places in order; where each word or phrase's run of them begins; where each G's run
    of words and phrases begins); None for any other shape."""
    if isinstance(node, Combine) and node.op == "^":
        groups = _distinct(node.args)
    elif isinstance(node, (Term, Combine)):
        groups = [node]
    else:
        return None
    words: list[str] = []
    leaf_at, group_at = [0], [0]
    for g in groups:
        if isinstance(g, Term):
            leaves = [g]
        elif isinstance(g, Combine) and g.op == "+":
            leaves = _distinct(g.args)
        else:
            return None
        for leaf in leaves:
            if not isinstance(leaf, Term) or not leaf.tokens:
                return None
            words += leaf.tokens
            leaf_at.append(len(words))
        group_at.append(len(leaf_at) - 1)
    if len(words) > MAX_GROUPED_WORDS:
        return None
    return words, range(len(words)), leaf_at, group_at


def _strip_term(node: Term | Feature) -> Node:
    if isinstance(node, Term):
        return Term(tuple(map(strip_diacritics, node.tokens)))
    return node


def list_name(node: Node) -> str | None:
    """The feature a node reads as one stored list (a feature, or a one-word term)."""
    if isinstance(node, Feature):
        return node.name
    if isinstance(node, Term) and len(node.tokens) == 1:
        return node.tokens[0]
    return None


def _compare(node: Compare, a: Intervals) -> Intervals:
    return a.take(np.flatnonzero(_COMPARE[node.op](a.values, node.value)))
