"""Durable broker state in one SQLite file (docs/management-plane.md: a restarted broker rebuilds its state).

GridStat assumed brokers never fail (dissertation 3.7); on Kubernetes pods restart,
so every change the broker accepts is written through before it is acknowledged.
The schema is a handful of tables of JSON documents keyed by name: simple to
inspect with ``sqlite3`` and to migrate (``schema_version`` in ``meta``).
WAL mode with ``synchronous=NORMAL`` keeps a write well under a millisecond.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path as FsPath
from typing import Any

from gridstat.broker.paths import Path
from gridstat.broker.state import Client, ModeQoS, RouterEndpoint, SubscriptionRecord
from gridstat.core.model import StatusVariable, StructType, TypeSpec, ValueType
from gridstat.errors import ValidationError

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
#: SQLite's companions of a database file (WAL mode, rollback journal).
COMPANIONS = ("-wal", "-shm", "-journal")
_TABLES = ("routers", "channels", "foreign_channels", "clients", "publications", "subscriptions", "condensations",
           "flooding", "flood_all", "queries")


def _type_to_json(t: TypeSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": t.kind.name}
    if t.struct_type is not None:
        out["struct"] = {"name": t.struct_type.name, "fields": [list(f) for f in t.struct_type.fields]}
    return out


def _type_from_json(d: dict[str, Any]) -> TypeSpec:
    st = d.get("struct")
    struct_type = StructType(st["name"], tuple((n, t) for n, t in st["fields"])) if st else None
    return TypeSpec(ValueType[d["kind"]], struct_type)


def var_to_json(v: StatusVariable) -> dict[str, Any]:
    return {"publisher": v.publisher, "name": v.name, "type": _type_to_json(v.type), "interval_ms": v.interval_ms,
            "priority": v.priority, "alert": v.alert, "min_interval_ms": v.min_interval_ms,
            "variable_id": v.variable_id, "frames_per_s": v.frames_per_s, "attributes": dict(v.attributes)}


def var_from_json(d: dict[str, Any]) -> StatusVariable:
    return StatusVariable(d["publisher"], d["name"], _type_from_json(d["type"]), d["interval_ms"], d["priority"],
                          d["alert"], d["min_interval_ms"], d["variable_id"], frames_per_s=d.get("frames_per_s", 0),
                          attributes=d.get("attributes", {}))


def record_to_json(r: SubscriptionRecord) -> dict[str, Any]:
    # Written for every admitted subscription: built by hand, asdict's deep copies cost 5x more.
    return {
        "subscription_id": r.subscription_id, "subscriber": r.subscriber, "variable": r.variable,
        "variable_id": r.variable_id, "pub_interval_ms": r.pub_interval_ms, "alert": r.alert,
        "edge_router": r.edge_router, "publisher_router": r.publisher_router,
        "qos": [{"mode": q.mode, "interval_ms": q.interval_ms, "latency_ms": q.latency_ms,
                 "redundancy": q.redundancy, "priority": q.priority, "price": q.price, "best_effort": q.best_effort}
                for q in r.qos],
        "paths": [[mode, [{"routers": list(p.routers), "latency_ms": p.latency_ms} for p in paths]]
                  for mode, paths in r.paths],
        "version": r.version, "exit_channel": r.exit_channel, "segment": r.segment, "best_effort": r.best_effort,
        "publisher_routers": list(r.publisher_routers), "subscriber_routers": list(r.subscriber_routers),
        "frames_per_s": r.frames_per_s,
    }


def record_from_json(d: dict[str, Any]) -> SubscriptionRecord:
    return SubscriptionRecord(
        d["subscription_id"], d["subscriber"], d["variable"], d["variable_id"], d["pub_interval_ms"], d["alert"],
        d["edge_router"], d["publisher_router"], tuple(ModeQoS(**q) for q in d["qos"]),
        tuple((mode, tuple(Path(tuple(p["routers"]), p["latency_ms"]) for p in paths)) for mode, paths in d["paths"]),
        d["version"], d.get("exit_channel", ""), d.get("segment", False), d.get("best_effort", False),
        tuple(d.get("publisher_routers", ())), tuple(d.get("subscriber_routers", ())), d.get("frames_per_s", 0))


def prepare_private_file(path: str) -> None:
    """Make ``path`` (a state database) readable by its owner only, before SQLite opens it.

    The state holds every client, subscription and topology detail (docs/security.md, "State
    files"): missing directories are created 0700, a missing file is created 0600 (SQLite gives its
    -wal, -shm and -journal files the database file's mode), and an existing file or companion with
    a looser mode is tightened to 0600, which is logged.
    """
    target = FsPath(path)
    missing = []
    parent = target.parent
    while not parent.exists() and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=0o700, exist_ok=True)
            os.chmod(d, 0o700)  # the umask may have taken bits away, never added: 0700 exactly
        except OSError as exc:
            raise ValidationError(f"cannot create the state directory {str(d)!r}: {exc.strerror}",
                                  field="state_path") from exc
    try:
        os.close(os.open(target, os.O_RDWR | os.O_CREAT, 0o600))
    except OSError as exc:
        raise ValidationError(f"cannot open broker state {path!r}: {exc.strerror}", field="state_path") from exc
    for f in (target, *(FsPath(f"{path}{suffix}") for suffix in COMPANIONS)):
        try:
            mode = stat.S_IMODE(f.stat().st_mode)
        except FileNotFoundError:
            continue
        if mode & 0o077:
            try:
                os.chmod(f, 0o600)
            except OSError as exc:
                raise ValidationError(f"broker state {str(f)!r} is readable by others (mode {mode:04o}) and "
                                      f"cannot be made private: {exc.strerror}", field="state_path") from exc
            log.warning("broker state %s had mode %04o (readable by others): tightened to 0600", f, mode)


class BrokerStore:
    """Write-through storage of one broker's state; ``path=":memory:"`` for tests."""

    def __init__(self, path: str) -> None:
        if path != ":memory:":
            prepare_private_file(path)
        try:
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            for table in _TABLES:
                self._db.execute(f"CREATE TABLE IF NOT EXISTS {table} (key TEXT PRIMARY KEY, doc TEXT NOT NULL)")
        except sqlite3.Error as exc:
            raise ValidationError(f"cannot open broker state {path!r}: {exc}", field="state_path") from exc
        version = self.get_meta("schema_version")
        if version is None:
            self.set_meta("schema_version", SCHEMA_VERSION)
        elif int(version) != SCHEMA_VERSION:
            raise ValidationError(f"broker state {path!r} has schema {version}, this broker reads {SCHEMA_VERSION}",
                                  field="state_path")
        self.path = path

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def close(self) -> None:
        self._db.close()

    def get_meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: object) -> None:
        self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, str(value)))

    def put(self, table: str, key: str, doc: dict[str, Any]) -> None:
        assert table in _TABLES
        self._db.execute(f"INSERT OR REPLACE INTO {table} (key, doc) VALUES (?, ?)", (key, json.dumps(doc)))

    def delete(self, table: str, key: str) -> None:
        assert table in _TABLES
        self._db.execute(f"DELETE FROM {table} WHERE key = ?", (key,))

    def all(self, table: str) -> list[dict[str, Any]]:
        assert table in _TABLES
        return [json.loads(doc) for (doc,) in self._db.execute(f"SELECT doc FROM {table} ORDER BY rowid")]

    # -- typed helpers ---------------------------------------------------------------------------
    def put_router(self, ep: RouterEndpoint, role: str, capacity_eps: float,
                   attributes: dict[str, str] | None = None) -> None:
        self.put("routers", ep.name, {**asdict(ep), "role": role, "capacity_eps": capacity_eps,
                                      "attributes": dict(attributes or {})})

    def put_client(self, c: Client) -> None:
        self.put("clients", f"{c.kind}/{c.name}", asdict(c))

    def put_publication(self, v: StatusVariable) -> None:
        self.put("publications", v.full_name, var_to_json(v))

    def put_subscription(self, r: SubscriptionRecord) -> None:
        self.put("subscriptions", r.subscription_id, record_to_json(r))
