"""SQLite backend (standard library): one file, WAL journal, ``BEGIN IMMEDIATE`` write transactions.

Durability: with the default ``synchronous="FULL"`` a committed write survives a process crash and a power
loss; ``"NORMAL"`` (faster) still survives a process crash. A writer killed mid-transaction leaves nothing of
that transaction behind (SQLite's rollback on the next open). Threads share one connection under a lock;
other processes writing the same file wait up to ``timeout`` seconds for the write lock.

A path that is not a SQLite database (another kind of file, a directory: the package's one check,
:func:`~fragrel_integrations._sqlite.check_file`) or a truncated or corrupt database raises ValueError naming
the path, at open or at the first read that meets the damage; the file is never written to or replaced. (An
empty file is a new, empty database, as SQLite treats it.)
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from pathlib import Path

from ..._sqlite import check_file, not_a_database
from ..._validation import check_type
from .backend import Cursor, StorageBackend

__all__ = ["SQLiteBackend"]

_SYNC = ("OFF", "NORMAL", "FULL", "EXTRA")
_DAMAGED = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB
_SHORT_READ = 522  # SQLITE_IOERR_SHORT_READ: a page the database counts is missing from the file


def _damaged(exc: BaseException) -> bool:
    """Whether ``exc`` says the file is not a database, is corrupt or truncated, holds text that is not UTF-8
    (which SQLite never writes from Python strings; also in SQLite's own error message, which quotes a damaged
    schema and which Python then cannot decode), or lacks a column or table of this library's fixed statements
    (a damaged schema, or a file of another program)."""
    if isinstance(exc, UnicodeDecodeError):
        return True
    if isinstance(exc, sqlite3.OperationalError) and str(exc).startswith(("no such column", "no such table")):
        return True
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        return str(exc).startswith("Could not decode to UTF-8")
    return code & 0xFF in _DAMAGED or code == _SHORT_READ


def _check_size(conn: sqlite3.Connection, path: str | None) -> None:
    """Read the schema; for a file ``path``, refuse a truncated database: the pages its header counts must all be
    in the file. Run in a read transaction, and only when no write-ahead log holds pages (then the page count comes
    from the file)."""
    conn.execute("BEGIN")
    try:
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        if path is None:
            return
        pages, page_size = (int(conn.execute(f"PRAGMA {name}").fetchone()[0]) for name in ("page_count", "page_size"))
        wal, size = 0, os.path.getsize(path)
        with suppress(OSError):
            wal = os.path.getsize(path + "-wal")
        if wal == 0 and size < pages * page_size:
            why = f"is a truncated SQLite database ({size} bytes; its header counts {pages} pages of {page_size} bytes)"
            raise not_a_database(path, why)
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")


class SQLiteBackend(StorageBackend):
    """Triplet tables in a SQLite database file (``":memory:"`` for a throw-away store).

    >>> backend = SQLiteBackend(":memory:")
    >>> backend.create_schema()
    >>> with backend.read() as cur:
    ...     cur.execute("SELECT COUNT(*) FROM triplets").fetchone()[0]
    0
    """

    name = "sqlite"
    unlimited = "-1"

    def __init__(self, path: str | Path = ":memory:", *, timeout: float = 30.0, synchronous: str = "FULL") -> None:
        check_type(path, (str, Path), "path must be a str or Path")
        sync = str(synchronous).upper()
        if sync not in _SYNC:
            raise ValueError(f"synchronous must be one of {_SYNC}, got {synchronous!r}")
        if timeout < 0:
            raise ValueError(f"timeout must be >= 0 seconds, got {timeout!r}")
        self.path = str(path)
        uri = self.path.startswith("file:")
        local = self.path != ":memory:" and not uri
        if local:
            resolved = Path(self.path).expanduser()
            check_file(resolved)
            resolved.parent.mkdir(parents=True, exist_ok=True)
            self.path = str(resolved)
        self._lock = threading.RLock()
        self._in_transaction = False
        try:
            conn = sqlite3.connect(self.path, check_same_thread=False, timeout=timeout, isolation_level=None, uri=uri)
        except sqlite3.OperationalError as exc:
            raise not_a_database(self.path, f"cannot be opened as a SQLite database ({exc})") from exc
        self._conn: sqlite3.Connection | None = conn
        try:
            _check_size(conn, self.path if local else None)
            conn.execute("PRAGMA foreign_keys=ON")
            if self.path != ":memory:":
                conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={sync}")
        except BaseException as exc:
            self.close()
            # these fixed statements fail with SQLITE_ERROR only on a damaged file ("unsupported file format")
            if _damaged(exc) or getattr(exc, "sqlite_errorcode", None) == 1:
                raise not_a_database(self.path, f"is not a SQLite database or is corrupt ({exc})") from exc
            raise

    def types(self) -> dict[str, str]:
        return {"pk": "INTEGER PRIMARY KEY", "bigint": "INTEGER", "real": "REAL", "blob": "BLOB"}

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError("this SQLite backend is closed; open a new TripletStore")
        return self._conn

    @contextmanager
    def _transaction(self, begin: str) -> Iterator[Cursor]:
        with self._lock:
            conn = self._connection()
            if self._in_transaction:  # nested use on the same thread: join the open transaction
                yield conn.cursor()
                return
            conn.execute(begin)
            self._in_transaction = True
            try:
                yield conn.cursor()
                conn.execute("COMMIT")
            except BaseException as exc:
                if conn.in_transaction:  # SQLite may already have rolled back (e.g. after corruption)
                    with suppress(sqlite3.Error):  # keep the first error, the informative one
                        conn.execute("ROLLBACK")
                if _damaged(exc):
                    raise not_a_database(
                        self.path, f"is a corrupt SQLite database or its schema is not this library's ({exc})"
                    ) from exc
                raise
            finally:
                self._in_transaction = False

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
