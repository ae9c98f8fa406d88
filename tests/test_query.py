"""The query parser (annodb/query.py): forms, term rules, errors, lenient repairs, round trip,
fuzz, and the 4,435 real Vole queries."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from annodb.errors import QueryError
from annodb.query import (MAX_DEPTH, OPERATORS, Combine, Compare, Feature, Link, Term, Window,
                          _parse_full, _parse_plain, format, parse)

DATA = Path(__file__).parent / "data" / "vole-queries.tsv"


def t(*toks):
    return Term(tuple(toks))


def node(text, **kw):
    return parse(text, **kw).node


# --- forms ----------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("goth", t("goth")),
    ('"gothic rock"', t("gothic", "rock")),
    ("(^ a b)", Combine("^", (t("a"), t("b")))),
    ("(+ a b c)", Combine("+", (t("a"), t("b"), t("c")))),
    ("(... a b)", Combine("...", (t("a"), t("b")))),
    ("(<< a b)", Combine("<<", (t("a"), t("b")))),
    ("(>> : b)", Combine(">>", (Feature(":"), t("b")))),
    ("(!< a b c)", Combine("!<", (t("a"), t("b"), t("c")))),
    ("(!> a b)", Combine("!>", (t("a"), t("b")))),
    ("(# 5)", Window(5)),
    ("(@ link:)", Link(Feature("link:"))),
    ("(= a 1)", Compare("=", t("a"), 1.0)),
    ("(!= a 0)", Compare("!=", t("a"), 0.0)),
    ("(< :price: -1.5)", Compare("<", Feature(":price:"), -1.5)),
    ("(<= a +2.5e3)", Compare("<=", t("a"), 2500.0)),
    ("(> a .5)", Compare(">", t("a"), 0.5)),
    ("(>= judgment:T 2)", Compare(">=", Feature("judgment:T"), 2.0)),
    ("(>> : (>= judgment:2024-152259 2))",
     Combine(">>", (Feature(":"), Compare(">=", Feature("judgment:2024-152259"), 2.0)))),
    ("(^ a (+ b c) \"x y\")",
     Combine("^", (t("a"), Combine("+", (t("b"), t("c"))), t("x", "y")))),
    ("  (^\ta\nb)  ", Combine("^", (t("a"), t("b")))),
    ('(^"a" b)', Combine("^", (t("a"), t("b")))),          # a raw term ends at '"'
])
def test_forms(text, expected):
    assert parse(text) == parse(text, lenient=True)
    assert parse(text).node == expected
    assert parse(text).warnings == []


def test_nary_kept_flat_and_nested_kept_nested():
    assert node("(^ a b c d)").args == (t("a"), t("b"), t("c"), t("d"))
    assert node("(^ (^ a b) c)") == Combine("^", (Combine("^", (t("a"), t("b"))), t("c")))


@pytest.mark.parametrize("op", ["^", "+", "..."])
def test_one_operand_is_the_operand(op):
    assert parse(f"({op} x)").node == t("x")
    assert parse(f"({op} x)").warnings == []
    assert node(f"(<< ({op} (+ a b)) c)") == Combine("<<", (Combine("+", (t("a"), t("b"))), t("c")))


@pytest.mark.parametrize("text, expected", [
    ("Goth", t("goth")),
    ("covid-19", t("covid", "19")),
    ("15,000", t("15", "000")),
    ("u.s.", t("u", "s")),
    ("...", t()),                        # not first after '(': a term with no tokens
    ('""', t()),
    ('"15,000"', t("15", "000")),
    ('"title:"', t("title")),            # quoted: always tokenized
    ("title:", Feature("title:")),
    (":", Feature(":")),
    (":chapter:", Feature(":chapter:")),
    ("judgment:2024-152259", Feature("judgment:2024-152259")),
    ("a<b", Feature("a<b")),
    ("#x", Feature("#x")),
    ("@", Feature("@")),
    ("a=b", Feature("a=b")),
    ("<<", Feature("<<")),               # an operator only right after '('
])
def test_term_rules(text, expected):
    assert node(text) == expected


def test_operator_only_after_paren():
    assert node("(^ ^ <<)") == Combine("^", (t(), Feature("<<")))
    assert node("(>= >= 2)") == Compare(">=", Feature(">="), 2.0)


# --- strict errors --------------------------------------------------------------------------

@pytest.mark.parametrize("text, offset, expected", [
    ("", 0, "a term, phrase or '('"),
    ("   ", 3, "a term, phrase or '('"),
    ("(^ a b", 6, "')'"),                         # missing ')' at the end
    ("(^ a (+ b c)", 12, "')'"),
    ("(", 1, None),
    ("(^ a b))", 7, "end of query"),              # an extra ')'
    (")", 0, "end of query"),
    ("a)", 1, "end of query"),
    ("(AND a b)", 1, None),                       # unknown operator
    ("(goth rock)", 1, None),
    ("((^ a b))", 1, None),
    ("(^a b)", 1, None),                          # '^a' is one raw term
    ("()", 1, None),
    ("(^)", 2, "a term, phrase or '('"),          # arity
    ("(<< a)", 5, "a term, phrase or '('"),
    ("(@)", 2, "a term, phrase or '('"),
    ("(@ a b)", 5, "')'"),
    ("(#)", 2, "a positive integer"),
    ("(# 3 4)", 5, "')'"),
    ("(= a)", 4, "a number"),
    ("(= a 1 2)", 7, "')'"),
    ("(# 0)", 3, "a positive integer"),           # bad numbers
    ("(# -1)", 3, "a positive integer"),
    ("(# 1.5)", 3, "a positive integer"),
    ("(# x)", 3, "a positive integer"),
    ('(# "5")', 3, "a positive integer"),
    ("(# (^ a b))", 3, "a positive integer"),
    ("(# 99999999999999999999)", 3, "a positive integer"),
    ("(# " + "9" * 5000 + ")", 3, "a positive integer"),
    ("(>= a b)", 6, "a number"),
    ("(>= a nan)", 6, "a number"),
    ("(>= a inf)", 6, "a number"),
    ("(>= a 1e999)", 6, "a number"),
    ("(>= a 1_000)", 6, "a number"),
    ("(>= a 0x10)", 6, "a number"),
    ("a b", 2, "end of query"),                   # trailing input
    ("(^ a b) c", 8, "end of query"),
    ("(^ a b)(+ c d)", 7, "end of query"),
    ('"abc', 0, "a closing '\"'"),                # unterminated quote
    ('(^ a "b c)', 5, "a closing '\"'"),
    ('("x y")', 1, None),                         # lenient repairs these
    ("(x)", 1, None),
])
def test_strict_errors(text, offset, expected):
    with pytest.raises(QueryError) as info:
        parse(text)
    assert info.value.offset == offset
    if expected is not None:
        assert info.value.expected == expected
    assert info.value.message and str(offset) in str(info.value)


def test_unknown_operator_says_what_was_expected():
    with pytest.raises(QueryError) as info:
        parse("(AND a b)")
    assert "AND" in info.value.message and "^" in info.value.expected


def test_depth_limit():
    deep = "(@ " * MAX_DEPTH + "a" + ")" * MAX_DEPTH
    assert format(parse(deep).node) == deep       # iterative format too: no RecursionError
    too_deep = "(@ " * (MAX_DEPTH + 1) + "a" + ")" * (MAX_DEPTH + 1)
    for lenient in (False, True):
        with pytest.raises(QueryError) as info:
            parse(too_deep, lenient=lenient)
        assert info.value.offset == 3 * MAX_DEPTH
    with pytest.raises(QueryError):
        parse("(" * 100_000, lenient=True)


# --- lenient repairs ------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected, warnings", [
    ("(^ a b", Combine("^", (t("a"), t("b"))), ["offset 6: added 1 missing ')'"]),
    ("(^ a (+ b c", Combine("^", (t("a"), Combine("+", (t("b"), t("c"))))),
     ["offset 11: added 2 missing ')'"]),
    ('("x y")', t("x", "y"), ["offset 1: unwrapped"]),
    ("(x)", t("x"), ["offset 1: unwrapped"]),
    ("(title:)", Feature("title:"), ["offset 1: unwrapped"]),
    ('(^ a ("b c") (d))', Combine("^", (t("a"), t("b", "c"), t("d"))),
     ["offset 6: unwrapped", "offset 14: unwrapped"]),
    ('("x y"', t("x", "y"), ["offset 6: added 1 missing ')'", "offset 1: unwrapped"]),
])
def test_lenient_repairs(text, expected, warnings):
    parsed = parse(text, lenient=True)
    assert parsed.node == expected
    assert len(parsed.warnings) == len(warnings)
    for got, prefix in zip(parsed.warnings, warnings):
        assert got.startswith(prefix)
    with pytest.raises(QueryError):
        parse(text)


@pytest.mark.parametrize("text", [
    "", "(^ a b))", "(AND a b)", '("a" "b")', "((x))", "()", "(", "(^", "(^)", '"abc',
    "a b", "(# 0", ") (^ a b", "(^ a b) (",
])
def test_lenient_still_rejects(text):
    with pytest.raises(QueryError):
        parse(text, lenient=True)


# --- round trip -----------------------------------------------------------------------------

WORDS = st.sampled_from(["a", "b", "goth", "rock", "19", "x1", "é", "中", "ß"])
terms = st.lists(WORDS, max_size=3).map(lambda ws: Term(tuple(ws)))
features = st.sampled_from([":", "title:", ":chapter:", "judgment:2024-152259", "a=b", "<<",
                            ">", "#", "@x", ":authors:[0]:"]).map(Feature)
windows = st.integers(1, 2**63 - 1).map(Window)
numbers = st.floats(allow_nan=False, allow_infinity=False) | st.integers(-10, 10).map(float)


def _compound(children):
    combines = st.builds(
        lambda op, args: Combine(op, tuple(args)),
        st.sampled_from([op for op, row in OPERATORS.items() if row[0] is Combine]),
        st.lists(children, min_size=2, max_size=4))
    compares = st.builds(
        Compare, st.sampled_from([op for op, row in OPERATORS.items() if row[0] is Compare]),
        children, numbers)
    return combines | compares | st.builds(Link, children)


asts = st.recursive(terms | features | windows, _compound, max_leaves=12)


@settings(max_examples=300)
@given(asts)
def test_round_trip(ast):
    text = format(ast)
    assert parse(text).node == ast
    assert parse(text).warnings == []
    assert format(parse(text).node) == text


@pytest.mark.parametrize("ast, text", [
    (t("goth"), "goth"),
    (t("gothic", "rock"), '"gothic rock"'),
    (t(), '""'),
    (t("Goth"), '"Goth"'),                        # not a folded token: quoted
    (Feature("title:"), "title:"),
    (Combine("^", (t("a"), Combine("+", (t("b"), t("c"))))), "(^ a (+ b c))"),
    (Window(5), "(# 5)"),
    (Link(Feature(":")), "(@ :)"),
    (Compare(">=", Feature("judgment:T"), 2.0), "(>= judgment:T 2)"),
    (Compare("<", t("a"), -1.5), "(< a -1.5)"),
    (Compare("<", t("a"), 1e300), "(< a 1e+300)"),
])
def test_format(ast, text):
    assert format(ast) == text


@pytest.mark.parametrize("ast", [Feature("title"), Feature("a b:"), Feature(""),
                                 Compare("=", t("a"), float("nan"))])
def test_format_rejects_what_cannot_be_written(ast):
    with pytest.raises(ValueError):
        format(ast)


# --- fuzz -----------------------------------------------------------------------------------

@settings(max_examples=300)
@given(st.text(alphabet='()"^+<>!#@=:. \t\nab1-.5', max_size=40), st.booleans())
def test_fuzz_raises_only_query_error(text, lenient):
    try:
        parsed = parse(text, lenient=lenient)
    except QueryError:
        return
    if not lenient:
        assert parsed.warnings == []
    assert parse(format(parsed.node)).node == parsed.node


def _both_paths(text: str, lenient: bool):
    """(the node the quick path gives or None, the full path's Parsed or None on an error)."""
    try:
        full = _parse_full(text, lenient)
    except QueryError:
        full = None
    return _parse_plain(text), full


@settings(max_examples=500)
@given(st.text(alphabet='()"^+.<>!#@= \tab1:\u00e9', max_size=40), st.booleans())
def test_the_quick_parse_agrees_with_the_full_one(text, lenient):
    """Where the quick path (plain combining queries, one findall) answers, the full path
    gives the same node and no warnings; where the full path raises or repairs, the quick
    one declines."""
    quick, full = _both_paths(text, lenient)
    if quick is not None:
        assert full is not None and full.node == quick and full.warnings == []


@pytest.mark.parametrize("text", ['(^ a "b', '(^ a b', "(^ a) b", "(^)", '("a")', "(# 3)",
                                  "(<< a)", "a b", "(^ a (", "\ud800", "(+ a b))",
                                  "(= a 1)", "()"])
def test_the_quick_parse_declines_what_needs_the_full_one(text):
    """An unterminated quote, an unclosed or extra parenthesis, too few operands, a lone
    term in parentheses, another operator, trailing input, a lone surrogate: the quick
    path gives None (the full one reports it or repairs it with offsets)."""
    assert _parse_plain(text) is None


# --- the real workload ----------------------------------------------------------------------

def _vole_queries():
    lines = DATA.read_text(encoding="utf-8").splitlines()
    assert lines[0].split("\t") == ["topic", "cottontail_status", "cottontail_ms", "query"]
    return [line.split("\t") for line in lines[1:]]


def test_vole_queries():
    rows = _vole_queries()
    assert len(rows) == 4435
    errors = 0
    for _topic, status, _ms, text in rows:
        parsed = parse(text, lenient=True)
        if status == "error":
            errors += 1
            assert parsed.warnings, text
            with pytest.raises(QueryError):
                parse(text)
        else:
            assert status == "ok"
            assert parsed.warnings == [], text
            assert parse(text) == parsed
            assert _parse_plain(text) == parsed.node  # (the quick path takes them all)
        assert parse(format(parsed.node)).node == parsed.node
    assert errors == 6


# --- raw terms naming no feature (resolve) --------------------------------------------------

def test_resolve_a_raw_term_naming_no_feature():
    from annodb.query import resolve
    known = {"title:", "user:bob"}.__contains__
    query = node("(^ (<< 10:30 title:) user:bob (>= :x: 2) ::)")
    lenient, warnings = resolve(query, known, lenient=True)
    assert lenient == node('(^ (<< "10 30" title:) user:bob (>= "x" 2) ::)')
    assert warnings == [
        "'10:30' names no feature of the database; searched its words \"10 30\" instead",
        "':x:' names no feature of the database; searched its words \"x\" instead",
        "'::' names no feature of the database and has no words: it matches nothing"]
    strict, warnings = resolve(query, known)
    assert strict == query and len(warnings) == 3
    assert warnings[0].startswith("'10:30' names no feature of the database, so it matches "
                                  "nothing") and warnings[0].endswith('quote it: "10:30"')
    assert resolve(node("(+ title: user:bob)"), known, lenient=True) == \
        (node("(+ title: user:bob)"), [])
    repeated, warnings = resolve(node("(+ a:b (^ a:b c))"), known, lenient=True)
    assert repeated == node('(+ "a b" (^ "a b" c))') and len(warnings) == 1


def test_a_window_past_int64_says_how_large_one_may_be():
    """A window of a positive integer too large for an address says so, with the largest
    one allowed; it read "expected a positive integer", which it was."""
    for text in ("(# 99999999999999999999)", "(# " + "9" * 5000 + ")"):
        with pytest.raises(QueryError, match="positive integer of at most 9,223,372,036,8"):
            parse(text)
    assert parse("(# 9223372036854775807)").node.size == 2**63 - 1
