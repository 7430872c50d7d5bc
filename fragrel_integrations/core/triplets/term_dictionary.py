"""The triplet store's term dictionary: each distinct term once, with its embedding and id.

:class:`TermDictionary` owns the ``terms`` table, the dimension kept in ``meta``, the embedder, and the in-memory
:class:`~.term_index.TermIndex` that finds fuzzy candidates: built from the stored embeddings on the first fuzzy
lookup and fed only committed terms. Every fuzzy candidate is re-checked against the database for the fields,
namespace and time asked.

The dictionary shares the store's write lock and backend; :class:`~.store.TripletStore` validates the settings.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any

import numpy as np

from ..._validation import stored_int, stored_json, stored_vectors
from ...models.embedder import Embedder, embed_documents
from ..embedder_identity import embedder_identity, identity_mismatch
from .backend import Cursor, StorageBackend
from .term_index import INDEX_KINDS, TermIndex, check_kind

__all__ = ["FUZZY_INDEXES", "TermDictionary"]

#: the kinds of in-memory term index (the store's ``fuzzy_index``)
FUZZY_INDEXES = INDEX_KINDS
#: rows read per query when the in-memory index catches up with the database
_LOAD_PAGE = 50_000
#: a scope condition on the triplets alias ``r`` and its parameters (:func:`.rows.scope`)
_Scope = tuple[str, list[Any]]


class TermDictionary:
    """Stored terms, their embeddings and the index that finds a term close to a query.

    Args:
        backend, lock: the store's backend and write lock (every write transaction here takes the lock).
        meta: the ``meta`` table as read when the store opened (dimension and embedder identity, if stored).
        embedder: the term embedder; ``None`` loads the embedded default on first use.
        fuzzy_index, show_progress: see :class:`~.store.TripletStore`.
    """

    def __init__(
        self,
        backend: StorageBackend,
        lock: threading.RLock,
        meta: dict[str, str],
        *,
        embedder: Embedder | None,
        fuzzy_index: str,
        show_progress: bool,
    ) -> None:
        self.backend = backend
        self._lock = lock
        self._embedder = embedder
        self._fuzzy_index = check_kind(fuzzy_index)
        self.show_progress = show_progress
        #: the in-memory term index (``None`` until the first fuzzy lookup, and after :meth:`drop_index`)
        self.index: TermIndex | None = None
        self._index_lock = threading.Lock()
        #: TermIndex keyword arguments (tests use a small ``train_at`` to build a faiss index on small stores)
        self.index_options: dict[str, Any] = {}
        self.where = repr(backend)
        self.dim: int | None = self._stored_dim(meta["dim"]) if "dim" in meta else None
        # the embedder's identity once checked against the one the store records (and whether it is recorded)
        self._identity: dict[str, Any] | None = None
        self._identity_saved = False
        if embedder is not None and "embedder" in meta:  # refuse another model at open, not at the first write
            self.check_embedder()

    @property
    def fuzzy_index(self) -> str:
        """The kind of term index (see :data:`FUZZY_INDEXES`); setting another kind rebuilds it on the next lookup."""
        return self._fuzzy_index

    @fuzzy_index.setter
    def fuzzy_index(self, kind: str) -> None:
        kind = check_kind(kind)
        if kind != self._fuzzy_index:
            self._fuzzy_index = kind
            self.drop_index()

    def _stored_dim(self, text: object) -> int:
        value = int(text) if isinstance(text, str) and text.isascii() and text.isdigit() else text
        return stored_int(value, f"{self.where}: meta 'dim'", minimum=1)

    # ------------------------------------------------------------------------------------------ embedding
    @property
    def embedder(self) -> Embedder:
        """The term embedder (the embedded default is loaded on first use)."""
        if self._embedder is None:
            from ...models.local import default_embedder

            self._embedder = default_embedder()
        return self._embedder

    @staticmethod
    def _meta(cur: Cursor, name: str, default: str | None = None) -> Any:
        """The ``meta`` value ``name`` (None if absent), first storing ``default`` if given and none is stored
        (another process may have stored one first)."""
        if default is not None:
            cur.execute("INSERT INTO meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING", (name, default))
        row = cur.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return None if row is None else row[0]

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
        """The embedder's identity (see :func:`~.embedder_identity.embedder_identity`), checked once
        against the one the store records: ValueError naming the database when they differ."""
        if self._identity is None:
            current = embedder_identity(self.embedder)
            with self.backend.read() as cur:
                stored = self._meta(cur, "embedder")
            if stored is not None:
                self._identity_problem(stored, current)
                self._identity_saved = True
            self._identity = current
        return self._identity

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

    # ------------------------------------------------------------------------------------------ terms
    def ids(self, norms: Sequence[str], cur: Cursor | None = None) -> dict[str, int]:
        """The ids of the stored terms among the normalised ``norms`` (read in ``cur``, or a new read)."""
        with nullcontext(cur) if cur is not None else self.backend.read() as c:
            found = self.backend.each_chunk(c, "SELECT id, norm FROM terms WHERE norm IN ({marks})", norms)
            return {norm: int(tid) for result in found for tid, norm in result.fetchall()}

    def insert(self, cur: Cursor, norms: Sequence[str], texts: Sequence[str], vectors: np.ndarray) -> dict[str, int]:
        """Insert terms; return the norms inserted with their ids. Runs under the write lock, so the set of new
        terms is exact. The first terms record the dimension, and the embedder's identity where the store has none
        (a new store, or one made before identities were recorded); either may have been recorded by another
        process first, so both are checked against what is stored."""
        dim = vectors.shape[1]
        if self.dim is None:
            self.dim = self._stored_dim(self._meta(cur, "dim", str(dim)))
        if self.dim != dim:
            raise ValueError(f"this store holds {self.dim}-dimensional term vectors, the embedder gives {dim}")
        if not self._identity_saved:
            identity = self.check_embedder()
            self._identity_problem(self._meta(cur, "embedder", json.dumps(identity, sort_keys=True)), identity)
            self._identity_saved = True
        present = self.ids(list(norms), cur)  # another writer may have stored some since we looked
        keep = [i for i, n in enumerate(norms) if n not in present]
        if not keep:
            return {}
        cur.executemany(
            "INSERT INTO terms (norm, text, vector) VALUES (?, ?, ?)",
            [(norms[i], texts[i], np.asarray(vectors[i], dtype="<f4").tobytes()) for i in keep],
        )
        return self.ids([norms[i] for i in keep], cur)

    def count(self) -> int:
        """Number of distinct stored terms."""
        with self.backend.read() as cur:
            return int(cur.execute("SELECT COUNT(*) FROM terms").fetchone()[0])

    # ------------------------------------------------------------------------------------------ term index
    def term_index(self, cur: Cursor, top: int | bool | None = False) -> TermIndex | None:
        """The in-memory term index, brought up to the terms committed in ``cur``'s snapshot. Built on first use
        from the stored embeddings; later calls read only the terms with ids above the highest one held (one
        indexed ``MAX(id)`` check, skipped when the caller passes ``top``, the result of that query in ``cur``'s
        snapshot)."""
        if self.dim is None:  # another process may have stored the first terms since this store opened
            stored = self._meta(cur, "dim")
            if stored is None:
                return None
            self.dim = self._stored_dim(stored)
        with self._index_lock:
            if self.index is None:
                self.index = TermIndex(self.dim, kind=self._fuzzy_index, **self.index_options)
            index = self.index
            if top is False:
                top = cur.execute("SELECT MAX(id) FROM terms").fetchone()[0]
            if top is not None and int(top) - index.max_id > _LOAD_PAGE:  # a bulk load: one allocation
                index.reserve(int(top) - index.max_id)
            while top is not None and int(top) > index.max_id:
                rows = cur.execute(
                    f"SELECT id, vector FROM terms WHERE id > ? ORDER BY id LIMIT {_LOAD_PAGE}", (index.max_id,)
                ).fetchall()
                if not rows:
                    break
                names = [f"id {r[0]}" for r in rows]
                vectors = stored_vectors([r[1] for r in rows], index.dim, f"{self.where}: terms.vector", names=names)
                index.add(np.array([int(r[0]) for r in rows]), vectors, rebalance=False)  # train once, at the end
            index.rebalance()
        return index

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
        self, cur: Cursor, query: str, fields: Sequence[str], scope: _Scope, threshold: float, k: int, top: Any = False
    ) -> list[tuple[int, str, float]]:
        """Up to ``k`` stored terms with cosine >= ``threshold`` to ``query``, used in one of ``fields`` within
        the ``scope`` (SQL and parameters), best first: ``(term id, text, cosine)``. ``top``: the highest term id
        in ``cur``'s snapshot if the caller read it (``False``: not read)."""
        where, scope_params = scope
        index = self.term_index(cur, top)
        if index is None or not len(index):
            return []
        ids, sims = index.search(self.embed([query])[0], threshold)
        used = " OR ".join(f"EXISTS (SELECT 1 FROM triplets r WHERE r.{f}_id = t.id AND {where})" for f in fields)
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
