"""The tokenizer (ARCHITECTURE.md "Data model"): folded tokens of hand-picked texts (letters,
marks and digits, one-character symbols and ideographs, simple case folding), their
character offsets, and the offsets kernel and the bulk tokenizer giving the regex's tokens
and spans."""

from hypothesis import given, settings
from hypothesis import strategies as st

from annodb import tokenizer
from annodb.tokenizer import fold, offsets, tokens, tokens_with_offsets

VECTORS = [
    ("HeLlO     wOrLd", ["hello", "world"]),
    ("0.5000", ["0", "5000"]),
    ("💙Blue Heart", ["💙", "blue", "heart"]),
    ("hurlyburly’s", ["hurlyburly", "s"]),
    ("제6차", ["제6차"]),
    ("田中さんは", ["田", "中", "さんは"]),
    ("ß", ["ß"]),
    ("ΟΔΟΣ", ["οδοσ"]),            # final sigma folds to σ
    ("οδος", ["οδοσ"]),
    ("a_b-c'd’e", ["a", "b", "c", "d", "e"]),
    ("", []),
    ("...", []),
    ("naïve café", ["naïve", "café"]),
    ("e\u0301t\u0301e", ["e\u0301t\u0301e"]),   # combining marks stay in the token
    ("x²+y³", ["x²", "y³"]),                   # No (other numbers) are word characters
    ("Ⅻ chapters", ["ⅻ", "chapters"]),        # Nl
]


def test_vectors():
    for text, want in VECTORS:
        assert tokens(text) == want, text


def test_offsets_point_into_the_original_text():
    words, starts, ends = tokens_with_offsets("0.5000")
    assert words == ["0", "5000"] and starts.tolist() == [0, 2] and ends.tolist() == [1, 6]
    text = "  Hello, Wörld! 💙Blue"
    words, starts, ends = tokens_with_offsets(text)
    assert [text[a:b] for a, b in zip(starts, ends)] == ["Hello", "Wörld", "💙", "Blue"]


def test_folding_is_simple_and_one_to_one():
    assert fold("ẞ") == "ß"                  # capital sharp s: simple folding, not "ss"
    assert fold("İ") == "İ"                  # no one-to-one folding: unchanged
    assert fold("ſ") == "s" and fold("µ") == "μ"
    assert len(fold("ΣΑΣ ﬁ İ ẞ")) == len("ΣΑΣ ﬁ İ ẞ")


def test_version_is_recorded():
    assert isinstance(tokenizer.VERSION, int) and tokenizer.VERSION >= 1


ALPHABET = "aZ09 .,’'-_\n\t💙田中さんはΣςσ제ßİ\u0301\ufe0f\U0001D400\U00010400éẞ²Ⅻ\u200d🏻"


@settings(max_examples=400)
@given(st.text(alphabet=ALPHABET, max_size=40) | st.text(max_size=40))
def test_offsets_kernel_equals_the_regex(text):
    folded = fold(text)
    want = [(m.start(), m.end()) for m in tokenizer._TOKEN.finditer(folded)]
    starts, ends = offsets(text)
    assert list(zip(starts.tolist(), ends.tolist())) == want
    assert tokens_with_offsets(text)[0] == tokens(text)


def _bulk(text):
    """distinct_tokens, checked for consistency: (words, starts)."""
    starts, kinds, names = tokenizer.distinct_tokens(text)
    words = [names[k] for k in kinds.tolist()]
    assert names == list(dict.fromkeys(words))  # kinds in order of first appearance
    return words, starts


@settings(max_examples=400)
@given(st.text(alphabet=ALPHABET, max_size=60) | st.text(max_size=60))
def test_bulk_tokenizer_equals_the_regex(text):
    words, starts = _bulk(text)
    folded = fold(text)
    assert [(m.start(), m.group()) for m in tokenizer._TOKEN.finditer(folded)] == \
        list(zip(starts.tolist(), words))


def test_bulk_tokenizer_grows_past_its_first_arrays():
    """Many distinct words, a very long one, and many tokens: every array of the interning
    kernel grows (the table, the kinds, the arena, the tokens) and nothing is lost."""
    distinct = " ".join(f"w{i}x" for i in range(20000))
    long_word = "Q" * 70000
    text = f"{distinct} {long_word} {distinct.upper()} a a a {long_word.lower()} 💙💙"
    words, starts = _bulk(text)
    assert words == tokens(text)
    assert len(set(words)) == 20000 + 1 + 2


_NO_SURROGATE = st.characters(exclude_categories=("Cs",))


@settings(max_examples=300)
@given(st.lists(st.text(alphabet=ALPHABET, max_size=30) | st.text(_NO_SURROGATE, max_size=30),
                max_size=8))
def test_bulk_tokenizer_of_utf8_equals_the_one_of_code_points(lines):
    """intern_tokens_utf8 (each code point decoded from the UTF-8 as it is met: one, two,
    three and four bytes, folded, inside a word and at its edges) gives what
    intern_tokens gives the same text's code points."""
    import numpy as np
    from annodb import kernels
    text = "\n".join(lines)
    cps = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    want = kernels.intern_tokens(cps, tokenizer._class_table(), tokenizer._fold_table())
    got = kernels.intern_tokens_utf8(np.frombuffer(text.encode(), dtype=np.uint8),
                                     tokenizer._class_table(), tokenizer._fold_table())
    assert [a.tolist() for a in got] == [a.tolist() for a in want]


def test_bulk_tokenizer_of_utf8_grows_past_its_first_arrays():
    import numpy as np
    distinct = " ".join(f"w{i}x" for i in range(20000))
    long_word = "Q" * 70000
    text = f"{distinct}\n{long_word} {distinct.upper()}\na a a {long_word.lower()} 💙💙\n"
    words, starts = _bulk(text)
    got = tokenizer.distinct_utf8_tokens(np.frombuffer(text.encode(), dtype=np.uint8))
    assert got[2] == list(dict.fromkeys(words))
    assert [got[2][k] for k in got[1].tolist()] == words
    assert got[0].tolist() == starts.tolist()


def test_strip_diacritics():
    """NFD, the combining diacritical marks U+0300..U+036F dropped, NFC (what FTS5's
    remove_diacritics drops; for every script they decompose from)."""
    from annodb.tokenizer import strip_diacritics
    cases = {"café": "cafe", "cafe\u0301": "cafe", "naïve": "naive", "résumé": "resume",
             "ñandú": "nandu", "ελληνικά": "ελληνικα", "ἄνθρωπος": "ανθρωπος", "й": "и",
             "łódź": "łodz", "ø": "ø", "ß": "ß", "किताब": "किताब", "한국어": "한국어",
             "\u0301": "\u0301", "plain": "plain", "x²": "x²"}
    for word, want in cases.items():
        assert strip_diacritics(word) == want, word


@settings(max_examples=200)
@given(st.lists(st.lists(st.text(_NO_SURROGATE, max_size=6) | st.sampled_from(
    ["a", "b", "ab", "the", "é", "💙"]), max_size=40), max_size=6))
def test_word_numbers_kept_across_batches_equal_the_naive_ones(batches):
    """kernels.number_words over batches of words (each batch's words distinct, as a
    batch's kinds are; the same word again in later batches, empty words, words beyond
    the BMP) gives each word the number of its first appearance in any batch, as
    naive.number_words does, growing its arrays from the smallest."""
    import numpy as np
    from annodb import kernels
    from tests import naive

    batches = [list(dict.fromkeys(words)) for words in batches]
    table, hashes = np.full(2, -1, np.int64), np.empty(2, np.int64)
    known, kept, count = np.zeros(2, np.int64), np.empty(1, np.uint32), 0
    got = []
    for words in batches:
        arena = np.frombuffer("".join(words).encode("utf-32-le"), dtype=np.uint32)
        bounds = np.zeros(len(words) + 1, np.int64)
        bounds[1:] = np.cumsum([len(w) for w in words])
        out, count, table, hashes, known, kept = kernels.number_words(
            arena, bounds, table, hashes, known, kept, count)
        got.append(out.tolist())
    assert got == naive.number_words(batches)
    assert count == len({w for words in batches for w in words})


@settings(max_examples=200)
@given(st.lists(st.lists(st.text(alphabet=ALPHABET, max_size=30) |
                         st.text(_NO_SURROGATE, max_size=30) |
                         st.sampled_from(["a", "the", "The THE", "é", "💙"]), max_size=6),
                max_size=5))
def test_tokens_numbered_as_they_are_found_equal_the_naive_ones(texts):
    """kernels.number_utf8 over texts in turn (words again in later texts, words that
    fold together, one-character tokens, code points of one to four bytes) gives each
    token's start, its kind in its text and each kind's number across the texts, as
    naive.number_utf8 does, growing its arrays from the smallest."""
    import numpy as np
    from annodb import kernels
    from tests import naive

    texts = ["\n".join(lines) for lines in texts]
    table, hashes = np.full(2, -1, np.int64), np.empty(2, np.int64)
    known, kept, marks, count = np.zeros(2, np.int64), np.empty(1, np.uint32), \
        np.zeros(2, np.int64), 0
    got = []
    for call, text in enumerate(texts, 1):
        starts, kinds, words, count, table, hashes, known, kept, marks = \
            kernels.number_utf8(np.frombuffer(text.encode(), np.uint8),
                                tokenizer._class_table(), tokenizer._fold_table(), table,
                                hashes, known, kept, marks, count, call)
        got.append((starts.tolist(), kinds.tolist(), words.tolist()))
    assert got == naive.number_utf8(texts)


def test_word_numbers_of_a_batch_tokenized():
    """tokenizer.numbered_utf8_tokens over two batches: the tokens and kinds of
    distinct_utf8_tokens, each kind's number (a word of the second batch met in the
    first has the first's number, the new ones the next) and the new words' names."""
    import numpy as np
    numbers = tokenizer.WordNumbers()
    texts = [b"Rock and roll\nROCK", "roll \u00fcber rock \U0001F499".encode()]
    got = [tokenizer.numbered_utf8_tokens(np.frombuffer(t, np.uint8), numbers)
           for t in texts]
    for t, (starts, kinds, _, _, _) in zip(texts, got):
        want = tokenizer.distinct_utf8_tokens(np.frombuffer(t, np.uint8))
        assert starts.tolist() == want[0].tolist() and kinds.tolist() == want[1].tolist()
    assert [g[2].tolist() for g in got] == [[0, 1, 2], [2, 3, 0, 4]]
    assert [(g[3], g[4]) for g in got] == [(0, ["rock", "and", "roll"]),
                                           (3, ["\u00fcber", "\U0001F499"])]
    assert numbers.names(0) == ["rock", "and", "roll", "\u00fcber", "\U0001F499"]
