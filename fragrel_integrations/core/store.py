"""FragmentStore: fragments by (doc_id, position) in SQLite, so a wrapper can fetch a hit's neighbours."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

from .._sqlite import SavedFormat
from .._validation import check_min_int, check_type, stored_json
from .fragments import Fragment, metadata_json

__all__ = ["FragmentStore"]

_FORMAT = SavedFormat(
    "fragrel-fragment-store",
    1,
    "FragRel fragment store",
    (
        "CREATE TABLE IF NOT EXISTS fragments (doc_id TEXT NOT NULL, position INTEGER NOT NULL, text TEXT NOT NULL, "
        "metadata TEXT NOT NULL, PRIMARY KEY (doc_id, position)) WITHOUT ROWID",
    ),
)


class FragmentStore:
    """A SQLite table of fragments keyed by ``(doc_id, position)``; ``":memory:"`` by default.

    Writes are transactional (all of a batch or nothing). Metadata is stored as JSON (no pickle). A file is a
    :class:`~fragrel_integrations._sqlite.SavedFormat` (a file of something else is refused with a ValueError).

    >>> store = FragmentStore()
    >>> store.add([Fragment("a", "d", 0), Fragment("b", "d", 1), Fragment("c", "d", 2)])
    >>> [f.text for f in store.neighbours([("d", 0)], radius=1)]
    ['b']
    """

    def __init__(self, path: str | Path = ":memory:") -> None:
        self.path = str(path)
        self._lock = threading.RLock()
        self._conn = _FORMAT.open(self.path, threads=True)

    def add(self, fragments: Iterable[Fragment]) -> None:
        """Insert or replace fragments (one transaction)."""
        rows = []
        for f in fragments:
            check_type(f, Fragment, "FragmentStore.add takes Fragment objects")
            rows.append((f.doc_id, f.position, f.text, metadata_json(f.metadata, "fragment metadata")))
        with self._lock, self._conn:
            self._conn.executemany("INSERT OR REPLACE INTO fragments VALUES (?, ?, ?, ?)", rows)

    def get(self, doc_id: str, position: int) -> Fragment | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT doc_id, position, text, metadata FROM fragments WHERE doc_id = ? AND position = ?",
                (str(doc_id), int(position)),
            ).fetchone()
        if row is None:
            return None
        metadata = stored_json(row[3], f"{self.path}: the metadata of fragment ({doc_id!r}, {position})")
        return Fragment(row[2], row[0], row[1], metadata)

    def neighbours(self, keys: Sequence[tuple[str, int]], radius: int = 1) -> list[Fragment]:
        """Stored fragments within ``radius`` positions of any key, excluding the keys themselves."""
        check_min_int(radius, "radius", 0)
        have = {(str(d), int(p)) for d, p in keys}
        wanted = sorted({(d, p + o) for d, p in have for o in range(-radius, radius + 1) if o} - have)
        return [f for doc_id, pos in wanted if (f := self.get(doc_id, pos)) is not None]

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM fragments").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()
