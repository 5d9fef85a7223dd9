"""Durable state of a parent QoS broker in one SQLite file (children, inter-cloud channels and subscriptions).

One table of JSON documents keyed by (kind, key), written through before a command
is acknowledged, like the leaf's ``store``. Kinds: ``child``, ``channel`` (registered
here), ``sub`` (inter-cloud subscriptions admitted here, with their segments),
``forwarded`` (subscriptions sent up to this broker's parent) and ``chanres``
(committed reservations on channels registered here, asked by an ancestor) and ``flooding``
(flooded variables, ``parent_flooding``).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from gridstat.broker.store import prepare_private_file
from gridstat.errors import ValidationError

KINDS = ("child", "channel", "sub", "forwarded", "chanres", "mode", "modestate", "flooding")


class ParentStore:
    def __init__(self, path: str) -> None:
        if path != ":memory:":
            prepare_private_file(path)  # 0600 file, 0700 directories it creates (docs/security.md)
        try:
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS docs (kind TEXT NOT NULL, key TEXT NOT NULL, "
                             "doc TEXT NOT NULL, PRIMARY KEY (kind, key))")
        except sqlite3.Error as exc:
            raise ValidationError(f"cannot open parent broker state {path!r}: {exc}", field="state_path") from exc
        self.path = path

    def put(self, kind: str, key: str, doc: dict[str, Any]) -> None:
        assert kind in KINDS
        self._db.execute("INSERT OR REPLACE INTO docs (kind, key, doc) VALUES (?, ?, ?)", (kind, key, json.dumps(doc)))

    def delete(self, kind: str, key: str) -> None:
        assert kind in KINDS
        self._db.execute("DELETE FROM docs WHERE kind = ? AND key = ?", (kind, key))

    def all(self, kind: str) -> list[dict[str, Any]]:
        assert kind in KINDS
        return [json.loads(d) for (d,) in self._db.execute("SELECT doc FROM docs WHERE kind = ? ORDER BY rowid",
                                                           (kind,))]

    def close(self) -> None:
        self._db.close()
