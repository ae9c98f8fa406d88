"""Txn's base part: the state every part of a transaction shares (Txn.__init__ sets it),
the meta sub-database, and the feature names (features, names)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .environment import Environment
from .layout import (_append_all, _keys8, _keys_of_names, _meta_decoder, _meta_encoder,
                     _utf8_all, from_u64, name_key, name_keys, u64, utf8)


class Features:
    """Meta and feature names; the base of Txn's other parts (counts.py, postings.py,
    documents.py), which use the state declared here."""

    env: Environment
    write: bool        # a write transaction
    dbs: dict          # the environment's sub-databases, by name
    pid: int           # the process that opened the environment
    txn: Any           # the lmdb.Transaction
    id: int            # its id: the committed state a read sees
    block_bytes: int   # block_limits of the environment's page size
    block_count: int

    # meta
    def meta(self, key: str, default=None):
        raw = self.txn.get(key.encode(), db=self.dbs["meta"])
        return default if raw is None else _meta_decoder.decode(raw)

    def set_meta(self, key: str, value) -> None:
        self.txn.put(key.encode(), _meta_encoder.encode(value), db=self.dbs["meta"])

    # features
    def feature_id(self, name: str) -> int | None:
        raw = self.txn.get(name_key(name), db=self.dbs["features"])
        return None if raw is None else from_u64(raw)

    def feature_ids(self, names: list[str]) -> list[int | None]:
        """feature_id of each name, in one C-level getmulti."""
        keys = name_keys(names)
        with self.txn.cursor(db=self.dbs["features"]) as cur:
            found = {bytes(k): from_u64(v) for k, v in cur.getmulti(keys)}
        if not found:   # (an ingest's new words: none stored)
            return [None] * len(keys)
        return list(map(found.get, keys))

    def add_features(self, names: list[str], ids: np.ndarray) -> None:
        """Intern new features: names[i] gets id ids[i], ids above every stored one."""
        raws = _utf8_all(names, "feature name")
        order = np.argsort(ids, kind="stable")   # (a repeated id: _append_all refuses it)
        keys = _keys8(ids)
        with self.txn.cursor(db=self.dbs["features"]) as cur:
            cur.putmulti(sorted(zip(_keys_of_names(raws), keys)))
        with self.txn.cursor(db=self.dbs["names"]) as cur:
            _append_all(cur, [(keys[i], raws[i]) for i in order.tolist()])

    def feature_name(self, fid: int) -> str | None:
        raw = self.txn.get(u64(fid), db=self.dbs["names"])
        return None if raw is None else bytes(raw).decode()

    def features(self):
        """(name, id) of every feature, in name order."""
        with self.txn.cursor(db=self.dbs["features"]) as cur:
            for k, v in cur:
                yield bytes(k).decode(), from_u64(v)

    def features_with_prefix(self, prefix: str, limit: int):
        """Up to `limit` feature names starting with `prefix`, in name order."""
        raw = utf8(prefix, "feature prefix")
        out: list[str] = []
        with self.txn.cursor(db=self.dbs["features"]) as cur:
            if not cur.set_range(raw):
                return out
            for key in cur.iternext(values=False):
                key = bytes(key)
                if not key.startswith(raw) or len(out) >= limit:
                    break
                if b"\x00" not in key:  # a long name's key is not the name
                    out.append(key.decode())
        return out

    def feature_count(self) -> int:
        return self.txn.stat(self.dbs["features"])["entries"]
