"""The SCM memory stream in SQLite: one row per interaction, keyed by ``(session_id, index)``.

Embeddings are stored as raw little-endian float32 bytes with their dimension (no pickle). Appends run in a
``BEGIN IMMEDIATE`` transaction that also assigns the next interaction index, so two processes appending to the
same session never reuse an index. Rows never change once written and only :meth:`SCMStream.clear` deletes, so
:meth:`SCMStream.items` keeps each session's items in memory, re-checks the first and last cached rows (a clear
followed by new turns gives rows with other ``created`` times) and reads only the rows added since (by any
process). The connection and transactions
come from the triplet store's :class:`~fragrel_integrations.core.triplets.sqlite_backend.SQLiteBackend` (WAL
journal, ``synchronous=FULL``).

>>> import numpy as np
>>> stream = SCMStream(":memory:")
>>> item = stream.append("s1", "Hi, I am Ana.", "Hello Ana!", summary="The user is Ana.", embedding=np.ones(2))
>>> item.index, stream.count("s1"), stream.count("s2")
(0, 1, 0)
>>> stream.last("s1").summary, stream.items("s1")[0].embedding.tolist()
('The user is Ana.', [1.0, 1.0])
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from ..._closing import Closing
from ..._sqlite import SavedFormat
from ..._validation import check_text, stored_int, stored_vectors
from ..triplets.sqlite_backend import SQLiteBackend
from .interactions import MemoryItem

__all__ = ["BaseMemoryStream", "MemoryStream", "SCMStream", "check_session", "check_turn"]


@runtime_checkable
class MemoryStream(Protocol):
    """What :class:`~fragrel_integrations.core.scm.SelfControlledMemory` needs from a memory stream.

    Implementations: :class:`SCMStream` (SQLite, the default) and
    :class:`fragrel_integrations.langchain.scm_store.LangGraphStoreStream` (a LangGraph ``BaseStore``). Each
    session's items are numbered from 0 in time order; ``items`` returns them oldest first. ``isinstance`` checks
    only that the methods exist.
    """

    def append(
        self,
        session_id: str,
        observation: str,
        response: str,
        *,
        summary: str = "",
        embedding: np.ndarray | None = None,
    ) -> MemoryItem:
        """Write one interaction at the end of the session's stream and return it (with its index)."""

    def items(self, session_id: str) -> list[MemoryItem]:
        """Every interaction of the session, in time order."""

    def last(self, session_id: str) -> MemoryItem | None:
        """The latest interaction, or None for an empty session."""

    def count(self, session_id: str) -> int:
        """Number of interactions in the session."""

    def sessions(self) -> list[str]:
        """The session ids with at least one interaction, sorted."""

    def clear(self, session_id: str) -> int:
        """Delete the session's interactions; returns how many were deleted."""

    def close(self) -> None:
        """Release the stream's resources."""


_FORMAT = SavedFormat(
    "fragrel-scm-stream",
    1,
    "FragRel SCM memory stream",
    (
        "CREATE TABLE IF NOT EXISTS scm_items (session_id TEXT NOT NULL, idx INTEGER NOT NULL, observation TEXT NOT "
        "NULL, response TEXT NOT NULL, summary TEXT NOT NULL, dim INTEGER NOT NULL, embedding BLOB, created REAL NOT "
        "NULL, PRIMARY KEY (session_id, idx)) WITHOUT ROWID",
    ),
)
_COLUMNS = "session_id, idx, observation, response, summary, dim, embedding, created"


def check_turn(observation: object, response: object, summary: object, embedding: object) -> np.ndarray | None:
    """Validate one interaction before a stream stores it (every text a str a database can store: TypeError /
    ValueError naming the field otherwise); returns the embedding as a read-only float32 copy.

    >>> check_turn("Hi", "Hello", "", [1, 2]).tolist()
    [1.0, 2.0]
    """
    for name, value in (("observation", observation), ("response", response), ("summary", summary)):
        check_text(value, name)
    if embedding is None:
        return None
    vector = np.array(embedding, dtype=np.float32).ravel()
    if vector.size == 0 or not np.all(np.isfinite(vector)):
        raise ValueError("embedding must be a non-empty finite vector (or None)")
    vector.flags.writeable = False
    return vector


def check_session(session_id: object) -> str:
    """A session id: a non-empty str that can be stored (TypeError / ValueError otherwise)."""
    if not isinstance(session_id, str) or not session_id:
        raise TypeError(f"session_id must be a non-empty str, got {session_id!r}")
    return check_text(session_id, "session_id")


def _row(row: tuple, path: str) -> MemoryItem:
    """A stored row as a :class:`MemoryItem`; a row a damaged file returns is a ValueError naming the file."""
    session_id, idx, observation, response, summary, dim, blob, created = row
    try:
        for name, value in (("observation", observation), ("response", response), ("summary", summary)):
            if not isinstance(value, str):
                raise ValueError(f"{name} is {type(value).__name__}, not text")
        embedding = None
        if blob is not None:
            embedding = stored_vectors([blob], stored_int(dim, "dim", minimum=1), "embedding")[0]
            embedding.flags.writeable = False  # shared by every reader of the cached stream
        return MemoryItem(session_id, stored_int(idx, "idx"), observation, response, summary, embedding, float(created))
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"{path!r}: a damaged row in the SQLite table scm_items (session {session_id!r:.40}, index {idx!r:.20}: "
            f"{exc}); restore the file from a backup"
        ) from exc


class BaseMemoryStream(Closing):
    """The part every stream of this package shares: :meth:`append` checks the session id and the turn
    (:func:`check_session`, :func:`check_turn`), then the subclass's ``_write(session_id, observation, response,
    summary, vector)`` stores it and returns the :class:`MemoryItem` (with its index)."""

    def append(
        self,
        session_id: str,
        observation: str,
        response: str,
        *,
        summary: str = "",
        embedding: np.ndarray | None = None,
    ) -> MemoryItem:
        """Write one interaction at the end of the session's stream and return it (with its index)."""
        session_id = check_session(session_id)
        vector = check_turn(observation, response, summary, embedding)
        return self._write(session_id, observation, response, summary, vector)

    def _write(
        self, session_id: str, observation: str, response: str, summary: str, vector: np.ndarray | None
    ) -> MemoryItem:
        raise NotImplementedError


class SCMStream(BaseMemoryStream):
    """A persistent memory stream (``path``: a SQLite file, or ``":memory:"`` for a throw-away stream).

    Every method takes the ``session_id``; sessions never see each other's interactions. A ``path`` that is
    not a SQLite database (a text file, a directory), a truncated or corrupt one, or a database of something
    else (no stream header: :class:`~fragrel_integrations._sqlite.SavedFormat`) raises ValueError naming the
    path, and the file is left unchanged (see
    :class:`~fragrel_integrations.core.triplets.sqlite_backend.SQLiteBackend`).
    """

    def __init__(self, path: str | Path = ":memory:", *, timeout: float = 30.0, synchronous: str = "FULL") -> None:
        self._db = SQLiteBackend(path, timeout=timeout, synchronous=synchronous)
        self.path = self._db.path
        self._cache: dict[str, list[MemoryItem]] = {}
        self._cache_lock = threading.Lock()
        try:
            with self._db.write() as cur:
                _FORMAT.claim(cur, self.path)
        except BaseException:
            self._db.close()
            raise

    def _write(
        self, session_id: str, observation: str, response: str, summary: str, vector: np.ndarray | None
    ) -> MemoryItem:
        blob = None if vector is None else vector.astype("<f4").tobytes()
        dim = 0 if vector is None else int(vector.size)
        created = time.time()
        with self._db.write() as cur:
            row = cur.execute("SELECT MAX(idx) FROM scm_items WHERE session_id = ?", (session_id,)).fetchone()
            index = 0 if row[0] is None else int(row[0]) + 1
            cur.execute(
                f"INSERT INTO scm_items ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (session_id, index, observation, response, summary, dim, blob, created),
            )
        return MemoryItem(session_id, index, observation, response, summary, vector, created)

    def items(self, session_id: str) -> list[MemoryItem]:
        """Every interaction of the session, in time order (a new list; rows added since the last call are read,
        the rest comes from memory unless the session was cleared meanwhile)."""
        check_session(session_id)
        with self._cache_lock, self._db.read() as cur:
            cached = self._cache.get(session_id, [])
            if cached:  # still the same writes? (a clear, then new turns, gives new first/last rows)
                for known in {cached[0].index: cached[0], cached[-1].index: cached[-1]}.values():
                    row = cur.execute(
                        "SELECT created FROM scm_items WHERE session_id = ? AND idx = ?", (session_id, known.index)
                    ).fetchone()
                    if row is None or float(row[0]) != known.created:
                        cached = []
                        break
            after = cached[-1].index if cached else -1
            rows = cur.execute(
                f"SELECT {_COLUMNS} FROM scm_items WHERE session_id = ? AND idx > ? ORDER BY idx", (session_id, after)
            ).fetchall()
            cached = cached + [_row(r, self.path) for r in rows]
            self._cache[session_id] = cached
            return list(cached)

    def last(self, session_id: str) -> MemoryItem | None:
        """The latest interaction (the flash memory of the next turn), or None for an empty session."""
        check_session(session_id)
        with self._db.read() as cur:
            row = cur.execute(
                f"SELECT {_COLUMNS} FROM scm_items WHERE session_id = ? ORDER BY idx DESC LIMIT 1", (session_id,)
            ).fetchone()
        return None if row is None else _row(row, self.path)

    def count(self, session_id: str) -> int:
        """Number of interactions in the session."""
        check_session(session_id)
        with self._db.read() as cur:
            return int(cur.execute("SELECT COUNT(*) FROM scm_items WHERE session_id = ?", (session_id,)).fetchone()[0])

    def sessions(self) -> list[str]:
        """The session ids with at least one interaction, sorted."""
        with self._db.read() as cur:
            return [r[0] for r in cur.execute("SELECT DISTINCT session_id FROM scm_items ORDER BY session_id")]

    def clear(self, session_id: str) -> int:
        """Delete the session's interactions; returns how many were deleted."""
        check_session(session_id)
        with self._cache_lock, self._db.write() as cur:
            self._cache.pop(session_id, None)
            return int(cur.execute("DELETE FROM scm_items WHERE session_id = ?", (session_id,)).rowcount)

    def close(self) -> None:
        """Close the database connection."""
        self._db.close()

    def __repr__(self) -> str:
        return f"SCMStream({self.path!r})"
