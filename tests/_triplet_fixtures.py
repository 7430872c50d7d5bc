"""Shared by the triplet-memory tests: one throw-away PostgreSQL server per test process (initdb + pg_ctl on
127.0.0.1, stopped when the process exits) and store factories for both backends."""

from __future__ import annotations

import atexit
import itertools
import threading

import pytest
from _pg_server import TemporaryPostgres, find_pg_bin

from fragrel_integrations.core.triplets import PostgresBackend, SQLiteBackend, TripletStore

__all__ = ["BACKENDS", "get_pg", "make_backend", "pg_skip_reason"]

BACKENDS = ["sqlite", "postgres"]
_LOCK = threading.Lock()
_PG: TemporaryPostgres | None = None
_SCHEMAS = itertools.count()


def pg_skip_reason() -> str | None:
    """Why the PostgreSQL tests cannot run here (None when they can)."""
    if find_pg_bin() is None:
        return "PostgreSQL server binaries (initdb, pg_ctl) are missing: apt-get install -y postgresql"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is missing: pip install 'fragrel-integrations[postgres]'"
    return None


def get_pg() -> TemporaryPostgres:
    """The process-wide test server (fsync off: these tests kill clients, not the server)."""
    global _PG
    with _LOCK:
        if _PG is None:
            _PG = TemporaryPostgres(fsync=False).start()
            atexit.register(_PG.stop)
        return _PG


def make_backend(kind: str, tmp_path, name: str = "memory"):
    """A fresh, empty backend of ``kind``: a new SQLite file, or a new schema on the test server."""
    if kind == "sqlite":
        return SQLiteBackend(tmp_path / f"{name}.db")
    reason = pg_skip_reason()
    if reason:
        pytest.skip(reason)
    return PostgresBackend(get_pg().url, schema=f"t_{name}_{next(_SCHEMAS)}")


def make_store(kind: str, tmp_path, embedder, **kwargs) -> TripletStore:
    return TripletStore(make_backend(kind, tmp_path), embedder=embedder, **kwargs)
