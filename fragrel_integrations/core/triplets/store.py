"""TripletStore: RET-LLM's read-write triplet memory over a pluggable SQL backend.

Reading follows the paper: for each given term, an exact match (after :func:`normalize_term`) among the terms
stored in that field first; if there is none, the stored term closest to it by the exact cosine of the term
embeddings, kept only if that cosine reaches ``threshold``. No alternative -> empty result. Every triplet
matching all given fields is returned.

Fuzzy candidates come from an in-memory :class:`~.term_index.TermIndex` beside the database (the default,
``fuzzy_index="memory"``): loaded from the ``terms`` table on the first fuzzy lookup, fed only committed terms
(after this process's own commits, and before each fuzzy lookup every term another process or thread has
committed since, read by id), and re-checked against the database for the field, namespace and time asked.
Its partition (centroids, each term's partition, a change counter) is saved in the database itself
(:mod:`.index_persist`): every write assigns its new terms in its own transaction, so a later open restores
the index without k-means (1.2 s instead of 12 s at 100,000 terms on SQLite, 18 s instead of 90 s at
1,000,000), and a saved partition that is stale or damaged is detected, not trusted, and rebuilt.
``fuzzy_index="database"`` keeps the paper's LSH lookup as one indexed SQL query on band keys instead.

Facts that change: a relation marked single-valued (per call or for the whole store) allows one object per
subject at a time. Writing a new object closes the old triplet's validity interval at the new fact's
``valid_from``; the old fact stays readable with ``as_of``. Updates by key keep the previous version the same way.

>>> from fragrel_integrations.testing import HashingEmbedder
>>> store = TripletStore(":memory:", embedder=HashingEmbedder(dim=64), single_valued=["president"])
>>> _ = store.write(("United States", "president", "Barack Obama"), valid_from=2009)
>>> _ = store.write(("United States", "president", "Joe Biden"), valid_from=2021)
>>> [r.t3 for r in store.read("United States", "president")]
['Joe Biden']
>>> [r.t3 for r in store.read("United States", "president", as_of=2015)]
['Barack Obama']
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from ...models.base import Embedder, embed_documents
from .backend import SCHEMA_VERSION, Cursor, StorageBackend
from .index_persist import (
    SavedPartition,
    assign_new_terms,
    check_saved,
    read_saved,
    read_terms,
    save_missing,
    save_partition,
)
from .lsh import RandomHyperplaneLSH
from .sqlite_backend import SQLiteBackend
from .term_index import TermIndex
from .types import (
    FIELDS,
    Namespace,
    TermMatch,
    Triplet,
    TripletRecord,
    decode_namespace,
    encode_namespace,
    namespace_tuple,
    normalize_term,
    to_timestamp,
)

__all__ = [
    "DEFAULT_BITS",
    "DEFAULT_TABLES",
    "FUZZY_INDEXES",
    "NodeRecord",
    "TripletStore",
    "TripletWrite",
    "build_store",
]

logger = logging.getLogger(__name__)

DEFAULT_BITS = 12
DEFAULT_TABLES = 16
#: where fuzzy candidates come from: an in-memory term index, or the LSH band table in the database
FUZZY_INDEXES = ("memory", "database")
#: rows read per query when the in-memory index catches up with the database
_LOAD_PAGE = 50_000
Time = float | int | datetime | None
TripletLike = Triplet | Sequence[str] | Mapping[str, Any]

_ROW_COLUMNS = "r.id, r.key, r.namespace, r.t1, r.t2, r.t3, r.payload, r.valid_from, r.valid_to, r.created_at"


@dataclass(frozen=True, slots=True)
class TripletWrite:
    """One write for :meth:`TripletStore.write_many` (``None`` fields take the call's defaults)."""

    triplet: TripletLike
    key: str | None = None
    namespace: str | Sequence[str] | None = None
    payload: Mapping[str, Any] | None = None
    valid_from: Time = None
    valid_to: Time = None
    single_valued: bool | None = None


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """A graph node's attributes (what a property-graph view stores next to the triplets)."""

    id: str
    label: str
    kind: str
    text: str
    properties: Mapping[str, Any]
    namespace: Namespace = ()


def _vec_bytes(v: np.ndarray) -> bytes:
    return np.asarray(v, dtype="<f4").tobytes()


def _bytes_vec(b: bytes | memoryview) -> np.ndarray:
    return np.frombuffer(bytes(b), dtype="<f4")


def _dump_payload(payload: Mapping[str, Any] | None) -> str:
    if payload is None:
        return "{}"
    if not isinstance(payload, Mapping):
        raise TypeError(f"payload must be a mapping (JSON object), got {type(payload).__name__}")
    try:
        return json.dumps(dict(payload), sort_keys=True, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"payload must be JSON-serialisable (str keys, finite numbers): {exc}") from exc


def _check_unit(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not -1.0 <= float(value) <= 1.0:
        raise ValueError(f"{name} must be a cosine in [-1, 1], got {value!r}")
    return float(value)


def _check_count(value: object, name: str, *, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return value


def _open_backend(backend: StorageBackend | str | Path) -> StorageBackend:
    if isinstance(backend, StorageBackend):
        return backend
    if isinstance(backend, str) and backend.startswith(("postgresql://", "postgres://")):
        from .postgres_backend import PostgresBackend

        return PostgresBackend(backend)
    if isinstance(backend, str | Path):
        return SQLiteBackend(backend)
    raise TypeError(
        f"backend must be a StorageBackend, a SQLite path or a postgresql:// URL, got {type(backend).__name__}"
    )


class TripletStore:
    """RET-LLM's triplet memory: write, read with one or two (or three) fields given, update, delete.

    Args:
        backend: a :class:`StorageBackend`, a SQLite file path (``":memory:"`` default) or a
            ``postgresql://`` URL (needs the ``[postgres]`` extra).
        embedder: term embedder (Embedder protocol); ``None`` = the embedded all-MiniLM-L6-v2, loaded on the
            first write or fuzzy read. One store must always use embedders of the same dimension.
        bits, tables, seed: LSH settings (see :class:`RandomHyperplaneLSH`). Fixed when the first term is
            stored and saved in the database; reopening with different values raises ValueError.
        probe_radius: multi-probe radius at query time (0 or 1 or 2; ``fuzzy_index="database"`` only); may
            differ between opens.
        threshold: minimum exact cosine for a fuzzy alternative (default 0.7).
        fuzzy_k: how many alternative terms a fuzzy lookup may use per field (the paper uses one).
        max_candidates: LSH candidates re-checked per lookup at most (those colliding in the most tables;
            ``fuzzy_index="database"`` only: the in-memory index re-checks every candidate it scans).
        single_valued: relations that hold one object per subject at a time (saved in the database,
            so later opens keep them; add more with :meth:`mark_single_valued`).
        fuzzy_index: ``"memory"`` (default): fuzzy candidates from an in-memory term index kept in step with
            the database (about 1.25 x 4 x dim bytes per stored term); ``"database"``: the LSH band table,
            one indexed SQL query per lookup (no memory, slower, lower recall). The band table is written
            either way, so both read the same store.

    All methods are thread-safe; writes from several processes are serialised by the backend.
    """

    def __init__(
        self,
        backend: StorageBackend | str | Path = ":memory:",
        *,
        embedder: Embedder | None = None,
        bits: int | None = None,
        tables: int | None = None,
        seed: int | None = None,
        probe_radius: int = 1,
        threshold: float = 0.7,
        fuzzy_k: int = 1,
        max_candidates: int = 2000,
        single_valued: Iterable[str] = (),
        show_progress: bool = False,
        fuzzy_index: str = "memory",
    ) -> None:
        if embedder is not None and not isinstance(embedder, Embedder):
            raise TypeError(
                f"embedder must have embed_documents(texts) and embed_query(text), got {type(embedder).__name__}"
            )
        self.threshold = _check_unit(threshold, "threshold")
        self.fuzzy_k = _check_count(fuzzy_k, "fuzzy_k")
        self.max_candidates = _check_count(max_candidates, "max_candidates")
        if isinstance(probe_radius, bool) or probe_radius not in (0, 1, 2):
            raise ValueError(f"probe_radius must be 0, 1 or 2, got {probe_radius!r}")
        self.probe_radius = probe_radius
        if fuzzy_index not in FUZZY_INDEXES:
            raise ValueError(f"fuzzy_index must be one of {FUZZY_INDEXES}, got {fuzzy_index!r}")
        self.fuzzy_index = fuzzy_index
        self._index: TermIndex | None = None
        self._index_lock = threading.Lock()
        # the saved partition (see index_persist): the one last read or written here (writers assign new terms
        # with its centroids), the centroid array of the in-memory index that is saved (or was offered for
        # saving), whether the saved one failed its checks, and terms restored without a saved partition
        self._saved: SavedPartition | None = None
        self._synced_cent: np.ndarray | None = None
        self._force_save = False
        self._missing: tuple[int, np.ndarray, np.ndarray] | None = None
        #: TermIndex keyword arguments (tests use a small ``train_at`` to partition small stores)
        self._index_options: dict[str, Any] = {}
        self.show_progress = bool(show_progress)
        self._embedder = embedder
        self._lock = threading.RLock()
        self.backend = _open_backend(backend)
        self.backend.create_schema()
        meta = self._read_meta()
        version = int(meta.get("schema_version", SCHEMA_VERSION))
        if version != SCHEMA_VERSION:
            raise ValueError(f"this database has triplet schema version {version}; this library reads {SCHEMA_VERSION}")
        stored = json.loads(meta["lsh"]) if "lsh" in meta else None
        wanted = {"bits": bits, "tables": tables, "seed": seed}
        if stored is not None:
            clash = {k: (v, stored[k]) for k, v in wanted.items() if v is not None and int(v) != int(stored[k])}
            if clash:
                raise ValueError(
                    "this store was created with different LSH settings "
                    + ", ".join(f"{k}={old} (asked {new})" for k, (new, old) in clash.items())
                    + "; open it without them or with the stored values"
                )
            self._lsh_settings = {k: int(stored[k]) for k in ("bits", "tables", "seed")}
            self._lsh: RandomHyperplaneLSH | None = RandomHyperplaneLSH.from_config(stored, probe_radius=probe_radius)
        else:
            self._lsh_settings = {
                "bits": DEFAULT_BITS if bits is None else bits,
                "tables": DEFAULT_TABLES if tables is None else tables,
                "seed": 0 if seed is None else seed,
            }
            # validate now rather than at the first write
            RandomHyperplaneLSH(1, probe_radius=min(probe_radius, self._lsh_settings["bits"]), **self._lsh_settings)
            self._lsh = None
        self._dim: int | None = int(meta["dim"]) if "dim" in meta else None
        self._single_valued = set(json.loads(meta.get("single_valued", "[]")))
        extra = {normalize_term(r) for r in single_valued}
        if extra - self._single_valued:
            self.mark_single_valued(*extra)
        with self.backend.write() as cur:
            cur.execute(
                "INSERT INTO meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
                ("schema_version", str(SCHEMA_VERSION)),
            )

    # ------------------------------------------------------------------------------------------ settings
    def _read_meta(self) -> dict[str, str]:
        with self.backend.read() as cur:
            return {name: value for name, value in cur.execute("SELECT name, value FROM meta").fetchall()}

    @property
    def embedder(self) -> Embedder:
        """The term embedder (the embedded default is loaded on first use)."""
        if self._embedder is None:
            from ...models.local import default_embedder

            self._embedder = default_embedder()
        return self._embedder

    @property
    def lsh(self) -> RandomHyperplaneLSH | None:
        """The LSH hyperplanes (``None`` until the first term fixes the dimension)."""
        return self._lsh

    @property
    def single_valued(self) -> frozenset[str]:
        """Normalised relations that hold one object per subject at a time."""
        return frozenset(self._single_valued)

    def mark_single_valued(self, *relations: str) -> None:
        """Mark relations single-valued for every later write (saved in the database)."""
        with self._lock:
            new = self._single_valued | {normalize_term(r) for r in relations}
            with self.backend.write() as cur:
                cur.execute(
                    "INSERT INTO meta (name, value) VALUES (?, ?) "
                    "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                    ("single_valued", json.dumps(sorted(new))),
                )
            self._single_valued = new

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        vectors = embed_documents(self.embedder, list(texts), show_progress=self.show_progress)
        if self._dim is not None and vectors.shape[1] != self._dim:
            raise ValueError(
                f"the embedder returns {vectors.shape[1]}-dimensional vectors but this store holds {self._dim}-"
                "dimensional ones; use the embedder the store was built with"
            )
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return (vectors / norms).astype(np.float32)

    def _ensure_lsh(self, cur: Cursor, dim: int) -> RandomHyperplaneLSH:
        if self._lsh is None:
            lsh = RandomHyperplaneLSH(dim, probe_radius=self.probe_radius, **self._lsh_settings)
            cur.execute(
                "INSERT INTO meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
                ("lsh", json.dumps(lsh.config())),
            )
            cur.execute("INSERT INTO meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING", ("dim", str(dim)))
            stored = {n: v for n, v in cur.execute("SELECT name, value FROM meta").fetchall()}
            config = json.loads(stored["lsh"])  # another process may have won the race: use its settings
            self._lsh = RandomHyperplaneLSH.from_config(config, probe_radius=self.probe_radius)
            self._dim = int(stored["dim"])
            if self._dim != dim:
                raise ValueError(f"this store holds {self._dim}-dimensional term vectors, the embedder gives {dim}")
        return self._lsh

    def _refresh_meta(self, cur: Cursor) -> None:
        """Pick up the dimension and LSH settings another process stored after this store was opened."""
        if self._lsh is not None:
            return
        meta = {n: v for n, v in cur.execute("SELECT name, value FROM meta WHERE name IN ('lsh', 'dim')").fetchall()}
        if "lsh" in meta and "dim" in meta:
            self._lsh = RandomHyperplaneLSH.from_config(json.loads(meta["lsh"]), probe_radius=self.probe_radius)
            self._dim = int(meta["dim"])

    # ------------------------------------------------------------------------------------------ term index
    def _term_index(self, cur: Cursor, top: int | bool | None = False) -> TermIndex | None:
        """The in-memory term index, brought up to the terms committed in ``cur``'s snapshot. Built on first use
        from the partition saved in the database when it is sound (no k-means; see :mod:`.index_persist`), else
        from the vectors; later calls read only the terms with ids above the highest one held (one indexed
        ``MAX(id)`` check, skipped when the caller passes ``top``, the result of that query in ``cur``'s snapshot).
        What needs saving is saved by :meth:`_save_index`, after the read transaction."""
        self._refresh_meta(cur)
        if self._dim is None:
            return None
        with self._index_lock:
            if self._index is None:
                self._index = self._load_index(cur, self._dim)
            index = self._index
            if top is False:
                top = cur.execute("SELECT MAX(id) FROM terms").fetchone()[0]
            while top is not None and int(top) > index.max_id:
                rows = cur.execute(
                    f"SELECT id, vector FROM terms WHERE id > ? ORDER BY id LIMIT {_LOAD_PAGE}", (index.max_id,)
                ).fetchall()
                if not rows:
                    break
                ids = np.fromiter((int(r[0]) for r in rows), dtype=np.int64, count=len(rows))
                vecs = np.frombuffer(b"".join(bytes(r[1]) for r in rows), dtype="<f4").reshape(len(rows), -1)
                index.add(ids, vecs, rebalance=False)  # partition once, after the last page
            index.rebalance()
        return index

    def _load_index(self, cur: Cursor, dim: int) -> TermIndex:
        """A new index holding every term of ``cur``'s snapshot: restored from the saved partition if it passes
        :func:`~.index_persist.check_saved`, else partitioned afresh (and marked for saving)."""
        index = TermIndex(dim, **self._index_options)
        ids, vecs, parts = read_terms(cur, dim)
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
            logger.warning("%s: not trusted; re-partitioning the term index from the stored vectors", why)
        self._force_save = why is not None
        self._saved = self._synced_cent = None
        index.add(ids, vecs, rebalance=False)
        return index

    def _save_index(self) -> None:
        """Save what the in-memory index knows and the database does not: a new partition (after a build or a
        re-partition) or the partitions of terms stored without one. Runs in its own write transaction, after
        the read or write that found the need; a failure is logged, never raised (the saved partition only
        speeds up later opens, and an unsound one is detected and rebuilt)."""
        index = self._index
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

    def _index_committed(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """After this process's commit: add its new terms if they directly follow what the index holds (else the
        next lookup reads them, with any other process's, from the database)."""
        with self._index_lock:
            if self._index is not None and ids.size and int(ids.min()) == self._index.max_id + 1:
                order = np.argsort(ids)
                self._index.add(ids[order], vectors[order])

    # ------------------------------------------------------------------------------------------ writing
    def write(
        self,
        triplet: TripletLike,
        *,
        key: str | None = None,
        namespace: str | Sequence[str] | None = None,
        payload: Mapping[str, Any] | None = None,
        valid_from: Time = None,
        valid_to: Time = None,
        single_valued: bool | None = None,
    ) -> TripletRecord:
        """Store one triplet and return its record (see :meth:`write_many` for the rules)."""
        item = TripletWrite(triplet, key, namespace, payload, valid_from, valid_to, single_valued)
        return self.write_many([item])[0]

    def write_many(
        self,
        items: Iterable[TripletWrite | TripletLike],
        *,
        namespace: str | Sequence[str] | None = None,
        single_valued: bool | None = None,
    ) -> list[TripletRecord]:
        """Store many triplets in ONE transaction (all or nothing) and return their records, in order.

        Rules, per item:

        * ``key`` given and a current triplet has it: the same triplet and payload -> returned unchanged;
          otherwise the old version's validity ends at the new ``valid_from`` and the new version takes the key.
        * no key: if the same triplet is already current in the namespace it is returned (no duplicate);
          else a new random key is drawn.
        * single-valued relation (``single_valued=True``, or the relation is marked on the store): other
          objects for the same subject + relation that are valid at ``valid_from`` end there; if a later fact
          exists, the new one ends where that one starts. Nothing is deleted.
        """
        prepared: list[tuple[Triplet, str | None, Namespace, str, float, float | None, bool | None]] = []
        now = time.time()
        for raw in items:
            w = raw if isinstance(raw, TripletWrite) else TripletWrite(raw)
            trip = Triplet.coerce(w.triplet)
            if w.key is not None and (not isinstance(w.key, str) or not w.key):
                raise ValueError(f"key must be a non-empty string or None, got {w.key!r}")
            ns = namespace_tuple(w.namespace if w.namespace is not None else namespace)
            start = to_timestamp(w.valid_from, name="valid_from")
            end = to_timestamp(w.valid_to, name="valid_to")
            start = now if start is None else start
            if end is not None and end <= start:
                raise ValueError(f"valid_to ({end}) must be after valid_from ({start})")
            sv = w.single_valued if w.single_valued is not None else single_valued
            prepared.append((trip, w.key, ns, _dump_payload(w.payload), start, end, sv))
        if not prepared:
            return []
        # embed the terms the store does not know yet, outside the write transaction
        norms: dict[str, str] = {}
        for trip, *_ in prepared:
            for term in trip:
                norms.setdefault(normalize_term(term), term)
        known = self._term_ids(list(norms))
        missing = [n for n in norms if n not in known]
        vectors = self._embed([norms[n] for n in missing]) if missing else None
        with self._lock:
            with self.backend.write() as cur:
                fresh: dict[str, int] = {}
                if vectors is not None:
                    fresh = self._insert_terms(cur, missing, [norms[n] for n in missing], vectors)
                ids = self._term_ids(list(norms), cur)
                out = [self._write_one(cur, ids, *p, now=now, fresh=set(fresh)) for p in prepared]
            if fresh and vectors is not None:  # committed: only now may the in-memory index learn the new terms
                row = {n: i for i, n in enumerate(missing)}
                self._index_committed(
                    np.fromiter(fresh.values(), dtype=np.int64, count=len(fresh)),
                    vectors[[row[n] for n in fresh]],
                )
        self._save_index()
        return out

    def _term_ids(self, norms: Sequence[str], cur: Cursor | None = None) -> dict[str, int]:
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

    def _insert_terms(
        self, cur: Cursor, norms: Sequence[str], texts: Sequence[str], vectors: np.ndarray
    ) -> dict[str, int]:
        """Insert terms and their band rows; return the norms inserted with their ids. Runs under the write lock,
        so the set of new terms is exact."""
        lsh = self._ensure_lsh(cur, vectors.shape[1])
        present = self._term_ids(list(norms), cur)  # another writer may have stored some since we looked
        keep = [i for i, n in enumerate(norms) if n not in present]
        if not keep:
            return {}
        new_norms = [norms[i] for i in keep]
        cur.executemany(
            "INSERT INTO terms (norm, text, vector) VALUES (?, ?, ?)",
            [(norms[i], texts[i], _vec_bytes(vectors[i])) for i in keep],
        )
        ids = self._term_ids(new_norms, cur)
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

    def _write_one(
        self,
        cur: Cursor,
        ids: dict[str, int],
        trip: Triplet,
        key: str | None,
        ns: Namespace,
        payload: str,
        start: float,
        end: float | None,
        single_valued: bool | None,
        *,
        now: float,
        fresh: set[str] = frozenset(),  # type: ignore[assignment]
    ) -> TripletRecord:
        enc = encode_namespace(ns)
        n1, n2, n3 = (normalize_term(t) for t in trip)
        t1_id, t2_id, t3_id = ids[n1], ids[n2], ids[n3]
        # a term first stored in this transaction is in no earlier triplet: skip the lookups that cannot match
        new_pair = n1 in fresh or n2 in fresh
        if key is not None:
            old = cur.execute(
                f"SELECT {_ROW_COLUMNS}, r.t1_id, r.t2_id, r.t3_id FROM triplets r "
                "WHERE r.namespace = ? AND r.key = ? AND r.valid_to IS NULL",
                (enc, key),
            ).fetchone()
            if old is not None:
                if tuple(old[10:13]) == (t1_id, t2_id, t3_id) and old[6] == payload and end is None:
                    return self._record(old)
                cur.execute("UPDATE triplets SET valid_to = ? WHERE id = ?", (max(start, float(old[7])), old[0]))
        elif new_pair or n3 in fresh:
            key = uuid.uuid4().hex
        else:
            same = cur.execute(
                f"SELECT {_ROW_COLUMNS} FROM triplets r WHERE r.namespace = ? AND r.t1_id = ? AND r.t2_id = ? "
                "AND r.t3_id = ? AND r.valid_from <= ? AND (r.valid_to IS NULL OR r.valid_to > ?) "
                "ORDER BY r.id LIMIT 1",
                (enc, t1_id, t2_id, t3_id, start, start),
            ).fetchone()
            if same is not None:
                return self._record(same)
            key = uuid.uuid4().hex
        if single_valued is None:
            single_valued = normalize_term(trip.t2) in self._single_valued
        if single_valued and not new_pair:
            cur.execute(
                "UPDATE triplets SET valid_to = ? WHERE namespace = ? AND t1_id = ? AND t2_id = ? AND t3_id <> ? "
                "AND valid_from <= ? AND (valid_to IS NULL OR valid_to > ?)",
                (start, enc, t1_id, t2_id, t3_id, start, start),
            )
            later = cur.execute(
                "SELECT MIN(valid_from) FROM triplets WHERE namespace = ? AND t1_id = ? AND t2_id = ? "
                "AND t3_id <> ? AND valid_from > ?",
                (enc, t1_id, t2_id, t3_id, start),
            ).fetchone()[0]
            if later is not None and (end is None or float(later) < end):
                end = float(later)
        row = cur.execute(
            "INSERT INTO triplets (namespace, key, t1, t2, t3, t1_id, t2_id, t3_id, payload, valid_from, valid_to, "
            "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (enc, key, trip.t1, trip.t2, trip.t3, t1_id, t2_id, t3_id, payload, start, end, now),
        ).fetchone()
        return TripletRecord(int(row[0]), key, ns, trip, start, end, now, json.loads(payload))

    def update(
        self,
        key: str,
        triplet: TripletLike | None = None,
        *,
        namespace: str | Sequence[str] | None = None,
        payload: Mapping[str, Any] | None = None,
        valid_from: Time = None,
    ) -> TripletRecord:
        """Replace the current triplet (and/or payload) stored under ``key``; the old version keeps its interval.

        Raises KeyError if no current triplet has that key.
        """
        current = self.get(key, namespace=namespace)
        if current is None:
            raise KeyError(f"no current triplet with key {key!r} in namespace {namespace_tuple(namespace)!r}")
        return self.write(
            current.triplet if triplet is None else triplet,
            key=key,
            namespace=namespace,
            payload=current.payload if payload is None else payload,
            valid_from=valid_from,
            single_valued=False,
        )

    def delete(
        self,
        key: str | None = None,
        *,
        triplet: TripletLike | None = None,
        namespace: str | Sequence[str] | None = None,
        hard: bool = False,
        at: Time = None,
    ) -> int:
        """End (or with ``hard=True`` erase) the triplet stored under ``key``, or every current copy of ``triplet``.

        A soft delete closes the validity interval at ``at`` (default now): ``as_of`` queries of earlier times
        still see the fact. A hard delete removes every version for good (use it for erasure requests).
        Returns the number of triplet rows affected; deleting something absent returns 0.
        """
        if (key is None) == (triplet is None):
            raise ValueError("give exactly one of key= or triplet=")
        enc = encode_namespace(namespace_tuple(namespace))
        when = to_timestamp(at, name="at")
        when = time.time() if when is None else when
        with self._lock, self.backend.write() as cur:
            if key is not None:
                where, params = "namespace = ? AND key = ?", [enc, key]
            else:
                trip = Triplet.coerce(triplet)  # type: ignore[arg-type]
                ids = self._term_ids([normalize_term(t) for t in trip], cur)
                if len(ids) < len({normalize_term(t) for t in trip}):
                    return 0
                where = "namespace = ? AND t1_id = ? AND t2_id = ? AND t3_id = ?"
                params = [enc, *(ids[normalize_term(t)] for t in trip)]
            if hard:
                if triplet is not None:
                    keys = [r[0] for r in cur.execute(f"SELECT DISTINCT key FROM triplets WHERE {where}", params)]
                    n = 0
                    for k in keys:
                        n += cur.execute("DELETE FROM triplets WHERE namespace = ? AND key = ?", (enc, k)).rowcount
                    return n
                return cur.execute(f"DELETE FROM triplets WHERE {where}", params).rowcount
            return cur.execute(
                f"UPDATE triplets SET valid_to = (CASE WHEN valid_from > ? THEN valid_from ELSE ? END) "
                f"WHERE {where} AND (valid_to IS NULL OR valid_to > ?)",
                (when, when, *params, when),
            ).rowcount

    # ------------------------------------------------------------------------------------------ reading
    @staticmethod
    def _record(row: Sequence[Any], score: float = 1.0, matches: tuple[TermMatch, ...] = ()) -> TripletRecord:
        return TripletRecord(
            id=int(row[0]),
            key=str(row[1]),
            namespace=decode_namespace(row[2]),
            triplet=Triplet(row[3], row[4], row[5]),
            payload=json.loads(row[6]),
            valid_from=float(row[7]),
            valid_to=None if row[8] is None else float(row[8]),
            created_at=float(row[9]),
            score=score,
            matches=matches,
        )

    @staticmethod
    def _scope(
        namespace: Namespace, prefix: bool, as_of: float | None, *, history: bool = False
    ) -> tuple[str, list[Any]]:
        """SQL condition on alias ``r``: the namespace (or prefix) and the time (current, ``as_of``, or any)."""
        enc = encode_namespace(namespace)
        if not prefix:
            ns_sql, params = "r.namespace = ?", [enc]
        elif namespace:
            ns_sql, params = "substr(r.namespace, 1, CAST(? AS INTEGER)) = ?", [len(enc), enc]
        else:
            ns_sql, params = "1 = 1", []
        if history:
            return ns_sql, params
        if as_of is None:  # current = not ended (facts dated in the past or future count once written)
            return f"{ns_sql} AND (r.valid_to IS NULL OR r.valid_to > ?)", [*params, time.time()]
        return f"{ns_sql} AND r.valid_from <= ? AND (r.valid_to IS NULL OR r.valid_to > ?)", [*params, as_of, as_of]

    def get(
        self, key: str, *, namespace: str | Sequence[str] | None = None, as_of: Time = None
    ) -> TripletRecord | None:
        """The triplet stored under ``key`` (current, or valid at ``as_of``), or None."""
        scope, params = self._scope(namespace_tuple(namespace), False, to_timestamp(as_of, name="as_of"))
        with self.backend.read() as cur:
            row = cur.execute(
                f"SELECT {_ROW_COLUMNS} FROM triplets r WHERE r.key = ? AND {scope} "
                "ORDER BY r.valid_from DESC, r.id DESC",
                (key, *params),
            ).fetchone()
        return None if row is None else self._record(row)

    def get_many(
        self, keys: Sequence[str], *, namespace: str | Sequence[str] | None = None
    ) -> list[TripletRecord | None]:
        """Current records for ``keys`` (``None`` where absent), in order; one query per chunk."""
        scope, params = self._scope(namespace_tuple(namespace), False, None)
        found: dict[str, TripletRecord] = {}
        unique = list(dict.fromkeys(keys))
        with self.backend.read() as cur:
            for chunk in self.backend.iter_chunks(unique, self.backend.max_params - 4):
                marks = ",".join("?" * len(chunk))
                rows = cur.execute(
                    f"SELECT {_ROW_COLUMNS} FROM triplets r WHERE r.key IN ({marks}) AND {scope} ORDER BY r.id",
                    (*chunk, *params),
                ).fetchall()
                for row in rows:
                    found[str(row[1])] = self._record(row)
        return [found.get(k) for k in keys]

    def read(
        self,
        t1: str | None = None,
        t2: str | None = None,
        t3: str | None = None,
        *,
        namespace: str | Sequence[str] | None = None,
        prefix: bool = False,
        as_of: Time = None,
        fuzzy: bool = True,
        threshold: float | None = None,
        fuzzy_k: int | None = None,
    ) -> list[TripletRecord]:
        """All triplets matching the given fields (``None`` or ``""`` = wildcard), oldest first.

        Give one or two fields (the paper's six query shapes) or all three (an existence check). Each given
        term is resolved exactly first, else fuzzily (if ``fuzzy``); a term with no match empties the result.
        ``namespace`` with ``prefix=True`` reads every namespace under it. ``as_of`` reads the facts valid
        at that time instead of the current ones.
        """
        try:
            return self._read(t1, t2, t3, namespace, prefix, as_of, fuzzy, threshold, fuzzy_k)
        finally:
            self._save_index()

    def _read(
        self,
        t1: str | None,
        t2: str | None,
        t3: str | None,
        namespace: str | Sequence[str] | None,
        prefix: bool,
        as_of: Time,
        fuzzy: bool,
        threshold: float | None,
        fuzzy_k: int | None,
    ) -> list[TripletRecord]:
        given = {f: v for f, v in zip(FIELDS, (t1, t2, t3), strict=True) if v is not None and str(v).strip()}
        for f, v in given.items():
            if not isinstance(v, str):
                raise TypeError(f"{f} must be str or None, got {type(v).__name__}")
        if not given:
            raise ValueError("give at least one of t1, t2, t3 (use records() to list everything)")
        thr = self.threshold if threshold is None else _check_unit(threshold, "threshold")
        k = self.fuzzy_k if fuzzy_k is None else _check_count(fuzzy_k, "fuzzy_k")
        ns = namespace_tuple(namespace)
        when = to_timestamp(as_of, name="as_of")
        scope, scope_params = self._scope(ns, prefix, when)
        resolved: dict[str, list[TermMatch]] = {}
        ids: dict[str, dict[int, TermMatch]] = {}
        with self.backend.read() as cur:
            for f, q in given.items():
                found = self._resolve(cur, f, q, scope, scope_params, fuzzy=fuzzy, threshold=thr, k=k)
                if not found:
                    return []
                ids[f] = dict(found)
                resolved[f] = [m for _, m in found]
            where = " AND ".join(f"r.{f}_id IN ({','.join('?' * len(v))})" for f, v in ids.items())
            params = [i for v in ids.values() for i in v]
            rows = cur.execute(
                f"SELECT {_ROW_COLUMNS}, r.t1_id, r.t2_id, r.t3_id FROM triplets r WHERE {where} AND {scope} "
                "ORDER BY r.valid_from, r.id",
                (*params, *scope_params),
            ).fetchall()
        out = []
        for row in rows:
            term_ids = dict(zip(FIELDS, row[10:13], strict=True))
            matches = tuple(ids[f][int(term_ids[f])] for f in given)
            score = min(m.similarity for m in matches)
            out.append(self._record(row, score, matches))
        return out

    def _resolve(
        self,
        cur: Cursor,
        field: str,
        query: str,
        scope: str,
        scope_params: list[Any],
        *,
        fuzzy: bool,
        threshold: float,
        k: int,
    ) -> list[tuple[int, TermMatch]]:
        norm = normalize_term(query)
        # the highest term id rides along (one round trip, not two): the term index catches up to it if needed
        row = cur.execute(
            "SELECT m.top, t.id, t.text FROM (SELECT MAX(id) AS top FROM terms) m LEFT JOIN terms t ON t.norm = ? "
            f"AND EXISTS (SELECT 1 FROM triplets r WHERE r.{field}_id = t.id AND {scope})",
            (norm, *scope_params),
        ).fetchone()
        if row[1] is not None:
            return [(int(row[1]), TermMatch(field, query, row[2], 1.0, True))]
        if not fuzzy:
            return []
        top = None if row[0] is None else int(row[0])
        return [
            (tid, TermMatch(field, query, text, sim, False))
            for tid, text, sim in self._fuzzy_terms(cur, query, (field,), scope, scope_params, threshold, k, top=top)
        ]

    def _fuzzy_terms(
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
        if self._lsh is None:  # no term stored yet
            return []
        if self.fuzzy_index == "database":
            qv = self._embed([query])[0]
            return self._recheck(cur, qv, self._lsh_candidates(cur, qv, fields, scope, scope_params), threshold, k)
        index = self._term_index(cur, top)
        if index is None or not len(index):
            return []
        qv = self._embed([query])[0]
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
        if self._lsh is None:
            return []
        used = " OR ".join(f"EXISTS (SELECT 1 FROM triplets r WHERE r.{f}_id = l.term_id AND {scope})" for f in fields)
        params_per_chunk = len(scope_params) * len(fields)
        probes = [int(x) for x in self._lsh.probe_keys(qv)]
        out: dict[int, int] = {}
        for chunk in self.backend.iter_chunks(probes, self.backend.max_params - params_per_chunk - 2):
            marks = ",".join("?" * len(chunk))
            rows = cur.execute(
                f"SELECT l.term_id, COUNT(*) FROM term_lsh l WHERE l.band IN ({marks}) AND ({used}) GROUP BY l.term_id",
                (*chunk, *(scope_params * len(fields))),
            ).fetchall()
            for tid, hits in rows:
                out[int(tid)] = out.get(int(tid), 0) + int(hits)
        ranked = sorted(out, key=lambda t: (-out[t], t))
        return ranked[: self.max_candidates]

    def _recheck(
        self, cur: Cursor, qv: np.ndarray, term_ids: list[int], threshold: float, k: int
    ) -> list[tuple[int, str, float]]:
        scored: list[tuple[int, str, float]] = []
        for chunk in self.backend.iter_chunks(term_ids):
            marks = ",".join("?" * len(chunk))
            for tid, text, blob in cur.execute(
                f"SELECT id, text, vector FROM terms WHERE id IN ({marks})", tuple(chunk)
            ):
                sim = float(_bytes_vec(blob) @ qv)
                if sim >= threshold:
                    scored.append((int(tid), str(text), sim))
        scored.sort(key=lambda x: (-x[2], x[0]))
        return scored[:k]

    def search(
        self,
        text: str,
        *,
        namespace: str | Sequence[str] | None = None,
        prefix: bool = False,
        as_of: Time = None,
        threshold: float | None = None,
        k: int = 5,
    ) -> list[TripletRecord]:
        """Triplets with any term equal or close to ``text`` (exact term first, else LSH + cosine re-check),
        best score first. The free-text counterpart of :meth:`read`."""
        try:
            return self._search(text, namespace, prefix, as_of, threshold, k)
        finally:
            self._save_index()

    def _search(
        self,
        text: str,
        namespace: str | Sequence[str] | None,
        prefix: bool,
        as_of: Time,
        threshold: float | None,
        k: int,
    ) -> list[TripletRecord]:
        if not isinstance(text, str) or not text.strip():
            raise ValueError("search text must be a non-empty string")
        thr = self.threshold if threshold is None else _check_unit(threshold, "threshold")
        k = _check_count(k, "k")
        ns = namespace_tuple(namespace)
        scope, scope_params = self._scope(ns, prefix, to_timestamp(as_of, name="as_of"))
        with self.backend.read() as cur:
            row = cur.execute("SELECT id, text FROM terms WHERE norm = ?", (normalize_term(text),)).fetchone()
            terms: list[tuple[int, str, float]] = [(int(row[0]), str(row[1]), 1.0)] if row is not None else []
            fuzzy = self._fuzzy_terms(cur, text, FIELDS, scope, scope_params, thr, k)
            terms += [t for t in fuzzy if row is None or t[0] != int(row[0])]
            if not terms:
                return []
            sims = {tid: (txt, sim) for tid, txt, sim in terms}
            marks = ",".join("?" * len(sims))
            rows = cur.execute(
                f"SELECT {_ROW_COLUMNS}, r.t1_id, r.t2_id, r.t3_id FROM triplets r "
                f"WHERE (r.t1_id IN ({marks}) OR r.t2_id IN ({marks}) OR r.t3_id IN ({marks})) AND {scope}",
                (*sims, *sims, *sims, *scope_params),
            ).fetchall()
        out = []
        for row in rows:
            matches = tuple(
                TermMatch(f, text, sims[int(tid)][0], sims[int(tid)][1], sims[int(tid)][1] >= 1.0 - 1e-6)
                for f, tid in zip(FIELDS, row[10:13], strict=True)
                if int(tid) in sims
            )
            out.append(self._record(row, max(m.similarity for m in matches), matches))
        out.sort(key=lambda r: (-r.score, r.id))
        return out[:k]

    def records(
        self,
        *,
        namespace: str | Sequence[str] | None = None,
        prefix: bool = False,
        as_of: Time = None,
        history: bool = False,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[TripletRecord]:
        """Stored triplets in insertion order: current ones, those valid ``as_of``, or every version (``history``)."""
        scope, params = self._scope(
            namespace_tuple(namespace), prefix, to_timestamp(as_of, name="as_of"), history=history
        )
        lim = self.backend.unlimited if limit is None else str(_check_count(limit, "limit", low=0))
        sql = f"SELECT {_ROW_COLUMNS} FROM triplets r WHERE {scope} ORDER BY r.id LIMIT {lim}"
        if offset:
            sql += f" OFFSET {_check_count(offset, 'offset', low=0)}"
        with self.backend.read() as cur:
            return [self._record(r) for r in cur.execute(sql, params).fetchall()]

    def history(self, t1: str, t2: str, *, namespace: str | Sequence[str] | None = None) -> list[TripletRecord]:
        """Every version of the facts with subject ``t1`` and relation ``t2`` (exact terms), oldest first."""
        enc = encode_namespace(namespace_tuple(namespace))
        ids = self._term_ids([normalize_term(t1), normalize_term(t2)])
        if len(ids) < len({normalize_term(t1), normalize_term(t2)}):
            return []
        with self.backend.read() as cur:
            rows = cur.execute(
                f"SELECT {_ROW_COLUMNS} FROM triplets r WHERE r.namespace = ? AND r.t1_id = ? AND r.t2_id = ? "
                "ORDER BY r.valid_from, r.id",
                (enc, ids[normalize_term(t1)], ids[normalize_term(t2)]),
            ).fetchall()
        return [self._record(r) for r in rows]

    def namespaces(self, *, prefix: str | Sequence[str] | None = None, history: bool = False) -> list[Namespace]:
        """Distinct namespaces holding current triplets (or any, with ``history``), sorted."""
        scope, params = self._scope(namespace_tuple(prefix), True, None, history=history)
        with self.backend.read() as cur:
            rows = cur.execute(f"SELECT DISTINCT r.namespace FROM triplets r WHERE {scope}", params).fetchall()
        return sorted(decode_namespace(r[0]) for r in rows)

    def count(self, *, namespace: str | Sequence[str] | None = None, prefix: bool = True) -> int:
        """Number of current triplets (under ``namespace``; the whole store by default)."""
        scope, params = self._scope(namespace_tuple(namespace), prefix, None)
        with self.backend.read() as cur:
            return int(cur.execute(f"SELECT COUNT(*) FROM triplets r WHERE {scope}", params).fetchone()[0])

    def __len__(self) -> int:
        return self.count()

    def term_count(self) -> int:
        """Number of distinct stored terms (each with one embedding)."""
        with self.backend.read() as cur:
            return int(cur.execute("SELECT COUNT(*) FROM terms").fetchone()[0])

    # ------------------------------------------------------------------------------------------ graph nodes
    def put_nodes(self, nodes: Iterable[NodeRecord], *, namespace: str | Sequence[str] | None = None) -> None:
        """Insert or replace node attributes (one transaction)."""
        enc = encode_namespace(namespace_tuple(namespace))
        rows = []
        for n in nodes:
            if not isinstance(n, NodeRecord):
                raise TypeError(f"put_nodes takes NodeRecord objects, got {type(n).__name__}")
            rows.append((enc, n.id, n.label, n.kind, n.text, _dump_payload(n.properties)))
        if not rows:
            return
        with self._lock, self.backend.write() as cur:
            cur.executemany(
                "INSERT INTO nodes (namespace, id, label, kind, text, properties) VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (namespace, id) DO UPDATE SET label = excluded.label, kind = excluded.kind, "
                "text = excluded.text, properties = excluded.properties",
                rows,
            )

    def get_nodes(
        self, ids: Sequence[str] | None = None, *, namespace: str | Sequence[str] | None = None
    ) -> list[NodeRecord]:
        """Stored node attributes (all of the namespace, or those with ``ids``)."""
        ns = namespace_tuple(namespace)
        enc = encode_namespace(ns)
        out: list[NodeRecord] = []
        with self.backend.read() as cur:
            if ids is None:
                rows = cur.execute(
                    "SELECT id, label, kind, text, properties FROM nodes WHERE namespace = ? ORDER BY id", (enc,)
                ).fetchall()
            else:
                rows = []
                for chunk in self.backend.iter_chunks(list(ids), self.backend.max_params - 1):
                    marks = ",".join("?" * len(chunk))
                    rows += cur.execute(
                        f"SELECT id, label, kind, text, properties FROM nodes WHERE namespace = ? AND id IN ({marks})",
                        (enc, *chunk),
                    ).fetchall()
        for r in rows:
            out.append(NodeRecord(r[0], r[1], r[2], r[3], json.loads(r[4]), ns))
        return out

    def delete_nodes(self, ids: Sequence[str], *, namespace: str | Sequence[str] | None = None) -> int:
        enc = encode_namespace(namespace_tuple(namespace))
        n = 0
        with self._lock, self.backend.write() as cur:
            for chunk in self.backend.iter_chunks(list(ids), self.backend.max_params - 1):
                marks = ",".join("?" * len(chunk))
                n += cur.execute(f"DELETE FROM nodes WHERE namespace = ? AND id IN ({marks})", (enc, *chunk)).rowcount
        return n

    # ------------------------------------------------------------------------------------------ lifecycle
    def optimize(self) -> None:
        """Refresh the database's planner statistics; worth calling after a bulk load of many triplets."""
        self.backend.optimize()

    def close(self) -> None:
        """Close the backend's connections and drop the in-memory term index."""
        self.backend.close()
        with self._index_lock:
            self._index = None

    def __enter__(self) -> TripletStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"TripletStore({self.backend!r}, threshold={self.threshold}, lsh={self._lsh!r}, "
            f"fuzzy_index={self.fuzzy_index!r})"
        )


def build_store(
    store: TripletStore | None = None,
    *,
    path: str | Path = ":memory:",
    embedder: Embedder | None = None,
    **store_kwargs: Any,
) -> TripletStore:
    """The ``store`` an adapter was given, or a new :class:`TripletStore` built from the other arguments.

    >>> from fragrel_integrations.testing import HashingEmbedder
    >>> core = TripletStore(":memory:", embedder=HashingEmbedder(dim=32))
    >>> build_store(core) is core
    True
    """
    if store is not None and not isinstance(store, TripletStore):
        raise TypeError(f"store must be a fragrel_integrations TripletStore, got {type(store).__name__}")
    if store is not None and (embedder is not None or store_kwargs):
        raise ValueError("give either store= or the arguments to build one, not both")
    return store if store is not None else TripletStore(path, embedder=embedder, **store_kwargs)
