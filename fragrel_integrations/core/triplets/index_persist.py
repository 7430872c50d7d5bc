"""The term index's partition saved in the database beside the data, so that opening a big store reads it back
instead of re-running k-means (which takes 10-20 s at 100,000 terms and minutes at 1,000,000).

Two tables (created with the schema, see :func:`~.backend.schema_statements`):

* ``term_index_state``: at most one row: a format number, a ``generation`` (bumped by every re-partition), the
  dimension, the number of partitions ``k``, ``trained_n``, the change counter ``assigned`` (= rows in
  ``term_part``), a CRC-32 ``checksum`` of the two BLOBs, ``mean`` (dim little-endian float32) and ``centroids``
  (k x dim float32).
* ``term_part``: one row per term: its partition in that state.

What keeps them true to the data:

* A writer assigns each NEW term its partition (nearest saved centroid) and bumps ``assigned`` in the very
  transaction that inserts the term; a re-partition replaces every row and the state in one transaction. So a
  crash never leaves the index ahead of the data: the index and the terms commit or roll back together.
* Terms stored by a writer that does not assign (this library before the index was saved, or any term stored
  while no state existed) simply have no row: the loader assigns them to their nearest centroid and saves them.
* The loader trusts a saved state only if its format, dimension, sizes and checksum are right, every centroid
  is finite, the change counter equals the rows in ``term_part``, every row names a stored term and a partition
  in range, and a sample of the saved assignments agrees with the nearest centroid. Otherwise it says why (a
  warning in the log) and the store re-partitions from the vectors and saves the result.

Nothing here is pickled: the BLOBs are raw float32 arrays.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._validation import stored_int, stored_vectors
from .backend import Cursor
from .term_index import TermIndex, nearest_partition

__all__ = ["FORMAT", "SavedPartition", "assign_new_terms", "check_saved", "read_saved", "read_terms", "save_missing",
           "save_partition", "vectors_of"]  # fmt: skip

#: format number of the saved partition (a loader refuses any other)
FORMAT = 1
#: terms read per query when loading
_PAGE = 50_000
#: saved assignments re-checked against the nearest centroid when loading
_SPOT = 512
#: rows per INSERT batch when saving
_BATCH = 10_000
#: the integer columns of ``term_index_state``, in :func:`_saved_row`'s order
_INT_COLUMNS = ("format", "generation", "dim", "k", "trained_n", "assigned", "checksum")


@dataclass(frozen=True)
class SavedPartition:
    """A validated ``term_index_state`` row."""

    generation: int
    trained_n: int
    assigned: int
    mean: np.ndarray
    centroids: np.ndarray


def _checksum(mean: bytes, centroids: bytes) -> int:
    return zlib.crc32(centroids, zlib.crc32(mean))


def _saved_row(cur: Cursor) -> tuple[Any, ...] | None:
    return cur.execute(
        "SELECT format, generation, dim, k, trained_n, assigned, checksum, mean, centroids "
        "FROM term_index_state WHERE id = 1"
    ).fetchone()


def _stored_generation(cur: Cursor) -> tuple[bool, int | None]:
    """``(a state row exists, its generation)``; the generation is None when the row holds no integer there."""
    row = cur.execute("SELECT generation FROM term_index_state WHERE id = 1").fetchone()
    if row is None:
        return False, None
    try:
        return True, stored_int(row[0], "term_index_state.generation")
    except ValueError:
        return True, None


def read_saved(cur: Cursor, dim: int) -> tuple[SavedPartition | None, str | None]:
    """The saved partition if one is stored and well-formed, else ``(None, why)`` (``why`` is None when there is
    simply none). A value of the wrong type in any column is a reason, never an exception: the state is a cache."""
    row = _saved_row(cur)
    if row is None:
        return None, None
    try:
        fmt, gen, sdim, k, trained_n, assigned, checksum = (
            stored_int(v, f"term_index_state.{name}") for v, name in zip(row[:7], _INT_COLUMNS, strict=True)
        )
    except ValueError as exc:
        return None, f"saved term index: {exc}"
    mean_b, cent_b = row[7], row[8]
    if not isinstance(mean_b, bytes | bytearray | memoryview) or not isinstance(cent_b, bytes | bytearray | memoryview):
        return None, "saved term index holds centroids that are not float32 BLOBs"
    mean_b, cent_b = bytes(mean_b), bytes(cent_b)
    if fmt != FORMAT:
        return None, f"saved term index has format {fmt}, this library reads {FORMAT}"
    if sdim != dim or k < 1 or len(mean_b) != 4 * dim or len(cent_b) != 4 * dim * k:
        return None, f"saved term index has the wrong shape (dim {sdim}, k {k}, {len(cent_b)} centroid bytes)"
    if _checksum(mean_b, cent_b) != checksum:
        return None, "saved term index fails its checksum"
    mean = np.frombuffer(mean_b, dtype="<f4").astype(np.float32)
    cent = np.frombuffer(cent_b, dtype="<f4").astype(np.float32).reshape(k, dim)
    if not (np.isfinite(mean).all() and np.isfinite(cent).all()):
        return None, "saved term index holds non-finite centroids"
    return SavedPartition(gen, trained_n, assigned, mean, cent), None


def _part(value: object) -> int:
    """A ``term_part.part`` value: its partition, ``-1`` for none, ``-2`` for a value that is not an integer."""
    if value is None:
        return -1
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return -2
    return value


def read_terms(
    cur: Cursor, dim: int, after: int = 0, *, where: str = "the triplet store"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ids (ascending), unit vectors and saved partition numbers (``-1``: none; ``-2``: a damaged value, which
    :func:`check_saved` refuses) of the terms with id > ``after``. A damaged term vector is a ValueError naming
    ``where`` (the database) and the term: the vectors are the data, not a cache."""
    ids: list[np.ndarray] = []
    vecs: list[np.ndarray] = []
    parts: list[np.ndarray] = []
    last = after
    while True:
        rows = cur.execute(
            "SELECT t.id, t.vector, p.part FROM terms t LEFT JOIN term_part p ON p.term_id = t.id "
            f"WHERE t.id > ? ORDER BY t.id LIMIT {_PAGE}",
            (last,),
        ).fetchall()
        if not rows:
            break
        ids.append(np.fromiter((int(r[0]) for r in rows), dtype=np.int64, count=len(rows)))
        vecs.append(vectors_of(rows, dim, where))
        parts.append(np.fromiter((_part(r[2]) for r in rows), dtype=np.int64, count=len(rows)))
        last = int(ids[-1][-1])
        if len(rows) < _PAGE:
            break
    if not ids:
        return np.zeros(0, np.int64), np.zeros((0, dim), np.float32), np.zeros(0, np.int64)
    return np.concatenate(ids), np.concatenate(vecs).astype(np.float32, copy=False), np.concatenate(parts)


def vectors_of(rows: list[Any], dim: int, where: str) -> np.ndarray:
    """The term vectors of ``(id, vector, ...)`` rows of the ``terms`` table; ValueError naming ``where`` and the
    term for a damaged one."""
    return stored_vectors([r[1] for r in rows], dim, f"{where}: terms.vector", names=[f"id {r[0]}" for r in rows])


def check_saved(cur: Cursor, saved: SavedPartition, vectors: np.ndarray, parts: np.ndarray) -> str | None:
    """Why the saved assignments of ALL stored terms (``vectors``, ``parts`` from :func:`read_terms`) must not be
    trusted, or None when they may be."""
    k = saved.centroids.shape[0]
    rows = int(cur.execute("SELECT COUNT(*) FROM term_part").fetchone()[0])
    if rows != saved.assigned:
        return f"saved term index is stale: its change counter says {saved.assigned} rows, term_part holds {rows}"
    if (parts < -1).any():
        return f"term_part holds {int((parts < -1).sum())} values that are not partition numbers"
    have = parts >= 0
    if int(have.sum()) != rows:
        return f"term_part holds {rows - int(have.sum())} rows for terms that are not stored"
    if parts.size and int(parts.max()) >= k:
        return f"term_part names partition {int(parts.max())} of a {k}-partition index"
    done = np.flatnonzero(have)
    if done.size:
        sample = done[np.linspace(0, done.size - 1, min(_SPOT, done.size)).astype(np.int64)]
        agree = nearest_partition(vectors[sample], saved.centroids, saved.mean) == parts[sample]
        if agree.mean() < 0.99:
            return f"saved assignments disagree with the saved centroids ({1 - agree.mean():.0%} of a sample)"
    return None


def _insert_parts(cur: Cursor, ids: np.ndarray, parts: np.ndarray) -> None:
    for s in range(0, ids.size, _BATCH):
        cur.executemany(
            "INSERT INTO term_part (term_id, part) VALUES (?, ?)",
            list(zip(ids[s : s + _BATCH].tolist(), parts[s : s + _BATCH].tolist(), strict=True)),
        )


def save_partition(cur: Cursor, index: TermIndex, *, force: bool = False) -> SavedPartition | None:
    """In a write transaction: replace the saved partition with ``index``'s (every term it holds, and any term
    committed after what it holds, assigned to the new centroids). Returns what was saved, or None when
    ``index`` is unpartitioned or the database already holds a partition trained on as many vectors or more
    (another process re-partitioned: its partition stays) and ``force`` is false (``force``: the saved one
    failed :func:`check_saved`)."""
    state = index.partition_state()
    if state is None:
        return None
    mean, cent = state
    exists, stored_gen = _stored_generation(cur)
    if exists and not force:
        saved, _ = read_saved(cur, index.dim)
        if saved is not None and saved.trained_n >= index.trained_n:  # a sound partition at least as recent: keep it
            return None
    ids, parts = index.assignments()
    extra_ids, extra_vecs, _ = read_terms(cur, index.dim, after=index.max_id)
    if extra_ids.size:
        ids = np.concatenate([ids, extra_ids])
        parts = np.concatenate([parts, nearest_partition(extra_vecs, cent, mean)])
    generation = 1 if stored_gen is None else stored_gen + 1  # a damaged generation restarts at 1
    mean_b, cent_b = np.asarray(mean, "<f4").tobytes(), np.asarray(cent, "<f4").tobytes()
    cur.execute("DELETE FROM term_part")
    _insert_parts(cur, ids, parts)
    params: tuple[Any, ...] = (
        FORMAT, generation, index.dim, cent.shape[0], index.trained_n, int(ids.size), _checksum(mean_b, cent_b),
        mean_b, cent_b,
    )  # fmt: skip
    cur.execute(
        "INSERT INTO term_index_state (id, format, generation, dim, k, trained_n, assigned, checksum, mean, "
        "centroids) VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET format = excluded.format, "
        "generation = excluded.generation, dim = excluded.dim, k = excluded.k, trained_n = excluded.trained_n, "
        "assigned = excluded.assigned, checksum = excluded.checksum, mean = excluded.mean, "
        "centroids = excluded.centroids",
        params,
    )
    return SavedPartition(generation, index.trained_n, int(ids.size), mean, cent)


def save_missing(cur: Cursor, generation: int, ids: np.ndarray, parts: np.ndarray) -> bool:
    """In a write transaction: save partitions of terms that had none, if the saved partition is still
    ``generation``. Returns whether they were saved."""
    if _stored_generation(cur)[1] != generation or not ids.size:
        return False
    have = set()
    for chunk in range(0, ids.size, 500):
        marks = ",".join("?" * min(500, ids.size - chunk))
        have |= {
            int(r[0])
            for r in cur.execute(
                f"SELECT term_id FROM term_part WHERE term_id IN ({marks})", ids[chunk : chunk + 500].tolist()
            ).fetchall()
        }
    keep = np.fromiter((i not in have for i in ids.tolist()), dtype=bool, count=ids.size)
    _insert_parts(cur, ids[keep], parts[keep])
    cur.execute("UPDATE term_index_state SET assigned = assigned + ? WHERE id = 1", (int(keep.sum()),))
    return True


def assign_new_terms(
    cur: Cursor, ids: np.ndarray, vectors: np.ndarray, cached: SavedPartition | None
) -> SavedPartition | None:
    """In the write transaction that inserts terms ``ids``: save their partitions under the saved partition (if
    one is stored and sound) and bump the change counter. ``cached``: the partition this process read last (its
    centroids are reused while the generation is unchanged). Returns the partition used (or None)."""
    exists, generation = _stored_generation(cur)
    if not exists or not ids.size:
        return cached
    if generation is None:  # damaged: the next loader re-partitions; leave the counter and the rows alone
        return None
    if cached is None or cached.generation != generation:
        cached, _ = read_saved(cur, vectors.shape[1])
        if cached is None:  # unsound: the next loader re-partitions; leave the counter and the rows alone
            return None
    _insert_parts(cur, ids, nearest_partition(vectors, cached.centroids, cached.mean))
    cur.execute("UPDATE term_index_state SET assigned = assigned + ? WHERE id = 1", (int(ids.size),))
    return cached
