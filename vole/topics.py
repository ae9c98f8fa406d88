"""Topics files: one `qid<TAB>text` per line (as TREC RAG's topics); blank lines and lines
starting with `#` are skipped."""

from __future__ import annotations

import re

import msgspec

from .errors import InputError

# A qid becomes part of the feature `judgment:<qid>`, so it must read as one raw query term.
_QID = re.compile(r'[^\s()"]+')


class Topic(msgspec.Struct, frozen=True):
    qid: str
    text: str


def check_qid(qid: str) -> str | None:
    """Why `qid` cannot name a topic, or None."""
    if not _QID.fullmatch(qid):
        return (f"qid {qid!r} must be one word without spaces, parentheses or double "
                "quotes (it becomes part of the feature judgment:<qid>)")
    return None


def read_topics(path: str) -> list[Topic]:
    topics: list[Topic] = []
    seen: set[str] = set()
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                line = line.rstrip("\r\n")
                if not line.strip() or line.startswith("#"):
                    continue
                qid, tab, text = line.partition("\t")
                qid, text = qid.strip(), text.strip()
                if not tab or not text:
                    raise InputError(f"{path}:{number}: expected qid<TAB>text")
                problem = check_qid(qid)
                if problem:
                    raise InputError(f"{path}:{number}: {problem}")
                if qid in seen:
                    raise InputError(f"{path}:{number}: topic {qid} appears twice")
                seen.add(qid)
                topics.append(Topic(qid, text))
    except OSError as err:
        raise InputError(f"{path}: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: not UTF-8 text ({err.reason})") from None
    if not topics:
        raise InputError(f"{path}: no topics (expected qid<TAB>text lines)")
    return topics
