"""The storage-backend contract the triplet store runs on, and the one schema every backend creates.

The store writes its SQL once, with ``?`` placeholders and a handful of type names; a backend supplies the
connection handling, the transaction discipline and the dialect (placeholder style, column types). Writes are
serialised (one writer at a time, across threads and processes); a transaction either commits whole or leaves
nothing behind.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

__all__ = ["SCHEMA_VERSION", "Cursor", "StorageBackend", "schema_statements"]

SCHEMA_VERSION = 1


class Cursor(Protocol):
    """What the store needs from a transaction: ``execute`` returning something with ``fetchone``/``fetchall``."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any: ...

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> Any: ...


def schema_statements(types: dict[str, str]) -> list[str]:
    """``CREATE`` statements of the triplet-memory schema with the backend's type names.

    ``types`` maps ``pk`` (auto-increment integer primary key), ``bigint``, ``real`` and ``blob``.

    Tables: ``meta`` (settings: embedding dimension, embedder identity, single-valued relations), ``terms``
    (one row per distinct normalised term with its float32 embedding, from which the in-memory term index is
    built), ``triplets`` (the three-column memory plus namespace, key, payload JSON and validity interval) and
    ``nodes`` (graph-node attributes that property-graph views store next to the triplets).
    """
    t = types
    return [
        "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
        f"CREATE TABLE IF NOT EXISTS terms (id {t['pk']}, norm TEXT NOT NULL UNIQUE, text TEXT NOT NULL, "
        f"vector {t['blob']} NOT NULL)",
        f"CREATE TABLE IF NOT EXISTS triplets (id {t['pk']}, namespace TEXT NOT NULL, key TEXT NOT NULL, "
        f"t1 TEXT NOT NULL, t2 TEXT NOT NULL, t3 TEXT NOT NULL, "
        f"t1_id {t['bigint']} NOT NULL REFERENCES terms (id), t2_id {t['bigint']} NOT NULL REFERENCES terms (id), "
        f"t3_id {t['bigint']} NOT NULL REFERENCES terms (id), payload TEXT NOT NULL, "
        f"valid_from {t['real']} NOT NULL, valid_to {t['real']}, created_at {t['real']} NOT NULL)",
        "CREATE INDEX IF NOT EXISTS triplets_t1 ON triplets (t1_id, namespace, t2_id, t3_id)",
        "CREATE INDEX IF NOT EXISTS triplets_t2 ON triplets (t2_id, namespace)",
        "CREATE INDEX IF NOT EXISTS triplets_t3 ON triplets (t3_id, namespace)",
        "CREATE INDEX IF NOT EXISTS triplets_key ON triplets (namespace, key)",
        "CREATE UNIQUE INDEX IF NOT EXISTS triplets_open_key ON triplets (namespace, key) WHERE valid_to IS NULL",
        "CREATE TABLE IF NOT EXISTS nodes (namespace TEXT NOT NULL, id TEXT NOT NULL, label TEXT NOT NULL, "
        "kind TEXT NOT NULL, text TEXT NOT NULL, properties TEXT NOT NULL, PRIMARY KEY (namespace, id))",
    ]


class StorageBackend(ABC):
    """A database the :class:`~fragrel_integrations.core.triplets.memory_store.TripletStore` keeps its tables in.

    Implementations: :class:`~fragrel_integrations.core.triplets.sqlite_backend.SQLiteBackend` (default) and
    :class:`~fragrel_integrations.core.triplets.postgres_backend.PostgresBackend`.
    """

    name: str = "backend"
    #: the largest number of ``?`` parameters the store puts in one statement
    max_params: int = 900
    #: the LIMIT clause value meaning "no limit"
    unlimited: str = "ALL"

    @abstractmethod
    def types(self) -> dict[str, str]:
        """Type names for :func:`schema_statements`."""

    @abstractmethod
    def write(self) -> AbstractContextManager[Cursor]:
        """A write transaction: exclusive among writers, committed on success, rolled back on any error."""

    @abstractmethod
    def read(self) -> AbstractContextManager[Cursor]:
        """A consistent read (a snapshot where the database offers one)."""

    @abstractmethod
    def close(self) -> None:
        """Release connections. Further use raises."""

    def create_schema(self) -> None:
        with self.write() as cur:
            for stmt in schema_statements(self.types()):
                cur.execute(stmt)

    def optimize(self) -> None:  # noqa: B027 - optional hook: backends without planner statistics skip it
        """Refresh the query planner's statistics (after large writes). Default: nothing."""

    def iter_chunks(self, items: Sequence[Any], size: int | None = None) -> Iterator[Sequence[Any]]:
        """``items`` in slices small enough for one statement's parameter limit."""
        size = size or self.max_params
        for start in range(0, len(items), size):
            yield items[start : start + size]

    def each_chunk(self, cur: Cursor, sql: str, items: Sequence[Any], *params: Any) -> Iterator[Any]:
        """Run ``sql`` once per chunk of ``items`` and yield each result; ``{marks}`` in ``sql`` stands for the
        chunk's placeholders, which follow ``params``."""
        for chunk in self.iter_chunks(items, self.max_params - len(params)):
            yield cur.execute(sql.format(marks=",".join("?" * len(chunk))), (*params, *chunk))
