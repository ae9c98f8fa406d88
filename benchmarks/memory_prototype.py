"""The in-memory prototype the LoCoMo recall variants were tried with before
annodb/recall.py was written (issue 37, item 5): every turn tokenized by annodb's
tokenizer and conflated by its Snowball stem, scores computed in numpy, the same metric
as benchmarks/memory.py. It prints one row per variant: the ones recall.py settled on and
the ones that lost (RESULTS.md, "Agent memory on LoCoMo", lists them all).

    python benchmarks/memory_prototype.py              # the first round
    python benchmarks/memory_prototype.py --windowed   # the second: bounded statistics
    python benchmarks/memory_prototype.py --third      # the third: labels, depth
    python benchmarks/memory_prototype.py --fourth     # the fourth: a length prior (the
                                                       # tuning half; --held-out: all)
    python benchmarks/memory_prototype.py --fifth      # the fifth: names, BM25+, priors
    python benchmarks/memory_prototype.py --sixth      # the sixth: a thesaurus (WordNet
                                                       # 3.0, Debian's wordnet-base)
    python benchmarks/memory_prototype.py --seventh    # the seventh: dates a memory names,
                                                       # a background prior (BG=wordfreq,
                                                       # the wordfreq package if installed,
                                                       # or BG=msmarco)

The eighth round (memories that ask) scored its variants from annodb's own scores instead:
benchmarks/memory_eighth.py.

Its figures differ from annodb's by a few tenths: it conflates every word with its stem
(annodb: the words of the database sharing the stem, at most 32), and it lends context
over 8 neighbours on either side (recall.py: the whole session, decayed).
"""

from __future__ import annotations

import collections
import datetime
import math
import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")   # (small matrices: threads cost 20x)
import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from benchmarks.memory import (DATA, TUNE, halves, questions, recall_at, turns,  # noqa: E402
                               when)


def idf(df, n):
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


class Corpus:
    """Per conversation: docids, sessions, stemmed tokens, lengths, postings as dense tf
    vectors; the collection's df (turns and sessions) and average lengths."""

    def __init__(self):
        from annodb.ranking import stem
        from annodb.tokenizer import tokens
        self.stem, self.tokens = stem, tokens
        self.convs = {}
        self.df, self.sdf = collections.Counter(), collections.Counter()
        rows = turns()
        for d in rows:
            c = self.convs.setdefault(d["conv"], {"ids": [], "sess": [], "toks": [],
                                                  "time": []})
            toks = [stem(w) for w in tokens(d["text"])]
            c["ids"].append(d["docid"])
            c["sess"].append(d["session"])
            c["toks"].append(toks)
            c["time"].append(when(d["date_time"]))
            self.df.update(set(toks))
        self.n = len(rows)
        self.avg = sum(len(t) for c in self.convs.values() for t in c["toks"]) / self.n
        self.n_sessions = 0
        for c in self.convs.values():
            c["sess"] = np.array(c["sess"])
            c["time"] = np.array(c["time"])
            c["len"] = np.array([len(t) for t in c["toks"]], float)
            inv = collections.defaultdict(lambda: np.zeros(len(c["toks"])))
            for i, toks in enumerate(c["toks"]):
                for w in toks:
                    inv[w][i] += 1
            c["inv"] = dict(inv)
            c["uniq"] = np.unique(c["sess"])
            c["sidx"] = np.searchsorted(c["uniq"], c["sess"])
            c["slen"] = np.bincount(c["sidx"], weights=c["len"])
            for s in c["uniq"]:
                self.sdf.update({w for t, x in zip(c["toks"], c["sess"]) if x == s for w in t})
            self.n_sessions += len(c["uniq"])
        self.savg = sum(c["slen"].sum() for c in self.convs.values()) / self.n_sessions

    def words(self, text, stop=False):
        from annodb.feedback import STOP_WORDS
        ws = self.tokens(text)
        if stop:
            ws = [w for w in ws if w not in STOP_WORDS] or ws
        return collections.Counter(self.stem(w) for w in ws)


def shift(x, j, sess):
    """y[i] = x[i + j] where that is in the same session, else 0."""
    n = len(x)
    y, ok = np.zeros(n), np.zeros(n, bool)
    if j > 0:
        y[:n - j], ok[:n - j] = x[j:], sess[j:] == sess[:n - j]
    else:
        j = -j
        y[j:], ok[j:] = x[:n - j], sess[:n - j] == sess[j:]
    return y * ok


def lend(x, sess, before, after, window):
    return sum(before ** j * shift(x, -j, sess) + after ** j * shift(x, j, sess)
               for j in range(1, window + 1))


def date_hits(text, times):
    from annodb.recall import date_ranges
    return [(times >= lo) & (times < hi) for lo, hi in date_ranges(text)]


def scorer(corpus, k1=0.9, b=0.7, before=0.5, after=0.3, window=8, own=1.0, common=0.2,
           session=0.5, sk1=0.9, sb=0.6, session_idf="local", dates=1.5, stop=False,
           doc_idf="turn", vdf=None, context="bm25f", lam=0.8):
    """A function (conversation, question, query words) -> scores of its turns."""
    def f(c, text, qt=None):
        qt = qt if qt is not None else corpus.words(text, stop)
        n = len(c["len"])
        turn, sess = np.zeros(n), np.zeros(len(c["uniq"]))
        L = c["len"]
        LL = own * L + lend(L, c["sess"], before, after, window)
        avg = LL.mean()
        for t, q in qt.items():
            tf = c["inv"].get(t)
            if tf is None:
                continue
            i = idf(corpus.df[t], corpus.n) if doc_idf == "turn" else (
                idf(min(vdf[t], corpus.n), corpus.n) if doc_idf == "context" else
                idf(int((tf > 0).sum()), n))
            lent = lend(tf, c["sess"], before, after, window) \
                if common is None or (tf > 0).sum() <= max(common * n, 1) else 0.0
            if context == "bm25f":
                x = own * tf + lent
                turn += q * i * x / (x + k1 * (1 - b + b * LL / avg))
            else:  # BM25 of the turn plus lam x BM25 of its context, two sums
                turn += q * i * tf / (tf + k1 * (1 - 0.4 + 0.4 * L / L.mean()))
                lc = LL - own * L
                turn += lam * q * i * lent / (lent + k1 * (1 - b + b * lc / lc.mean()))
            if session:
                stf = np.bincount(c["sidx"], weights=tf, minlength=len(c["uniq"]))
                si = idf(int((stf > 0).sum()), len(c["uniq"])) if session_idf == "local" \
                    else (idf(corpus.sdf[t], corpus.n_sessions) if session_idf == "global"
                          else i)
                slen, savg = c["slen"], (c["slen"].mean() if session_idf == "local"
                                         else corpus.savg)
                sess += q * si * stf / (stf + sk1 * (1 - sb + sb * slen / savg))
        dated = np.zeros(n)
        for hit in (date_hits(text, c["time"]) if dates else []):
            if hit.sum():
                dated += idf(int(hit.sum()), n) * hit
        return turn + (turn > 0) * (session * sess[c["sidx"]] + dates * dated)
    return f


def rm3(corpus, base, docs=10, terms=20, original=0.9):
    def f(c, text):
        qt = corpus.words(text)
        s = base(c, text, qt)
        weight = collections.Counter()
        for i in np.argsort(-s, kind="stable")[:docs]:
            if s[i] > 0:
                for w, tf in collections.Counter(c["toks"][i]).items():
                    if corpus.df[w] / corpus.n <= 0.1 and 2 <= len(w) <= 20 and w.isalnum():
                        weight[w] += tf / len(c["toks"][i]) * s[i]
        kept = weight.most_common(terms)
        total, qsum = sum(v for _, v in kept) or 1.0, sum(qt.values())
        expanded = collections.Counter({t: original * v / qsum for t, v in qt.items()})
        for w, v in kept:
            expanded[w] += (1 - original) * v / total
        return base(c, text, expanded)
    return f


def association(corpus, base, terms=10, original=0.9, max_df=0.02):
    """Expansion by the words that share a memory with the query's rarer words (in the
    filtered memories), weighed by their idf."""
    def f(c, text):
        qt = corpus.words(text)
        weight = collections.Counter()
        for t in qt:
            if corpus.df[t] / corpus.n > max_df or t not in c["inv"]:
                continue
            rows = np.nonzero(c["inv"][t])[0]
            for i in rows:
                for w, tf in collections.Counter(c["toks"][i]).items():
                    if w not in qt and corpus.df[w] / corpus.n <= 0.1 and w.isalnum():
                        weight[w] += idf(corpus.df[t], corpus.n) * tf / len(c["toks"][i]) \
                            / len(rows)
        for w in weight:
            weight[w] *= idf(corpus.df[w], corpus.n)
        kept = weight.most_common(terms)
        total, qsum = sum(v for _, v in kept) or 1.0, sum(qt.values())
        expanded = collections.Counter({t: original * v / qsum for t, v in qt.items()})
        for w, v in kept:
            expanded[w] += (1 - original) * v / total
        return base(c, text, expanded)
    return f


def diverse(base, delta=0.9, dist=1, depth=50):
    """Greedy: each turn taken damps its session neighbours' scores by delta."""
    def f(c, text):
        s = base(c, text)
        sc, out, taken = s.copy(), np.zeros(len(s)), np.zeros(len(s), bool)
        for r in range(min(depth, len(s))):
            i = int(np.argmax(np.where(taken, -np.inf, sc)))
            if sc[i] <= 0:
                break
            taken[i], out[i] = True, 1e6 - r
            for j in range(max(0, i - dist), min(len(s), i + dist + 1)):
                if not taken[j] and c["sess"][j] == c["sess"][i]:
                    sc[j] *= delta
        out[~taken] = np.where(s[~taken] > 0, s[~taken] / (s.max() + 1), 0)
        return out
    return f


def fused(fs, weights, k=60):
    """Reciprocal rank fusion of the rankings of fs (each's first 200)."""
    def f(c, text):
        total = np.zeros(len(c["len"]))
        for fn, w in zip(fs, weights):
            s = fn(c, text)
            o = np.argsort(-s, kind="stable")
            o = o[s[o] > 0][:200]
            total[o] += w / (k + 1 + np.arange(len(o)))
        return total
    return f


def pooled(base, beta=0.2):
    """Each turn plus beta x the best turn score of its session."""
    def f(c, text):
        s = base(c, text)
        best = np.zeros(len(c["uniq"]))
        np.maximum.at(best, c["sidx"], s)
        return s + beta * best[c["sidx"]] * (s > 0)
    return f


def context_df(corpus, radius=2):
    """df over turns widened by their neighbours within `radius` (same session)."""
    df = collections.Counter()
    for c in corpus.convs.values():
        for w, tf in c["inv"].items():
            held = tf > 0
            wide = held.copy()
            for j in range(1, radius + 1):
                wide |= shift(held.astype(float), j, c["sess"]) > 0
                wide |= shift(held.astype(float), -j, c["sess"]) > 0
            df[w] += int(wide.sum())
    return df


# the second round (recall2): every statistic the collection's or a window's -----------

def flat(x, sess, w):
    """sum over j within w of i (same session), i included."""
    return x + sum(shift(x, -j, sess) + shift(x, j, sess) for j in range(1, w + 1))


def scorer2(corpus, k1=0.9, b=0.4, before=0.5, after=0.3, window=8, common=0.2,
            common_mode="filter", avg_mode="filter", session=0.5, sk1=0.9, sb=0.6,
            sess_mode="session", ws=10, sidf="filter", dates=1.5, date_mode="filter",
            qweight=None, local_c=0.4, date_R=365.0, lw=None, pull=0.0):
    """A function (conversation, question, query words) -> scores of its turns, with the
    statistics taken from the conversation (the filter), the collection or a window."""
    from annodb.recall import date_ranges
    N = corpus.n
    decay = sum(before ** d + after ** d for d in range(1, window + 1))
    def f(c, text, qt=None):
        qt = qt if qt is not None else corpus.words(text)
        n = len(c["len"])
        L = c["len"]
        sess_ids = c["sess"]
        LL = L + lend(L, sess_ids, before, after, window)
        avg = LL.mean() if avg_mode == "filter" else corpus.avg * (1 + decay)
        turn = np.zeros(n)
        if sess_mode == "session":
            nS = len(c["uniq"])
            sessv = np.zeros(nS)
            slen = c["slen"]
            savg = slen.mean()
        else:
            wsum = np.zeros(n)
            wlen = flat(L, sess_ids, ws)
            wavg = wlen.mean() if sidf == "filter" else corpus.avg * (2 * ws + 1)
        for t, q in qt.items():
            tf = c["inv"].get(t)
            if tf is None:
                continue
            if qweight is not None:
                q = q * qweight(t)
            i = idf(corpus.df[t], N)
            held = (tf > 0)
            if common_mode == "filter":
                lendit = held.sum() <= max(common * n, 1)
            elif common_mode == "global":
                lendit = corpus.df[t] <= max(common * N, 1)
            elif common_mode == "none":
                lendit = True
            if common_mode == "local":
                # lent to i only where the share of i's window holding w is <= local_c
                share = flat(held.astype(float), sess_ids, lw or window) / flat(np.ones(n), sess_ids, lw or window)
                lent = lend(tf, sess_ids, before, after, window) * (share <= local_c)
            else:
                lent = lend(tf, sess_ids, before, after, window) if lendit else 0.0
            x = tf + lent
            turn += q * i * x / (x + k1 * (1 - b + b * LL / avg))
            if session:
                if sess_mode == "session":
                    stf = np.bincount(c["sidx"], weights=tf, minlength=nS)
                    si = idf(int((stf > 0).sum()), nS)
                    sessv += q * si * stf / (stf + sk1 * (1 - sb + sb * slen / savg))
                else:
                    wtf = flat(tf, sess_ids, ws)
                    if sidf == "filter":
                        si = idf(int((wtf > 0).sum()), n)
                    elif sidf == "indep":
                        p = corpus.df[t] / N
                        m = 2 * ws + 1
                        si = idf(N * (1 - (1 - p) ** m), N)
                    elif sidf == "turn":
                        si = i
                    wsum += q * si * wtf / (wtf + sk1 * (1 - sb + sb * wlen / wavg))
        dated = np.zeros(n)
        for (lo, hi) in (date_ranges(text) if dates else []):
            hit = (c["time"] >= lo) & (c["time"] < hi)
            dur = (hi - lo) / 86400.0
            if hit.sum():
                if date_mode == "filter":
                    wgt = idf(int(hit.sum()), n)
                elif date_mode == "span":
                    wgt = math.log(1 + date_R / dur)
                else:
                    wgt = 1.0
                dated += wgt * hit
        extra = (sessv[c["sidx"]] if sess_mode == "session" else wsum) if session else 0.0
        out = turn + (turn > 0) * (session * extra + dates * dated)
        if pull:
            out = out + (turn <= 0) * pull * session * extra
        return out
    return f


def diverse2(base, m=3, delta=0.9):
    """a session's turns beyond its best m get delta ** (r - m + 1)."""
    def f(c, text):
        s = base(c, text)
        o = np.argsort(-s, kind="stable")
        seen = collections.Counter()
        out = s.copy()
        for i in o:
            if s[i] <= 0:
                break
            r = seen[c["sess"][i]]
            seen[c["sess"][i]] += 1
            if r >= m:
                out[i] = s[i] * delta ** (r - m + 1)
        return out
    return f


def sprf(corpus, base, sessions=3, terms=10, original=0.9, max_share=0.01):
    """expansion by rare words of the best sessions (by their best turn)."""
    def f(c, text):
        qt = corpus.words(text)
        s = base(c, text, qt)
        best = np.zeros(len(c["uniq"]))
        np.maximum.at(best, c["sidx"], s)
        weight = collections.Counter()
        for g in np.argsort(-best, kind="stable")[:sessions]:
            if best[g] <= 0:
                continue
            idx = np.nonzero(c["sidx"] == g)[0]
            cnt = collections.Counter(w for i in idx for w in c["toks"][i])
            tot = sum(cnt.values())
            for w, tf in cnt.items():
                if w not in qt and corpus.df[w] / corpus.n <= max_share and w.isalnum():
                    weight[w] += tf / tot * best[g] * idf(corpus.df[w], corpus.n)
        kept = weight.most_common(terms)
        total, qsum = sum(v for _, v in kept) or 1.0, sum(qt.values())
        expanded = collections.Counter({t: original * v / qsum for t, v in qt.items()})
        for w, v in kept:
            expanded[w] += (1 - original) * v / total
        return base(c, text, expanded)
    return f



def rows_windowed(corpus):
    """The statistics choices of the bounded recall (annodb/recall.py today) and the
    ideas tried on top of it: (name, scorer)."""
    S = lambda **kw: scorer2(corpus, **kw)  # noqa: E731
    base = dict(avg_mode="const", common_mode="local", sess_mode="window", ws=10,
                sidf="indep", date_mode="span")

    def V(**kw):
        return S(**dict(base, **kw))
    A = V()
    return [
        ("filter statistics, window 8 (the first default)", S()),
        ("avg: the collection's mean length x the window's spread", S(avg_mode="const")),
        ("common rule: the collection's share (df / N > 0.2)", S(common_mode="global")),
        ("common rule: the share of the memory's window (0.4)", S(common_mode="local")),
        ("common rule: the share of the memory's window (0.3)", S(common_mode="local",
                                                                  local_c=0.3)),
        ("dates: a fixed weight 1 (no idf)", S(date_mode="const")),
        ("session -> passage of +-10, idf of its memories in the filter",
         S(sess_mode="window", ws=10)),
        ("session -> passage of +-10, idf of spread-out passages (collection)",
         S(sess_mode="window", ws=10, sidf="indep")),
        ("session -> passage of +-10, the turn's idf", S(sess_mode="window", ws=10,
                                                         sidf="turn")),
        ("A: all of the collection's or a window's (annodb/recall.py)", A),
        ("A, dates 0.75", V(dates=0.75)),
        ("A, dates 0.5", V(dates=0.5)),
        ("A, date_span 90 days, dates 0.75", V(date_R=90.0, dates=0.75)),
        ("A, common 0.5", V(local_c=0.5)),
        ("A, common over +-10", V(lw=10)),
        ("A, reach 6", V(ws=6)),
        ("A, reach 15", V(ws=15)),
        ("A, window 5", V(window=5)),
        ("A, memories with no word pull 0.3 x their passage", V(pull=0.3)),
        ("A, a session's turns past its best 3 x0.9 per rank", diverse2(A, 3, 0.9)),
        ("A, past its best 5 x0.8", diverse2(A, 5, 0.8)),
        ("A, past its best 2 x0.95", diverse2(A, 2, 0.95)),
        ("A, expanded by the best 3 sessions' rare words (10, 0.9)", sprf(corpus, A)),
        ("A, expanded by the best 2 sessions' rare words (5, 0.95)", sprf(corpus, A, 2, 5,
                                                                           0.95)),
    ]


# the third round (recall3): labels as a field, and ideas for depth ----------------------

def band(sess, w, before, after, own=0.0):
    """The matrix M with (M @ x)[i] = sum over j of i's session, 0 < |i - j| <= w, of
    before ** (i - j) x_j (j before i) or after ** (j - i) x_j (after), plus own x_i."""
    n = len(sess)
    m = np.zeros((n, n))
    idx = np.arange(n)
    for j in range(1, w + 1):
        i = idx[j:][sess[j:] == sess[:-j]]
        m[i, i - j] = before ** j
        i = idx[:-j][sess[:-j] == sess[j:]]
        m[i, i + j] = after ** j
    m[idx, idx] = own
    return m


def prepare3(corpus):
    """The neighbour matrices, each turn's speaker (stemmed) and token positions."""
    speakers = {d["docid"]: d["speaker"] for d in turns()}
    for c in corpus.convs.values():
        s = c["sess"]
        c["lendm"], c["flat8"], c["flat10"] = band(s, 8, 0.5, 0.3), band(s, 8, 1, 1, 1.0), \
            band(s, 10, 1, 1, 1.0)
        c["whole"] = (s[:, None] == s[None, :]).astype(float)
        c["spk"] = np.array([corpus.stem(speakers[i].lower()) for i in c["ids"]])
        c["pos"] = [collections.defaultdict(list) for _ in c["toks"]]
        for i, toks in enumerate(c["toks"]):
            for j, w in enumerate(toks):
                c["pos"][i][w].append(j)


def scorer3(corpus, labels=0.0, label_mode="add", passage=0.5, whole=False):
    """recall.py's score (the second round's A, as matrices: the same figures as
    scorer2's A) with the memory's speaker as a label the question may name: "add"
    labels x qtf x idf, "mul" the score x (1 + labels x the words named), "bm25f" the
    label counted `labels` times into the turn's tf."""
    from annodb.recall import date_ranges
    N, avg0 = corpus.n, corpus.avg
    spread = 1 + sum(0.5 ** d + 0.3 ** d for d in range(1, 9))

    def f(c, text, qt=None):
        qt = qt if qt is not None else corpus.words(text)
        n, L = len(c["len"]), c["len"]
        terms = [(t, q) for t, q in qt.items() if t in c["inv"]]
        turn, pas, named = np.zeros(n), np.zeros(n), np.zeros(n)
        if terms:
            T = np.stack([c["inv"][t] for t, _ in terms], 1)
            qv = np.array([q for _, q in terms])
            iv = np.array([idf(corpus.df[t], N) for t, _ in terms])
            M = np.stack([(c["spk"] == t).astype(float) for t, _ in terms], 1)
            share = (c["flat8"] @ (T > 0)) / c["flat8"].sum(1)[:, None]
            X = T + (c["lendm"] @ T) * (share <= 0.4)
            if label_mode == "bm25f":
                X = X + labels * M
            norm = 0.9 * (1 - 0.4 + 0.4 * (L + c["lendm"] @ L) / (avg0 * spread))
            turn = (X / (X + norm[:, None]) * (qv * iv)).sum(1)
            named = (M * (qv * iv)).sum(1)
            mp = c["whole"] if whole else c["flat10"]
            W, wl = mp @ T, mp @ L
            piv = np.array([idf(N * (1 - (1 - corpus.df[t] / N) ** 21), N) for t, _ in terms])
            pas = (W / (W + (0.9 * (1 - 0.6 + 0.6 * wl / (avg0 * 21)))[:, None])
                   * (qv * piv)).sum(1)
        dated = np.zeros(n)
        for lo, hi in date_ranges(text):
            dated += math.log(1 + 365.0 / ((hi - lo) / 86400.0)) * \
                ((c["time"] >= lo) & (c["time"] < hi))
        out = turn + (turn > 0) * (passage * pas + 1.5 * dated)
        if label_mode == "add":
            out = out + (turn > 0) * labels * named
        elif label_mode == "mul":
            out = out * (1 + labels * (named > 0) * (M.sum(1) if terms else 0))
        return out
    return f


def expanded(corpus, base, docs=10, terms=10, original=0.9, passages=False, reach=2):
    """RM3 over the base ranking: from its best memories or from the passages of +-reach
    around them."""
    def f(c, text):
        qt = corpus.words(text)
        s = base(c, text, qt)
        weight = collections.Counter()
        for i in np.argsort(-s, kind="stable")[:docs]:
            if s[i] <= 0:
                continue
            near = range(max(0, i - reach), min(len(s), i + reach + 1)) if passages else [i]
            toks = [w for j in near if c["sess"][j] == c["sess"][i] for w in c["toks"][j]]
            for w, tf in collections.Counter(toks).items():
                if corpus.df[w] / corpus.n <= 0.1 and w.isalnum():
                    weight[w] += tf / len(toks) * s[i]
        kept = weight.most_common(terms)
        total, qsum = sum(v for _, v in kept) or 1.0, sum(qt.values())
        ex = collections.Counter({t: original * v / qsum for t, v in qt.items()})
        for w, v in kept:
            ex[w] += (1 - original) * v / total
        return base(c, text, ex)
    return f


def head_tail(first, second, head=25):
    """first's best `head` memories, then second's ranking of the rest."""
    def f(c, text):
        a, b = first(c, text), second(c, text)
        o = np.argsort(-a, kind="stable")
        o = o[a[o] > 0][:head]
        out = np.where(b > 0, b / (b.max() + 1e-9), 0.0)
        out[o] = 10.0 - 0.01 * np.arange(len(o))
        return out
    return f


def session_floor(base, head=25, sessions=10, per=1):
    """base's best `head`, then the best `per` memories left of each of the best
    `sessions` sessions (by their best memory), then the rest by score."""
    def f(c, text):
        s = base(c, text)
        o = np.argsort(-s, kind="stable")
        o = o[s[o] > 0]
        order, taken = list(o[:head]), set(o[:head].tolist())
        best: dict = {}
        for i in o:
            best.setdefault(c["sess"][i], []).append(i)
        extra = []
        for g in list(best)[:sessions]:
            extra += [i for i in best[g] if i not in taken][:per]
        taken.update(extra)
        order += sorted(extra, key=lambda i: -s[i]) + [i for i in o if i not in taken]
        out = np.zeros(len(s))
        out[np.array(order, dtype=int)] = 1e6 - np.arange(len(order))
        return out
    return f


def proximity(corpus, base, weight=0.5, distance=3):
    """+ weight x the lesser idf of each pair of adjacent question words that a memory
    holds at most `distance` tokens apart."""
    def f(c, text):
        toks = [corpus.stem(x) for x in corpus.tokens(text)]
        s = base(c, text, collections.Counter(toks))
        add = np.zeros(len(s))
        for a, b in {(a, b) for a, b in zip(toks, toks[1:])
                     if a != b and a in c["inv"] and b in c["inv"]}:
            w = weight * min(idf(corpus.df[a], corpus.n), idf(corpus.df[b], corpus.n))
            for i in np.nonzero((c["inv"][a] > 0) & (c["inv"][b] > 0))[0]:
                if any(abs(x - y) <= distance for x in c["pos"][i][a] for y in c["pos"][i][b]):
                    add[i] += w
        return s + (s > 0) * add
    return f


def rows_third(corpus):
    prepare3(corpus)
    S = lambda **kw: scorer3(corpus, **kw)  # noqa: E731
    B = S(labels=0.25)
    return [
        ("A (the second round's default, as matrices)", S()),
        ("A + the speaker as a label, labels x qtf x idf (0.1)", S(labels=0.1)),
        ("B: A + the speaker as a label (0.25)", B),
        ("A + the speaker as a label (0.5)", S(labels=0.5)),
        ("A + the speaker as a label (1.0)", S(labels=1.0)),
        ("A, score x (1 + 0.05 x the labels named)", S(labels=0.05, label_mode="mul")),
        ("A, score x (1 + 0.2 x the labels named)", S(labels=0.2, label_mode="mul")),
        ("A, the label as a BM25F field (weight 1)", S(labels=1.0, label_mode="bm25f")),
        ("A, the label as a BM25F field (weight 2)", S(labels=2.0, label_mode="bm25f")),
        ("B, RM3 (10 memories, 10 words, 0.9)", expanded(corpus, B)),
        ("B, RM3 over passages of +-2 (10, 10, 0.9)", expanded(corpus, B, passages=True)),
        ("B, RM3 over passages (5, 10, 0.9)", expanded(corpus, B, 5, passages=True)),
        ("B, RM3 over passages (10, 10, 0.8)", expanded(corpus, B, original=0.8,
                                                        passages=True)),
        ("B's best 25, then RM3 over passages (10, 10, 0.8)",
         head_tail(B, expanded(corpus, B, original=0.8, passages=True))),
        ("B's best 10, then RM3 over passages (5, 10, 0.9)",
         head_tail(B, expanded(corpus, B, 5, passages=True), 10)),
        ("B's best 25, then the best left of the best 10 sessions", session_floor(B)),
        ("B's best 25, then of the best 20 sessions", session_floor(B, 25, 20)),
        ("B's best 10, then of the best 10 sessions", session_floor(B, 10, 10)),
        ("B's best 25, then two each of the best 5 sessions", session_floor(B, 25, 5, 2)),
        ("B, passage: the whole session", S(labels=0.25, whole=True)),
        ("B + adjacent question words near each other (0.25, 2)",
         proximity(corpus, B, 0.25, 2)),
        ("B + adjacent question words near each other (0.5, 3)", proximity(corpus, B)),
    ]


# the fourth round (recall4): a length prior, and ideas for depth ----------------------

def scorer4(corpus, labels=0.3, passage=0.5, pdecay=None, reach=10, cover=0.0, cover_r=2,
            smooth=0.0, smooth_r=1, missing=0.0, miss_top=10, miss_head=0, lend_r=8,
            nb=0.0, nb_top=10, nb_r=1, nb_head=0, rich=0.0, rich_mode="rare",
            rich_df=0.01, rich_mul=False, rich_norm=True, opener=0.0, b=0.4, pb=0.6,
            dates=1.5, before=0.5, after=0.3, adapt=None, name_text=1.0, name_label=None,
            name_pass=None, delta=0.0, idfp=1.0, rich2=0.0, rich2_mode="distinct",
            localmix=0.0, p2=0.0, reach2=3, burst=0.0):
    """scorer3's score (the third round's default, labels 0.3) with the fourth round's
    variants: the passage decayed by pdecay a step or its reach a share (adapt) of the
    session; scores smoothed over neighbours; coverage (the idf share of the question's
    words held within cover_r) as a factor; words the best miss_top lack weighed
    `missing` (below the best miss_head); neighbours of the best nb_top raised by nb x
    its score; a prior (rich, rich_mode: rare words, distinct words, content words,
    the idf sum, lengths in several forms; added or, rich_mul, a factor); a session's
    first memories raised (opener). The fifth round's (rows_fifth): a question word that
    is a speaker's name weighed name_text in the text and passage (name_pass) and
    name_label as a label; BM25+'s delta; idf ** idfp; a second prior added (rich2,
    rich2_mode: distinct, rare or long words); idf mixed with the conversation's
    (localmix); a second passage of reach2 weighing p2; idf x (turn df / session df) **
    burst."""
    from annodb.recall import date_ranges
    N, avg0 = corpus.n, corpus.avg
    spread = 1 + sum(before ** d + after ** d for d in range(1, lend_r + 1))
    cache = {}
    def mats(c):
        key = id(c)
        if key not in cache:
            s = c["sess"]
            lendm = band(s, lend_r, before, after)
            f8 = band(s, 8, 1, 1, 1.0)
            if pdecay is None:
                pm = band(s, reach, 1, 1, 1.0)
            else:
                pm = band(s, reach, pdecay, pdecay, 1.0)
            if adapt is not None:
                # passage reach: a share of the session's length
                n = len(s)
                pm = np.zeros((n, n))
                idx = np.arange(n)
                for g in np.unique(s):
                    ii = idx[s == g]
                    r = max(2, int(round(adapt * len(ii))))
                    for a in ii:
                        for b_ in ii:
                            if abs(a - b_) <= r:
                                pm[a, b_] = 1.0
            plen = pm.sum(1)
            cm = band(s, cover_r, 1, 1, 1.0)
            sm = band(s, smooth_r, 1, 1, 0.0)
            cache[key] = (lendm, f8, pm, plen, cm, sm)
        return cache[key]
    def f(c, text, qt=None):
        lendm, f8, pm, plen, cm, sm = mats(c)
        qt = qt if qt is not None else corpus.words(text)
        n, L = len(c["len"]), c["len"]
        terms = [(t, q) for t, q in qt.items() if t in c["inv"]]
        turn, pas, named, cov = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
        if terms:
            T = np.stack([c["inv"][t] for t, _ in terms], 1)
            qv = np.array([q for _, q in terms])
            iv = np.array([idf(corpus.df[t], N) for t, _ in terms]) ** idfp
            if burst:
                iv = iv * np.array([(corpus.df[t] / max(corpus.sdf[t], 1)) ** burst
                                    for t, _ in terms])
            if localmix:
                nl = len(c["len"])
                liv = np.array([idf((c["inv"][t] > 0).sum(), nl) for t, _ in terms])
                iv = (1 - localmix) * iv + localmix * liv
            M = np.stack([(c["spk"] == t).astype(float) for t, _ in terms], 1)
            isname = M.any(0)
            wt = np.where(isname, name_text, 1.0)
            share = (f8 @ (T > 0)) / f8.sum(1)[:, None]
            X = T + (lendm @ T) * (share <= 0.4)
            norm = 0.9 * (1 - b + b * (L + lendm @ L) / (avg0 * spread))
            turn = ((X / (X + norm[:, None]) + delta * (X > 0)) * (qv * iv) * wt).sum(1)
            lw = 1.0 if name_label is None else name_label / labels
            named = (M * (qv * iv) * np.where(isname, lw, 1.0)).sum(1)
            W, wl = pm @ T, pm @ L
            piv = np.array([idf(N * (1 - (1 - corpus.df[t] / N) ** (2 * reach + 1)), N)
                            for t, _ in terms])
            pas = (W / (W + (0.9 * (1 - pb + pb * wl / (avg0 * (2 * reach + 1))))[:, None])
                   * (qv * piv) * (wt if name_pass is None else
                                   np.where(isname, name_pass, 1.0))).sum(1)
            if cover:
                held = (cm @ (T > 0)) > 0
                cov = (held * (qv * iv)).sum(1) / (qv * iv).sum()
        dated = np.zeros(n)
        for lo, hi in date_ranges(text):
            dated += math.log(1 + 365.0 / ((hi - lo) / 86400.0)) * \
                ((c["time"] >= lo) & (c["time"] < hi))
        if p2 and terms:
            pm2 = band(c["sess"], reach2, 1, 1, 1.0)
            W2, wl2 = pm2 @ T, pm2 @ L
            piv2 = np.array([idf(N * (1 - (1 - corpus.df[t] / N) ** (2 * reach2 + 1)), N)
                             for t, _ in terms])
            norm2 = 0.9 * (1 - pb + pb * wl2 / (avg0 * (2 * reach2 + 1)))
            pas = pas + p2 / passage * (W2 / (W2 + norm2[:, None]) * (qv * piv2)).sum(1)
        out = turn + (turn > 0) * (passage * pas + dates * dated + labels * named)
        if cover:
            out = out * (1 + cover * cov)
        if rich:
            key = ("rich", id(c), rich_mode, rich_df)
            if key not in cache:
                if rich_mode == "rare":
                    v = np.log1p(np.array([len({w for w in t if corpus.df[w] <= rich_df * N})
                                           for t in c["toks"]], float))
                elif rich_mode == "content":
                    from annodb.feedback import STOP_WORDS
                    stopst = {corpus.stem(w) for w in STOP_WORDS}
                    v = np.log1p(np.array([len({w for w in t if w not in stopst})
                                           for t in c["toks"]], float))
                elif rich_mode == "distinct":
                    v = np.log1p(np.array([len(set(t)) for t in c["toks"]], float))
                elif rich_mode == "len":
                    v = np.log1p(L)
                elif rich_mode == "lenc":
                    v = np.log1p(L) / np.log1p(avg0)
                elif rich_mode == "sat":
                    v = L / (L + avg0)
                elif rich_mode == "sat2":
                    v = L / (L + 2 * avg0)
                elif rich_mode == "lencap":
                    v = np.minimum(np.log1p(L) / np.log1p(avg0), 1.5)
                elif rich_mode == "lenr":
                    v = np.log(L / avg0)
                elif rich_mode == "idfsum":
                    v = np.log1p(np.array([sum(idf(corpus.df[w], N) for w in set(t))
                                           for t in c["toks"]], float))
                cache[key] = v / v.mean() if rich_norm else v
            if rich_mul:
                out = out * np.maximum(1 + rich * cache[key], 0.1)
            else:
                out = out + (out > 0) * rich * cache[key]
        if rich2:
            key2 = ("rich2", id(c), rich2_mode)
            if key2 not in cache:
                if rich2_mode == "distinct":
                    v = np.log1p(np.array([len(set(t)) for t in c["toks"]], float))
                elif rich2_mode == "rare":
                    v = np.log1p(np.array([len({w for w in t if corpus.df[w] <= 0.01 * N})
                                           for t in c["toks"]], float))
                elif rich2_mode == "long":
                    v = np.log1p(np.array([len({w for w in t if len(w) >= 6})
                                           for t in c["toks"]], float))
                cache[key2] = v / v.mean()
            out = out + (out > 0) * rich2 * cache[key2]
        if opener:
            sess = c["sess"]
            first = np.r_[True, sess[1:] != sess[:-1]]
            pos = np.arange(n) - np.maximum.accumulate(np.where(first, np.arange(n), 0))
            out = out + (out > 0) * opener * (pos < 3)
        if smooth:
            out = out + (out > 0) * smooth * (sm @ out)
        if missing and terms:
            o = np.argsort(-out, kind="stable")[:miss_top]
            got = (T[o] > 0).any(0)
            add = ((T > 0) * (~got) * (qv * iv)).sum(1)
            new = out + (out > 0) * missing * add
            if miss_head:
                oo = np.argsort(-out, kind="stable")[:miss_head]
                new[oo] = 1e6 - np.arange(len(oo))
            out = new
        if nb:
            o = np.argsort(-out, kind="stable")
            top = o[:nb_top]
            top = top[out[top] > 0]
            bonus = np.zeros(n)
            sess = c["sess"]
            for j in top:
                for d in range(-nb_r, nb_r + 1):
                    i = j + d
                    if d and 0 <= i < n and sess[i] == sess[j]:
                        bonus[i] = max(bonus[i], out[j])
            new = out + nb * bonus
            if nb_head:
                oo = o[:nb_head]
                new[oo] = 1e6 - np.arange(len(oo))
            out = new
        return out
    return f


def session_normed(base, weight):
    """+ weight x the best score x (the memory's score / its session's best)."""
    def f(c, text):
        s = base(c, text)
        best = np.zeros(len(c["uniq"]))
        np.maximum.at(best, c["sidx"], s)
        return s + weight * s.max() * s / np.maximum(best[c["sidx"]], 1e-9) * (s > 0)
    return f


def rows_fourth(corpus):
    """The fourth round's variants, on top of the third round's default (the speaker a
    label at 0.3): (name, scorer). Only the tuning half was looked at while choosing."""
    from benchmarks.memory_prototype import head_tail
    prepare3(corpus)
    S = lambda **kw: scorer4(corpus, **kw)  # noqa: E731
    add = dict(rich_mode="sat", rich_norm=False)           # + w x L / (L + avglen)
    mul = dict(add, rich_mul=True)                         # x (1 + w x L / (L + avglen))
    L3 = dict(mul, rich=0.3)
    base = S(**L3)
    return [
        ("the third round's default (labels 0.3)", S()),
        ("passage decayed 0.9 a step", S(pdecay=0.9)),
        ("passage decayed 0.8 a step", S(pdecay=0.8)),
        ("scores smoothed: + 0.1 x the neighbours' (1 away)", S(smooth=0.1)),
        ("scores smoothed: + 0.2 x the neighbours' (2 away)", S(smooth=0.2, smooth_r=2)),
        ("coverage: x (1 + 0.2 x the idf share of question words held within 2)",
         S(cover=0.2)),
        ("words the best 10 lack: + 0.3 x their idf", S(missing=0.3)),
        ("words the best 10 lack: + 0.3 x their idf, below the best 25",
         S(missing=0.3, miss_head=25)),
        ("neighbours of the best 10: + 0.1 x its score", S(nb=0.1)),
        ("neighbours of the best 10: + 0.3 x, below the best 25", S(nb=0.3, nb_head=25)),
        ("neighbours of the best 10: + 0.5 x (2 away), below the best 25",
         S(nb=0.5, nb_r=2, nb_head=25)),
        ("neighbours of the best 25: + 0.3 x, below the best 25",
         S(nb=0.3, nb_top=25, nb_head=25)),
        ("prior: + 1.0 x ln(1 + rare words) / mean (df <= 1%; not storable)",
         S(rich=1.0)),
        ("prior: + 1.0 x the same, df <= 0.5%", S(rich=1.0, rich_df=0.005)),
        ("prior: + 1.0 x the same, df <= 2%", S(rich=1.0, rich_df=0.02)),
        ("prior: + 2.0 x ln(1 + distinct words) / mean", S(rich=2.0, rich_mode="distinct")),
        ("prior: + 2.0 x ln(1 + words not stop words) / mean",
         S(rich=2.0, rich_mode="content")),
        ("prior: + 1.0 x ln(1 + idf sum) / mean", S(rich=1.0, rich_mode="idfsum")),
        ("prior: + 2.0 x ln(1 + L) / ln(1 + avglen)", S(rich=2.0, rich_mode="lenc",
                                                       rich_norm=False)),
        ("prior: + 1.0 x L / (L + avglen)", S(rich=1.0, **add)),
        ("prior: + 2.0 x L / (L + avglen)", S(rich=2.0, **add)),
        ("prior: + 3.0 x L / (L + avglen)", S(rich=3.0, **add)),
        ("prior: x (1 + 0.05 ln(L / avglen))", S(rich=0.05, rich_mode="lenr",
                                                  rich_norm=False, rich_mul=True)),
        ("prior: x (1 + 0.1 L / (L + avglen))", S(rich=0.1, **mul)),
        ("prior: x (1 + 0.2 L / (L + avglen))", S(rich=0.2, **mul)),
        ("**prior: x (1 + 0.3 L / (L + avglen)) (recall.py)**", base),
        ("prior: x (1 + 0.5 L / (L + avglen))", S(rich=0.5, **mul)),
        ("prior: x (1 + 0.8 L / (L + avglen))", S(rich=0.8, **mul)),
        ("b 0.3 (instead of a prior)", S(b=0.3)),
        ("b 0.2", S(b=0.2)),
        ("a session's first 3 memories + 0.5 (knows chat logs: not adopted)",
         S(opener=0.5)),
        ("prior 0.3, passage decayed 0.9", S(pdecay=0.9, **L3)),
        ("prior 0.3, passage reach a fifth of the session", S(adapt=0.2, **L3)),
        ("prior 0.3, passage reach a third of the session", S(adapt=0.33, **L3)),
        ("prior 0.3, passage reach half the session", S(adapt=0.5, **L3)),
        ("prior 0.3, context window 4", S(lend_r=4, **L3)),
        ("prior 0.3, coverage 0.2", S(cover=0.2, **L3)),
        ("prior 0.3, words the best 10 lack 0.3, below the best 25",
         S(missing=0.3, miss_head=25, **L3)),
        ("prior 0.3, neighbours of the best 10 x0.3, below the best 25",
         S(nb=0.3, nb_head=25, **L3)),
        ("prior 0.3, labels 0.5", S(labels=0.5, **L3)),
        ("prior 0.3, below the best 25 labels 0.6", head_tail(base, S(labels=0.6, **L3))),
        ("prior 0.3, below the best 10 labels 1.0", head_tail(base, S(labels=1.0, **L3),
                                                              10)),
        ("prior 0.3, below the best 25 passage 2.0", head_tail(base, S(passage=2.0, **L3))),
        ("prior 0.3, below the best 25 the rare-word prior 2.0",
         head_tail(base, S(rich=2.0, rich_mode="rare"))),
        ("prior 0.3, + 0.05 x the best x score / its session's best",
         session_normed(base, 0.05)),
        ("prior 0.3, + 0.1 x the best x score / its session's best",
         session_normed(base, 0.1)),
        ("prior 0.3, + 0.2 x the best x score / its session's best",
         session_normed(base, 0.2)),
    ]


def rows_fifth(corpus):
    """The fifth round's variants, on top of the fourth round's default (the length prior
    x (1 + 0.3 L / (L + avglen))): (name, scorer). The tuning half only."""
    prepare3(corpus)
    L3 = dict(rich_mode="sat", rich_norm=False, rich_mul=True, rich=0.3)
    S = lambda **kw: scorer4(corpus, **{**L3, **kw})  # noqa: E731
    return [
        ("**the default (length prior 0.3)**", S()),
        ("a speaker's name in the question weighs 0.5 in the text", S(name_text=0.5)),
        ("... 0 in the text (a label only)", S(name_text=0.0)),
        ("... 0.5 in the text, 0.6 as a label", S(name_text=0.5, name_label=0.6)),
        ("BM25+: + 0.1 x idf for a word held", S(delta=0.1)),
        ("BM25+: + 0.3 x idf", S(delta=0.3)),
        ("idf ** 1.3", S(idfp=1.3)),
        ("idf ** 0.8", S(idfp=0.8)),
        ("+ 0.5 x ln(1 + distinct words) / mean", S(rich2=0.5)),
        ("+ 1.0 x ln(1 + distinct words) / mean", S(rich2=1.0)),
        ("+ 0.5 x ln(1 + rare words) / mean (df <= 1%; not storable)",
         S(rich2=0.5, rich2_mode="rare")),
        ("+ 1.0 x the same", S(rich2=1.0, rich2_mode="rare")),
        ("+ 0.5 x ln(1 + words of 6+ letters) / mean", S(rich2=0.5, rich2_mode="long")),
        ("+ 1.0 x the same", S(rich2=1.0, rich2_mode="long")),
        ("b 0.7", S(b=0.7)),
        ("b 0.55", S(b=0.55)),
        ("idf 0.3 from the conversation, 0.7 the collection's", S(localmix=0.3)),
        ("idf half and half", S(localmix=0.5)),
        ("a second passage: reach 3, weight 0.25", S(p2=0.25)),
        ("the same, the first passage 0.35", S(p2=0.25, passage=0.35)),
        ("a second passage: reach 25, weight 0.3", S(p2=0.3, reach2=25)),
        ("a second passage: reach 40, weight 0.2", S(p2=0.2, reach2=40)),
        ("idf x (df / session df) ** 0.2 (bursty words up)", S(burst=0.2)),
        ("idf x (df / session df) ** 0.5", S(burst=0.5)),
        ("idf x (df / session df) ** -0.2 (bursty words down)", S(burst=-0.2)),
    ]


# the sixth round: a thesaurus (WordNet 3.0 as Debian's wordnet-base installs it) -------

WORDNET = os.environ.get("WORDNET_DIR", "/usr/share/wordnet")
WN_POS = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
WN_RULES = {"n": [("s", ""), ("ses", "s"), ("xes", "x"), ("zes", "z"), ("ches", "ch"),
                  ("shes", "sh"), ("men", "man"), ("ies", "y")],
            "v": [("s", ""), ("ies", "y"), ("es", "e"), ("es", ""), ("ed", "e"), ("ed", ""),
                  ("ing", "e"), ("ing", "")],
            "a": [("er", ""), ("est", ""), ("er", "e"), ("est", "e")], "r": []}


class WordNet:
    """WordNet's index, data and exception files read as they are: a word's senses in
    order of frequency (index.POS), each sense's lemmas and pointers (data.POS), and the
    base form by the exception lists and WordNet's own suffix rules (its morphy)."""

    def __init__(self, folder=WORDNET):
        self.index, self.data, self.exc = {}, {}, {}
        for p, name in WN_POS.items():
            for line in open(os.path.join(folder, f"index.{name}"), encoding="latin-1"):
                if not line.startswith(" "):
                    f = line.split()
                    self.index[(f[0], p)] = f[4 + int(f[3]) + 2:]
            for line in open(os.path.join(folder, f"data.{name}"), encoding="latin-1"):
                if line.startswith(" "):
                    continue
                f = line.split("|")[0].split()
                n = int(f[3], 16)
                k = 5 + 2 * n
                ptrs = [(f[k + 4 * i], f[k + 1 + 4 * i],
                         "a" if f[k + 2 + 4 * i] == "s" else f[k + 2 + 4 * i])
                        for i in range(int(f[k - 1]))]
                self.data[(f[0], p)] = ([f[4 + 2 * i].lower() for i in range(n)], ptrs)
            for line in open(os.path.join(folder, f"{name}.exc"), encoding="latin-1"):
                f = line.split()
                self.exc.setdefault((f[0], p), f[1])

    def base(self, w, p):
        if (w, p) in self.exc:
            return self.exc[(w, p)]
        if (w, p) in self.index:
            return w
        for a, b in WN_RULES[p]:
            if w.endswith(a) and (w[:len(w) - len(a)] + b, p) in self.index:
                return w[:len(w) - len(a)] + b
        return None

    def related(self, w, senses=1, rels=("syn",), pos="nv"):
        """The one-word lemmas of w's first `senses` senses in each part of speech:
        their synonyms (syn), direct hyponyms (hypo), hypernyms (hyper), derivationally
        related forms (deriv)."""
        kinds = {"~": "hypo", "~i": "hypo", "@": "hyper", "@i": "hyper", "+": "deriv"}
        out = set()
        for p in pos:
            lemma = self.base(w, p)
            for off in self.index.get((lemma, p), [])[:senses]:
                words, ptrs = self.data[(off, p)]
                if "syn" in rels:
                    out.update(words)
                for sym, o, pp in ptrs:
                    if kinds.get(sym) in rels:
                        out.update(self.data[(o, pp)][0])
        return {x for x in out if x.isalpha() and x != w}


def thesaurus(corpus, base, wordnet, weight, **kw):
    """base's score for the question expanded by WordNet: each word of three letters or
    more that is not a stop word nor a speaker's name adds its related words at `weight`
    of a question word (a word the question holds keeps its own weight)."""
    from annodb.feedback import STOP_WORDS
    names = {s for c in corpus.convs.values() for s in c["spk"].tolist()}
    def f(c, text):
        ws = corpus.tokens(text)
        qt = collections.Counter(corpus.stem(w) for w in ws)
        for w in ws:
            if w in STOP_WORDS or len(w) < 3 or corpus.stem(w) in names:
                continue
            for r in wordnet.related(w, **kw):
                if corpus.stem(r) not in qt or qt[corpus.stem(r)] < 1:
                    qt[corpus.stem(r)] += weight
        return base(c, text, qt)
    return f


def rows_sixth(corpus):
    """The sixth round: the fifth's default with the question expanded by WordNet."""
    prepare3(corpus)
    base = scorer4(corpus, rich_mode="sat", rich_norm=False, rich_mul=True, rich=0.3)
    wn = WordNet()
    T = lambda w, **kw: thesaurus(corpus, base, wn, w, **kw)  # noqa: E731
    return [
        ("**the default (length prior 0.3)**", base),
        ("synonyms of the first sense (nouns), 0.1", T(0.1, pos="n")),
        ("the same, nouns and verbs, 0.2", T(0.2)),
        ("the same, 0.4", T(0.4)),
        ("synonyms and hyponyms of the first two senses (nouns), 0.05",
         T(0.05, senses=2, rels=("syn", "hypo"), pos="n")),
        ("the same, 0.2", T(0.2, senses=2, rels=("syn", "hypo"), pos="n")),
        ("synonyms and hyponyms of the first sense (nouns, verbs), 0.2",
         T(0.2, rels=("syn", "hypo"))),
        ("synonyms, hyponyms and hypernyms of three senses, 0.1",
         T(0.1, senses=3, rels=("syn", "hypo", "hyper"))),
        ("derivationally related forms (nouns, verbs, adjectives), 0.2",
         T(0.2, rels=("deriv",), pos="nva")),
        ("the same, three senses, nouns and verbs, 0.4", T(0.4, senses=3, rels=("deriv",))),
    ]


# the seventh round: an information prior from a background frequency list -----------

MSMARCO = os.path.join(os.path.dirname(DATA), "rag24", "msmarco-sample.jsonl")


def background_ranked(source):
    """Words of general English, most frequent first: "wordfreq" (the wordfreq package's
    English list, if installed) or "msmarco" (the MS MARCO sample's words by document
    frequency)."""
    if source == "wordfreq":
        import wordfreq
        return wordfreq.top_n_list("en", 20000)
    import json
    from annodb.tokenizer import tokens
    df = collections.Counter()
    with open(MSMARCO, encoding="utf-8") as f:
        for line in f:
            df.update(set(tokens(json.loads(line)["text"])))
    return [w for w, _ in sorted(df.items(), key=lambda x: (-x[1], x[0]))]


def bg_counts(corpus, ranked, top, distinct=True, stemmed=True):
    """Per conversation, each memory's count of tokens not among the `top` most frequent
    background words (stems compared, as the prototype conflates every word)."""
    from annodb.tokenizer import tokens
    common = {corpus.stem(w) for w in ranked[:top]} if stemmed else set(ranked[:top])
    out = {}
    rows = turns()
    raw = collections.defaultdict(list)
    for d in rows:
        raw[d["conv"]].append(tokens(d["text"]))
    for name, c in corpus.convs.items():
        if stemmed:
            xs = [(set(t) if distinct else t) for t in c["toks"]]
            out[name] = np.array([sum(1 for w in x if w not in common) for x in xs], float)
        else:
            xs = [(set(t) if distinct else t) for t in raw[name]]
            out[name] = np.array([sum(1 for w in x if w not in common) for x in xs], float)
    return out


def bg_prior(corpus, base, counts, weight, form="log", norm="mean", mul=False):
    """base's score with a prior on the memory's count x of background-rare words:
    form "log" ln(1 + x), "sat" x / (x + m); norm "mean" divides by (or uses as m) the
    collection's mean of the form's input over all ten conversations (a statistic a
    database can keep, as it keeps avglen), a number: that constant. Added (weight x v,
    to a memory that scores) or, mul, a factor (1 + weight x v)."""
    allx = np.concatenate(list(counts.values()))
    name_of = {id(c): name for name, c in corpus.convs.items()}
    if form == "log":
        m = np.log1p(allx).mean() if norm == "mean" else norm
        vals = {k: np.log1p(v) / m for k, v in counts.items()}
    else:
        m = allx.mean() if norm == "mean" else norm
        vals = {k: v / (v + m) for k, v in counts.items()}
    def f(c, text):
        s = base(c, text)
        v = vals[name_of[id(c)]]
        return s * (1 + weight * v) if mul else s + (s > 0) * weight * v
    return f


def memory_events(corpus, mode="shortest", absolute=False, vague=False):
    """Per conversation, each memory's dates its own text names relative to its time
    (recall.event_ranges): "shortest" the one Memory stores (recall.memory_event), "all"
    every one; absolute: also the dates the text names outright (recall.date_ranges);
    vague: also "the other day" (the week before), "a few days ago" (2 to 6 days
    before), "a few weeks / months ago" (2 to 5 units before)."""
    import re
    from annodb.recall import date_ranges, event_ranges
    text = {d["docid"]: d["text"] for d in turns()}
    out = {}
    for name, c in corpus.convs.items():
        evs = []
        for i, t in zip(c["ids"], c["time"]):
            rs = event_ranges(text[i], t)
            if absolute:
                rs += date_ranges(text[i])
            if vague:
                day = math.floor(t / 86400) * 86400.0
                if re.search(r"\bthe other day\b", text[i], re.I):
                    rs.append((day - 7 * 86400, day))
                if re.search(r"\ba few days ago\b", text[i], re.I):
                    rs.append((day - 6 * 86400, day - 86400))
                for unit, d in (("week", 7), ("month", 30)):
                    if re.search(rf"\b(?:a few|several) {unit}s ago\b", text[i], re.I):
                        rs.append((day - 5 * d * 86400, day - 2 * d * 86400 + 86400))
            if mode == "shortest" and rs:
                rs = [min(rs, key=lambda r: r[1] - r[0])]
            evs.append(rs)
        out[name] = evs
    return out


def with_events(corpus, base, events, weight=1.5, span="max"):
    """base's score with recall.py's date term extended to the dates a memory's text
    names (memory_events): a query date [lo, hi) overlapping one of them adds weight x
    ln(1 + 365 days / the longer of the two) ("query": the query date's length), where
    the memory's time is not already in it (a date counts once per memory)."""
    from annodb.recall import date_ranges
    name_of = {id(c): name for name, c in corpus.convs.items()}
    def f(c, text):
        s = base(c, text)
        qd = date_ranges(text)
        if not qd:
            return s
        E = events[name_of[id(c)]]
        L = c["len"]
        prior = 1 + 0.3 * L / (L + corpus.avg)
        add = np.zeros(len(s))
        for lo, hi in qd:
            for i, rs in enumerate(E):
                if lo <= c["time"][i] < hi:
                    continue
                best = 0.0
                for a, b in rs:
                    if a < hi and lo < b:
                        longest = max(hi - lo, b - a) if span == "max" else hi - lo
                        best = max(best, math.log1p(365 * 86400 / longest))
                add[i] += best
        return s + (s > 0) * weight * add * prior
    return f


def memo(fn):
    """fn with its scores kept per (conversation, question): the variants share a base."""
    kept = {}
    def f(c, text):
        key = (id(c), text)
        if key not in kept:
            kept[key] = fn(c, text)
        return kept[key]
    return f


def rows_seventh(corpus):
    """The seventh round's variants, on top of the fourth round's default (the length
    prior x (1 + 0.3 L / (L + avglen))): a prior on a memory's words not among the N most
    frequent of general English. The tuning half only."""
    prepare3(corpus)
    L3 = dict(rich_mode="sat", rich_norm=False, rich_mul=True, rich=0.3)
    base = memo(scorer4(corpus, **L3))
    nolen = memo(scorer4(corpus))
    out = [("**the default (length prior 0.3)**", base)]
    shortest = memory_events(corpus)
    out += [
        ("dates a memory names relative to its time (the shortest; dates 1.5)",
         with_events(corpus, base, shortest)),
        ("the same, weight 0.75", with_events(corpus, base, shortest, 0.75)),
        ("the same, weight 3.0", with_events(corpus, base, shortest, 3.0)),
        ("the same, weighed by the query date's length alone",
         with_events(corpus, base, shortest, span="query")),
        ("every relative date of a memory, not only the shortest",
         with_events(corpus, base, memory_events(corpus, "all"))),
        ("+ the dates it names outright", with_events(corpus, base, memory_events(
            corpus, "all", absolute=True))),
        ("+ vague ones (the other day, a few days / weeks / months ago)",
         with_events(corpus, base, memory_events(corpus, "all", vague=True))),
    ]
    sources = [os.environ.get("BG", "wordfreq")]
    for src in sources:
        try:
            ranked = background_ranked(src)
        except ImportError:
            print(f"(no background prior rows: {src} is not installed)", file=sys.stderr)
            continue
        for top in (1000, 2000, 5000, 10000):
            counts = bg_counts(corpus, ranked, top)
            mean = np.concatenate(list(counts.values())).mean()
            tag = f"{src} top {top} (mean {mean:.2f})"
            for w in (0.5, 1.0):
                out.append((f"{tag}: + {w} x ln(1 + x) / mean", bg_prior(corpus, base, counts, w)))
            for w in (0.1, 0.2, 0.3):
                out.append((f"{tag}: x (1 + {w} x ln(1 + x) / mean)",
                            bg_prior(corpus, base, counts, w, mul=True)))
            for w in (0.2, 0.3):
                out.append((f"{tag}: x (1 + {w} x x / (x + mean))",
                            bg_prior(corpus, base, counts, w, form="sat", mul=True)))
            out.append((f"{tag}: + 1.0 x x / (x + mean)",
                        bg_prior(corpus, base, counts, 1.0, form="sat")))
            out.append((f"{tag}: instead of the length prior, x (1 + 0.3 x / (x + mean))",
                        bg_prior(corpus, nolen, counts, 0.3, form="sat", mul=True)))
    return out


def run(corpus, fn, qs):
    out = {}
    for q in qs:
        c = corpus.convs[q["conv"]]
        s = fn(c, q["question"])
        o = np.argsort(-s, kind="stable")
        out[q["qid"]] = [c["ids"][i] for i in o[s[o] > 0][:50]]
    return out


def main() -> int:
    if not os.path.isfile(os.path.join(DATA, "corpus.jsonl")):
        print(f"needs LoCoMo in {DATA} (not found); set ANNODB_SHARED", file=sys.stderr)
        return 1
    corpus, qs = Corpus(), questions()
    if "--sixth" in sys.argv and not os.path.isfile(os.path.join(WORDNET, "index.noun")):
        print(f"needs WordNet 3.0 in {WORDNET} (not found: apt install wordnet-base, or set "
              "WORDNET_DIR)", file=sys.stderr)
        return 1
    rounds = {"--fourth": rows_fourth, "--fifth": rows_fifth, "--sixth": rows_sixth,
              "--seventh": rows_seventh}
    chosen = [r for a, r in rounds.items() if a in sys.argv]
    if chosen:
        held = "--held-out" in sys.argv     # (the fourth round chose on the tuning half)
        tune = [q for q in qs if q["conv"] in TUNE]
        print("| prototype variant | tune: @5 / @10 / @25 / @50 | sum |"
              + (" held out | all ten |" if held else ""))
        print("|---|---|---|" + ("---|---|" if held else ""))
        for name, fn in chosen[0](corpus):
            got = run(corpus, fn, qs if held else tune)
            t = {k: recall_at(got, tune, k) for k in (5, 10, 25, 50)}
            cells = [" / ".join(f"{t[k]:.1f}" for k in t), f"{sum(t.values()):.1f}"]
            if held:
                figures = halves(got, qs)
                cells += [" / ".join(f"{figures[h][k]:.1f}" for k in (5, 10, 25, 50))
                          for h in ("held out", "all")]
            print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
        return 0
    if "--windowed" in sys.argv or "--third" in sys.argv:
        print("| prototype variant | tune: @5 / @10 / @25 / @50 | held out | all ten |")
        print("|---|---|---|---|")
        for name, fn in (rows_third if "--third" in sys.argv else rows_windowed)(corpus):
            figures = halves(run(corpus, fn, qs), qs)
            cells = [" / ".join(f"{figures[h][k]:.1f}" for k in (5, 10, 25, 50))
                     for h in ("tune", "held out", "all")]
            print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
        return 0
    S = lambda **kw: scorer(corpus, **kw)  # noqa: E731
    plain = S(b=0.4, before=0, after=0, session=0, dates=0, common=None)
    best = S()
    rows = [
        ("BM25 k1 0.9 b 0.4 (plain)", plain),
        ("BM25, Lucene stop words dropped", S(b=0.4, before=0, after=0, session=0, dates=0,
                                             common=None, stop=True)),
        ("two turns either side, undecayed, one field", S(b=0.4, before=1, after=1,
                                                         window=2, session=0, dates=0,
                                                         common=None)),
        ("context decayed 0.5 / 0.5, b 0.7", S(after=0.5, session=0, dates=0, common=None)),
        ("context 0.5 / 0.3 (earlier lends more)", S(session=0, dates=0, common=None)),
        ("+ common words not lent (common 0.2)", S(session=0, dates=0)),
        ("+ session score (local statistics)", S(dates=0)),
        ("+ dates: recall.py's formula (with b 0.7; annodb settled on 0.4)", best),
        ("session score with the collection's session statistics", S(session_idf="global",
                                                                     sb=0.8)),
        ("session score with the turn's idf", S(session_idf="turn", sb=0.8)),
        ("idf from the conversation (the filtered memories)", S(doc_idf="local")),
        ("idf from turns widened by 2 neighbours", S(doc_idf="context",
                                                     vdf=context_df(corpus, 2))),
        ("turn BM25 + 0.8 x context BM25 (two sums, not BM25F)", S(context="sum")),
        ("own turn weighted 2", S(own=2.0)),
        ("query stop words dropped", S(stop=True)),
        ("RM3 over the context ranking (10 docs, 20 terms, 0.9)", rm3(corpus, best)),
        ("RM3 (5 docs, 10 terms, 0.9)", rm3(corpus, best, 5, 10, 0.9)),
        ("RM3 (10 docs, 10 terms, 0.5; Anserini's)", rm3(corpus, best, 10, 10, 0.5)),
        ("association expansion (10 terms, 0.9)", association(corpus, best)),
        ("association expansion (10 terms, 0.95)", association(corpus, best, 10, 0.95)),
        ("diversity: a taken turn damps neighbours x0.9", diverse(best, 0.9, 1)),
        ("diversity: x0.8, two either side", diverse(best, 0.8, 2)),
        ("RRF with plain BM25 (weights 1, 1)", fused([best, plain], [1, 1])),
        ("RRF with plain BM25 (weights 1, 0.3; k 20)", fused([best, plain], [1, 0.3], 20)),
        ("+ 0.2 x the session's best turn", pooled(best, 0.2)),
    ]
    print("| prototype variant | tune: @5 / @10 / @25 / @50 | held out | all ten |")
    print("|---|---|---|---|")
    for name, fn in rows:
        figures = halves(run(corpus, fn, qs), qs)
        cells = [" / ".join(f"{figures[h][k]:.1f}" for k in (5, 10, 25, 50))
                 for h in ("tune", "held out", "all")]
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    assert TUNE
    sys.exit(main())
