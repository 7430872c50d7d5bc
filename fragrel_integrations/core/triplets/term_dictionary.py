"""The triplet store's term dictionary: each distinct term once, with its embedding, LSH band keys and ids.

:class:`TermDictionary` owns the ``terms`` and ``term_lsh`` tables, the LSH settings kept in ``meta``, the
embedder, and the in-memory :class:`~.term_index.TermIndex` that gives fuzzy candidates
(``fuzzy_index="memory"``): loaded from the database on the first fuzzy lookup (from the partition saved by
:mod:`.index_persist` when it is sound), fed only committed terms, and saved back after the read or write that
changed it. With ``fuzzy_index="database"`` candidates come from one indexed SQL query on the band keys instead.
Every fuzzy candidate is re-checked against the database for the fields, namespace and time asked.

The dictionary shares the store's write lock and backend; :class:`~.store.TripletStore` validates the settings.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..._validation import stored_int, stored_json
from ...models.base import Embedder, embed_documents, embedder_identity, identity_mismatch
from .backend import Cursor, StorageBackend
from .index_persist import (
    SavedPartition,
    assign_new_terms,
    check_saved,
    read_saved,
    read_terms,
    save_missing,
    save_partition,
    vectors_of,
)
from .lsh import RandomHyperplaneLSH
from .term_index import TermIndex

__all__ = ["DEFAULT_BITS", "DEFAULT_TABLES", "FUZZY_INDEXES", "TermDictionary", "check_fuzzy_options"]

logger = logging.getLogger(__name__)

DEFAULT_BITS = 12
DEFAULT_TABLES = 16
#: where fuzzy candidates come from: an in-memory term index, or the LSH band table in the database
FUZZY_INDEXES = ("memory", "database")
#: rows read per query when the in-memory index catches up with the database
_LOAD_PAGE = 50_000


def check_fuzzy_options(probe_radius: object, fuzzy_index: object) -> None:
    """ValueError unless ``probe_radius`` is 0, 1 or 2 and ``fuzzy_index`` one of :data:`FUZZY_INDEXES`."""
    if isinstance(probe_radius, bool) or probe_radius not in (0, 1, 2):
        raise ValueError(f"probe_radius must be 0, 1 or 2, got {probe_radius!r}")
    if fuzzy_index not in FUZZY_INDEXES:
        raise ValueError(f"fuzzy_index must be one of {FUZZY_INDEXES}, got {fuzzy_index!r}")


def _vec_bytes(v: np.ndarray) -> bytes:
    return np.asarray(v, dtype="<f4").tobytes()


def _lsh_config(text: object, where: str) -> dict[str, Any]:
    """The LSH settings stored in ``meta`` (ValueError naming ``where`` when they are damaged)."""
    config = stored_json(text, f"{where}: meta 'lsh'")
    if not isinstance(config, dict) or not all(
        isinstance(config.get(k), int) and not isinstance(config.get(k), bool) for k in ("bits", "tables", "seed")
    ):
        raise ValueError(f"{where}: meta 'lsh' is damaged (bits, tables and seed must be integers)")
    return config


class TermDictionary:
    """Stored terms, their embeddings and the indexes that find a term close to a query.

    Args:
        backend, lock: the store's backend and write lock (every write transaction here takes the lock).
        meta: the ``meta`` table as read when the store opened (dimension and LSH settings, if stored).
        embedder: the term embedder; ``None`` loads the embedded default on first use.
        bits, tables, seed: LSH settings; must match the stored ones when the store has them.
        probe_radius, fuzzy_index, max_candidates, show_progress: see :class:`~.store.TripletStore`.
    """

    def __init__(
        self,
        backend: StorageBackend,
        lock: threading.RLock,
        meta: dict[str, str],
        *,
        embedder: Embedder | None,
        bits: int | None,
        tables: int | None,
        seed: int | None,
        probe_radius: int,
        fuzzy_index: str,
        max_candidates: int,
        show_progress: bool,
    ) -> None:
        self.backend = backend
        self._lock = lock
        self._embedder = embedder
        self.probe_radius = probe_radius
        self.fuzzy_index = fuzzy_index
        self.max_candidates = max_candidates
        self.show_progress = show_progress
        #: the in-memory term index (``None`` until the first fuzzy lookup, and after :meth:`drop_index`)
        self.index: TermIndex | None = None
        self._index_lock = threading.Lock()
        # the saved partition (see index_persist): the one last read or written here (writers assign new terms
        # with its centroids), the centroid array of the in-memory index that is saved (or was offered for
        # saving), whether the saved one failed its checks, and terms restored without a saved partition
        self._saved: SavedPartition | None = None
        self._synced_cent: np.ndarray | None = None
        self._force_save = False
        self._missing: tuple[int, np.ndarray, np.ndarray] | None = None
        #: TermIndex keyword arguments (tests use a small ``train_at`` to partition small stores)
        self.index_options: dict[str, Any] = {}
        self.where = repr(backend)
        stored = _lsh_config(meta["lsh"], self.where) if "lsh" in meta else None
        wanted = {"bits": bits, "tables": tables, "seed": seed}
        if stored is not None:
            clash = {k: (v, stored[k]) for k, v in wanted.items() if v is not None and int(v) != int(stored[k])}
            if clash:
                raise ValueError(
                    "this store was created with different LSH settings "
                    + ", ".join(f"{k}={old} (asked {new})" for k, (new, old) in clash.items())
                    + "; open it without them or with the stored values"
                )
            self.lsh_settings = {k: int(stored[k]) for k in ("bits", "tables", "seed")}
            self.lsh: RandomHyperplaneLSH | None = self._from_config(stored)
        else:
            self.lsh_settings = {
                "bits": DEFAULT_BITS if bits is None else bits,
                "tables": DEFAULT_TABLES if tables is None else tables,
                "seed": 0 if seed is None else seed,
            }
            # validate now rather than at the first write
            RandomHyperplaneLSH(1, probe_radius=min(probe_radius, self.lsh_settings["bits"]), **self.lsh_settings)
            self.lsh = None
        self.dim: int | None = self._stored_dim(meta["dim"]) if "dim" in meta else None
        # the embedder's identity once checked against the one the store records (and whether it is recorded)
        self._identity: dict[str, Any] | None = None
        self._identity_saved = False
        if embedder is not None and "embedder" in meta:  # refuse another model at open, not at the first write
            self.check_embedder()

    def _stored_dim(self, text: object) -> int:
        value = int(text) if isinstance(text, str) and text.isascii() and text.isdigit() else text
        return stored_int(value, f"{self.where}: meta 'dim'", minimum=1)

    def _from_config(self, config: dict[str, Any]) -> RandomHyperplaneLSH:
        try:
            return RandomHyperplaneLSH.from_config(config, probe_radius=self.probe_radius)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{self.where}: meta 'lsh' is damaged ({exc})") from None

    # ------------------------------------------------------------------------------------------ embedding
    @property
    def embedder(self) -> Embedder:
        """The term embedder (the embedded default is loaded on first use)."""
        if self._embedder is None:
            from ...models.local import default_embedder

            self._embedder = default_embedder()
        return self._embedder

    def _identity_problem(self, stored: object, current: dict[str, Any]) -> None:
        """ValueError naming the database when ``stored`` (meta 'embedder') is not ``current``'s identity."""
        saved = stored_json(stored, f"{self.where}: meta 'embedder'")
        try:
            why = identity_mismatch(saved, current)
        except ValueError as exc:
            raise ValueError(f"{self.where}: meta 'embedder' is damaged ({exc})") from None
        if why is not None:
            raise ValueError(
                f"this triplet store ({self.where}) was {why}: open it with the embedder it was built with (same "
                "model and settings)"
            )

    def check_embedder(self) -> dict[str, Any]:
        """The embedder's identity (see :func:`~fragrel_integrations.models.base.embedder_identity`), checked once
        against the one the store records: ValueError naming the database when they differ."""
        if self._identity is None:
            current = embedder_identity(self.embedder)
            with self.backend.read() as cur:
                row = cur.execute("SELECT value FROM meta WHERE name = 'embedder'").fetchone()
            if row is not None:
                self._identity_problem(row[0], current)
                self._identity_saved = True
            self._identity = current
        return self._identity

    def _save_identity(self, cur: Cursor) -> None:
        """In the write transaction storing terms: record the embedder's identity if the store has none (a new
        store, or one made before identities were recorded), and check it against what another writer recorded."""
        if self._identity_saved:
            return
        identity = self.check_embedder()
        cur.execute(
            "INSERT INTO meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
            ("embedder", json.dumps(identity, sort_keys=True)),
        )
        self._identity_problem(
            cur.execute("SELECT value FROM meta WHERE name = 'embedder'").fetchone()[0], identity
        )  # another process may have recorded its embedder first
        self._identity_saved = True

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length float32 embeddings of ``texts``; ValueError if the embedder is not the one the store
        records (model, settings, fingerprint) or its dimension is not the store's."""
        self.check_embedder()
        vectors = embed_documents(self.embedder, list(texts), show_progress=self.show_progress)
        if self.dim is not None and vectors.shape[1] != self.dim:
            raise ValueError(
                f"the embedder returns {vectors.shape[1]}-dimensional vectors but this store holds {self.dim}-"
                "dimensional ones; use the embedder the store was built with"
            )
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return (vectors / norms).astype(np.float32)

    def _ensure_lsh(self, cur: Cursor, dim: int) -> RandomHyperplaneLSH:
        if self.lsh is None:
            lsh = RandomHyperplaneLSH(dim, probe_radius=self.probe_radius, **self.lsh_settings)
            cur.execute(
                "INSERT INTO meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
                ("lsh", json.dumps(lsh.config())),
            )
            cur.execute("INSERT INTO meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING", ("dim", str(dim)))
            stored = {n: v for n, v in cur.execute("SELECT name, value FROM meta").fetchall()}
            config = _lsh_config(stored["lsh"], self.where)  # another process may have won the race: use its settings
            self.lsh = self._from_config(config)
            self.dim = self._stored_dim(stored["dim"])
            if self.dim != dim:
                raise ValueError(f"this store holds {self.dim}-dimensional term vectors, the embedder gives {dim}")
        return self.lsh

    def _refresh_meta(self, cur: Cursor) -> None:
        """Pick up the dimension and LSH settings another process stored after this store was opened."""
        if self.lsh is not None:
            return
        meta = {n: v for n, v in cur.execute("SELECT name, value FROM meta WHERE name IN ('lsh', 'dim')").fetchall()}
        if "lsh" in meta and "dim" in meta:
            self.lsh = self._from_config(_lsh_config(meta["lsh"], self.where))
            self.dim = self._stored_dim(meta["dim"])

    # ------------------------------------------------------------------------------------------ terms
    def ids(self, norms: Sequence[str], cur: Cursor | None = None) -> dict[str, int]:
        """The ids of the stored terms among the normalised ``norms`` (read in ``cur``, or a new read)."""
        out: dict[str, int] = {}

        def run(c: Cursor) -> None:
            for chunk in self.backend.iter_chunks(norms):
                marks = ",".join("?" * len(chunk))
                for tid, norm in c.execute(f"SELECT id, norm FROM terms WHERE norm IN ({marks})", tuple(chunk)):
                    out[norm] = int(tid)

        if cur is not None:
            run(cur)
        else:
            with self.backend.read() as c:
                run(c)
        return out

    def insert(self, cur: Cursor, norms: Sequence[str], texts: Sequence[str], vectors: np.ndarray) -> dict[str, int]:
        """Insert terms and their band rows; return the norms inserted with their ids. Runs under the write lock,
        so the set of new terms is exact."""
        lsh = self._ensure_lsh(cur, vectors.shape[1])
        self._save_identity(cur)
        present = self.ids(list(norms), cur)  # another writer may have stored some since we looked
        keep = [i for i, n in enumerate(norms) if n not in present]
        if not keep:
            return {}
        new_norms = [norms[i] for i in keep]
        cur.executemany(
            "INSERT INTO terms (norm, text, vector) VALUES (?, ?, ?)",
            [(norms[i], texts[i], _vec_bytes(vectors[i])) for i in keep],
        )
        ids = self.ids(new_norms, cur)
        # the saved term-index partition learns the new terms in this same transaction (never ahead of the data)
        self._saved = assign_new_terms(
            cur,
            np.fromiter((ids[n] for n in new_norms), dtype=np.int64, count=len(new_norms)),
            vectors[keep],
            self._saved,
        )
        keys = lsh.band_keys(vectors[keep])
        cur.executemany(
            "INSERT INTO term_lsh (band, term_id) VALUES (?, ?)",
            [(int(k), ids[n]) for n, row_keys in zip(new_norms, keys, strict=True) for k in row_keys],
        )
        return {n: ids[n] for n in new_norms}

    def count(self) -> int:
        """Number of distinct stored terms."""
        with self.backend.read() as cur:
            return int(cur.execute("SELECT COUNT(*) FROM terms").fetchone()[0])

    # ------------------------------------------------------------------------------------------ term index
    def term_index(self, cur: Cursor, top: int | bool | None = False) -> TermIndex | None:
        """The in-memory term index, brought up to the terms committed in ``cur``'s snapshot. Built on first use
        from the partition saved in the database when it is sound (no k-means; see :mod:`.index_persist`), else
        from the vectors; later calls read only the terms with ids above the highest one held (one indexed
        ``MAX(id)`` check, skipped when the caller passes ``top``, the result of that query in ``cur``'s snapshot).
        What needs saving is saved by :meth:`save_index`, after the read transaction."""
        self._refresh_meta(cur)
        if self.dim is None:
            return None
        with self._index_lock:
            if self.index is None:
                self.index = self._load_index(cur, self.dim)
            index = self.index
            if top is False:
                top = cur.execute("SELECT MAX(id) FROM terms").fetchone()[0]
            while top is not None and int(top) > index.max_id:
                rows = cur.execute(
                    f"SELECT id, vector FROM terms WHERE id > ? ORDER BY id LIMIT {_LOAD_PAGE}", (index.max_id,)
                ).fetchall()
                if not rows:
                    break
                ids = np.fromiter((int(r[0]) for r in rows), dtype=np.int64, count=len(rows))
                vecs = vectors_of(rows, index.dim, self.where)
                index.add(ids, vecs, rebalance=False)  # partition once, after the last page
            index.rebalance()
        return index

    def _load_index(self, cur: Cursor, dim: int) -> TermIndex:
        """A new index holding every term of ``cur``'s snapshot: restored from the saved partition if it passes
        :func:`~.index_persist.check_saved`, else partitioned afresh (and marked for saving)."""
        index = TermIndex(dim, **self.index_options)
        ids, vecs, parts = read_terms(cur, dim, where=self.where)
        saved, why = read_saved(cur, dim)
        if saved is not None:
            why = check_saved(cur, saved, vecs, parts)
        if saved is not None and why is None:
            unassigned = parts < 0
            parts = index.restore(saved.mean, saved.centroids, saved.trained_n, ids, vecs, parts)
            self._saved, self._synced_cent, self._force_save = saved, index.partition_state()[1], False  # type: ignore[index]
            # terms stored without a partition (by a writer that did not assign): saved after this read
            self._missing = (saved.generation, ids[unassigned], parts[unassigned]) if unassigned.any() else None
            return index
        if why is not None:
            logger.warning(
                "%s: %s: not trusted; re-partitioning the term index from the stored vectors", self.where, why
            )
        self._force_save = why is not None
        self._saved = self._synced_cent = None
        index.add(ids, vecs, rebalance=False)
        return index

    def save_index(self) -> None:
        """Save what the in-memory index knows and the database does not: a new partition (after a build or a
        re-partition) or the partitions of terms stored without one. Runs in its own write transaction, after
        the read or write that found the need; a failure is logged, never raised (the saved partition only
        speeds up later opens, and an unsound one is detected and rebuilt)."""
        index = self.index
        if index is None:
            return
        state = index.partition_state()
        if (state is None or state[1] is self._synced_cent) and self._missing is None:
            return
        try:
            with self._lock, self.backend.write() as cur, self._index_lock:
                state = index.partition_state()
                missing, self._missing = self._missing, None  # one attempt per need: a failure is not retried
                if state is not None and state[1] is not self._synced_cent:
                    self._synced_cent, force, self._force_save = state[1], self._force_save, False
                    saved = save_partition(cur, index, force=force)
                    if saved is not None:
                        self._saved = saved
                elif missing is not None:
                    save_missing(cur, *missing)
        except Exception as exc:  # a cache: the data is untouched, and the next open re-checks the saved state
            logger.warning("could not save the term index partition (%s: %s)", type(exc).__name__, exc)

    def committed(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """After this process's commit: add its new terms if they directly follow what the index holds (else the
        next lookup reads them, with any other process's, from the database)."""
        with self._index_lock:
            if self.index is not None and ids.size and int(ids.min()) == self.index.max_id + 1:
                order = np.argsort(ids)
                self.index.add(ids[order], vectors[order])

    def drop_index(self) -> None:
        """Forget the in-memory index (the store is closing)."""
        with self._index_lock:
            self.index = None

    # ------------------------------------------------------------------------------------------ fuzzy lookup
    def fuzzy(
        self,
        cur: Cursor,
        query: str,
        fields: Sequence[str],
        scope: str,
        scope_params: list[Any],
        threshold: float,
        k: int,
        *,
        top: int | bool | None = False,
    ) -> list[tuple[int, str, float]]:
        """Up to ``k`` stored terms with cosine >= ``threshold`` to ``query``, used in one of ``fields`` within
        the scope, best first: ``(term id, text, cosine)``. ``top``: the highest term id in ``cur``'s snapshot
        if the caller read it (``False``: not read)."""
        self._refresh_meta(cur)
        if self.lsh is None:  # no term stored yet
            return []
        if self.fuzzy_index == "database":
            qv = self.embed([query])[0]
            return self._recheck(cur, qv, self._lsh_candidates(cur, qv, fields, scope, scope_params), threshold, k)
        index = self.term_index(cur, top)
        if index is None or not len(index):
            return []
        qv = self.embed([query])[0]
        ids, sims = index.search(qv, threshold)
        used = " OR ".join(f"EXISTS (SELECT 1 FROM triplets r WHERE r.{f}_id = t.id AND {scope})" for f in fields)
        room = self.backend.max_params - len(scope_params) * len(fields)
        out: list[tuple[int, str, float]] = []
        pos, step = 0, max(8, 4 * k)
        while pos < ids.size and len(out) < k:  # best first; candidates outside the field/scope are skipped
            chunk = [int(i) for i in ids[pos : pos + min(step, room)]]
            rows = cur.execute(
                f"SELECT t.id, t.text FROM terms t WHERE t.id IN ({','.join('?' * len(chunk))}) AND ({used})",
                (*chunk, *(scope_params * len(fields))),
            ).fetchall()
            texts = {int(r[0]): str(r[1]) for r in rows}
            out += [(tid, texts[tid], float(sims[pos + j])) for j, tid in enumerate(chunk) if tid in texts]
            pos += len(chunk)
            step *= 4
        return out[:k]

    def _lsh_candidates(
        self, cur: Cursor, qv: np.ndarray, fields: Sequence[str], scope: str, scope_params: list[Any]
    ) -> list[int]:
        """Stored terms sharing a probed band key with ``qv`` and used in one of ``fields`` within the scope,
        most colliding first, at most ``max_candidates`` (one indexed query per chunk of band keys)."""
        if self.lsh is None:
            return []
        used = " OR ".join(f"EXISTS (SELECT 1 FROM triplets r WHERE r.{f}_id = l.term_id AND {scope})" for f in fields)
        params_per_chunk = len(scope_params) * len(fields)
        probes = [int(x) for x in self.lsh.probe_keys(qv)]
        out: dict[int, int] = {}
        for chunk in self.backend.iter_chunks(probes, self.backend.max_params - params_per_chunk - 2):
            marks = ",".join("?" * len(chunk))
            rows = cur.execute(
                f"SELECT l.term_id, COUNT(*) FROM term_lsh l WHERE l.band IN ({marks}) AND ({used}) GROUP BY l.term_id",
                (*chunk, *(scope_params * len(fields))),
            ).fetchall()
            for tid, hits in rows:
                if isinstance(tid, int) and not isinstance(tid, bool):  # a damaged band row names no term: skipped
                    out[tid] = out.get(tid, 0) + int(hits)
        ranked = sorted(out, key=lambda t: (-out[t], t))
        return ranked[: self.max_candidates]

    def _recheck(
        self, cur: Cursor, qv: np.ndarray, term_ids: list[int], threshold: float, k: int
    ) -> list[tuple[int, str, float]]:
        scored: list[tuple[int, str, float]] = []
        for chunk in self.backend.iter_chunks(term_ids):
            marks = ",".join("?" * len(chunk))
            rows = cur.execute(f"SELECT id, vector, text FROM terms WHERE id IN ({marks})", tuple(chunk)).fetchall()
            if not rows:
                continue
            sims = vectors_of(rows, qv.shape[0], self.where) @ qv
            scored += [
                (int(r[0]), str(r[2]), float(sim)) for r, sim in zip(rows, sims, strict=True) if sim >= threshold
            ]
        scored.sort(key=lambda x: (-x[2], x[0]))
        return scored[:k]
