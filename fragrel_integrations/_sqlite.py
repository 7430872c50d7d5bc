"""Opening SQLite connections the one way this package does (stdlib ``sqlite3``; no framework, no model).

Used by the code index, the tree files, the FragRel index cache, the fragment store and the model response
cache; the triplet store and the SCM stream open theirs in ``core/triplets/sqlite_backend.py``.

>>> conn = connect(":memory:", threads=True)
>>> conn.execute("SELECT 1").fetchone()
(1,)
>>> conn.close()
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from urllib.parse import quote

__all__ = ["connect"]


def connect(
    path: str | os.PathLike[str],
    *,
    read_only: bool = False,
    threads: bool = False,
    wal: bool = False,
    timeout: float = 5.0,
) -> sqlite3.Connection:
    """A connection to the SQLite file ``path`` (or ``":memory:"``).

    ``read_only`` opens an existing file with ``mode=ro`` (never creates or writes it; the path is quoted, so
    ``?``, ``#`` and ``%`` in a file name are safe); ``threads`` lets the connection be used from other threads
    (the caller serialises access with a lock); ``wal`` switches a file to write-ahead logging (readers do not
    block the writer); ``timeout`` is how long a write waits for another process's lock, in seconds.
    """
    if read_only:
        uri = f"file:{quote(str(Path(path).resolve()))}?mode=ro"
        return sqlite3.connect(uri, uri=True, timeout=timeout, check_same_thread=not threads)
    conn = sqlite3.connect(os.fspath(path), timeout=timeout, check_same_thread=not threads)
    if wal and os.fspath(path) != ":memory:":
        with conn:
            conn.execute("PRAGMA journal_mode=WAL")
    return conn
