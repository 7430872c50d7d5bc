"""SQLite backend (standard library): one file, WAL journal, ``BEGIN IMMEDIATE`` write transactions.

Durability: with the default ``synchronous="FULL"`` a committed write survives a process crash and a power
loss; ``"NORMAL"`` (faster) still survives a process crash. A writer killed mid-transaction leaves nothing of
that transaction behind (SQLite's rollback on the next open). Threads share one connection under a lock;
other processes writing the same file wait up to ``timeout`` seconds for the write lock.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from .backend import Cursor, StorageBackend

__all__ = ["SQLiteBackend"]

_SYNC = ("OFF", "NORMAL", "FULL", "EXTRA")


class SQLiteBackend(StorageBackend):
    """Triplet tables in a SQLite database file (``":memory:"`` for a throw-away store).

    >>> backend = SQLiteBackend(":memory:")
    >>> backend.create_schema()
    >>> with backend.read() as cur:
    ...     cur.execute("SELECT COUNT(*) FROM triplets").fetchone()[0]
    0
    """

    name = "sqlite"
    max_params = 900
    unlimited = "-1"

    def __init__(self, path: str | Path = ":memory:", *, timeout: float = 30.0, synchronous: str = "FULL") -> None:
        if not isinstance(path, str | Path):
            raise TypeError(f"path must be a str or Path, got {type(path).__name__}")
        if str(synchronous).upper() not in _SYNC:
            raise ValueError(f"synchronous must be one of {_SYNC}, got {synchronous!r}")
        if timeout < 0:
            raise ValueError(f"timeout must be >= 0 seconds, got {timeout!r}")
        self.path = str(path)
        if self.path != ":memory:" and not self.path.startswith("file:"):
            resolved = Path(self.path).expanduser()
            resolved.parent.mkdir(parents=True, exist_ok=True)
            self.path = str(resolved)
        self._lock = threading.RLock()
        self._depth = 0
        self._conn: sqlite3.Connection | None = sqlite3.connect(
            self.path, check_same_thread=False, timeout=timeout, isolation_level=None, uri=self.path.startswith("file:")
        )
        self._conn.execute("PRAGMA foreign_keys=ON")
        if self.path != ":memory:":
            self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute(f"PRAGMA synchronous={str(synchronous).upper()}")

    def types(self) -> dict[str, str]:
        return {
            "pk": "INTEGER PRIMARY KEY",
            "bigint": "INTEGER",
            "real": "REAL",
            "blob": "BLOB",
            "without_rowid": " WITHOUT ROWID",
        }

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError("this SQLite backend is closed; open a new TripletStore")
        return self._conn

    @contextmanager
    def _transaction(self, begin: str) -> Iterator[Cursor]:
        with self._lock:
            conn = self._connection()
            if self._depth:  # nested use on the same thread: join the open transaction
                self._depth += 1
                try:
                    yield conn.cursor()
                finally:
                    self._depth -= 1
                return
            conn.execute(begin)
            self._depth = 1
            try:
                yield conn.cursor()
            except BaseException:
                self._depth = 0
                conn.execute("ROLLBACK")
                raise
            else:
                self._depth = 0
                conn.execute("COMMIT")

    def write(self) -> AbstractContextManager[Cursor]:
        return self._transaction("BEGIN IMMEDIATE")

    def read(self) -> AbstractContextManager[Cursor]:
        return self._transaction("BEGIN")

    def optimize(self) -> None:
        """``ANALYZE``: lets SQLite's planner pick the selective index for fuzzy lookups on big stores."""
        with self._lock:
            self._connection().execute("ANALYZE")

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __repr__(self) -> str:
        return f"SQLiteBackend({self.path!r})"
