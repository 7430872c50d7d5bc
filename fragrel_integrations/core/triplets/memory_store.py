"""TripletStore: RET-LLM's read-write triplet memory, a facade over a SQL backend and its parts.

Each given term matches exactly (after :func:`normalize_term`), else the stored term of that field closest by
cosine (at least ``threshold``; found by the in-memory :class:`~.term_index.TermIndex`, an exact scan or faiss).
A single-valued relation holds one object per subject at a time: a new object closes the old fact's validity
interval, which ``as_of`` still reads. Parts: :mod:`.term_dictionary`, :mod:`.versioned_writes`, :mod:`.reads`,
:mod:`.node_table`, :mod:`.rows`.

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

import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

from ..._closing import Closing
from ..._validation import check_cosine, check_min_int, check_text, check_type, stored_json
from ...models.embedder import Embedder
from .backend import SCHEMA_VERSION, StorageBackend
from .facts import Namespace, NamespaceLike, TripletRecord, namespace_tuple, normalize_term
from .node_table import NodeRecord, NodeTable
from .reads import TripletReader
from .rows import Time, TripletLike
from .sqlite_backend import SQLiteBackend
from .term_dictionary import FUZZY_INDEXES, TermDictionary
from .versioned_writes import TripletWrite, VersionedWriter

__all__ = ["FUZZY_INDEXES", "NodeRecord", "TripletStore", "TripletWrite", "build_store"]


_T = TypeVar("_T")


def _check_ids(ids: Sequence[str]) -> list[str]:
    """``ids`` as a list, each a str that SQLite can store (:func:`~fragrel_integrations._validation.check_text`)."""
    if isinstance(ids, str):
        raise TypeError("ids must be a list of str, not one str")
    return [check_text(i, f"ids[{n}]") for n, i in enumerate(ids)]


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


class _TermSetting(Generic[_T]):
    """A setting of the store's :class:`TermDictionary`, read and written as an attribute of the store."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, store: TripletStore | None, owner: type | None = None) -> _T:
        return getattr(store._terms, self.name) if store is not None else self  # type: ignore[return-value]

    def __set__(self, store: TripletStore, value: _T) -> None:
        setattr(store._terms, self.name, value)


class TripletStore(Closing):
    """RET-LLM's triplet memory: write, read with one or two (or three) fields given, update, delete.

    Args:
        backend: a :class:`StorageBackend`, a SQLite file path (``":memory:"`` default) or a
            ``postgresql://`` URL (needs the ``[postgres]`` extra).
        embedder: term embedder (Embedder protocol); ``None`` = the embedded all-MiniLM-L6-v2, loaded on the
            first write or fuzzy read. One store must always use embedders of the same dimension.
        threshold: minimum exact cosine for a fuzzy alternative (default 0.7).
        fuzzy_k: how many alternative terms a fuzzy lookup may use per field (the paper uses one).
        single_valued: relations that hold one object per subject at a time (saved in the database,
            so later opens keep them; add more with :meth:`mark_single_valued`).
        fuzzy_index: ``"exact"`` (default): an exact cosine scan of every stored term; ``"faiss"`` (the
            ``[faiss]`` extra): from 20,000 terms on, a faiss inverted-file index whose candidates are re-checked
            by exact cosine. Rebuilt from the stored embeddings when a store opens; may be changed between calls.

    All methods are thread-safe; writes from several processes are serialised by the backend.
    """

    def __init__(
        self,
        backend: StorageBackend | str | Path = ":memory:",
        *,
        embedder: Embedder | None = None,
        threshold: float = 0.7,
        fuzzy_k: int = 1,
        single_valued: Iterable[str] = (),
        show_progress: bool = False,
        fuzzy_index: str = "exact",
    ) -> None:
        if embedder is not None:
            check_type(embedder, Embedder, "embedder must have embed_documents(texts) and embed_query(text)")
        self.threshold = check_cosine(threshold, "threshold")
        self.fuzzy_k = check_min_int(fuzzy_k, "fuzzy_k", 1)
        self._lock = threading.RLock()
        self.backend = _open_backend(backend)
        self.backend.create_schema()
        with self.backend.read() as cur:
            meta = dict(cur.execute("SELECT name, value FROM meta").fetchall())
        version = meta.get("schema_version", str(SCHEMA_VERSION))
        if version != str(SCHEMA_VERSION):
            raise ValueError(f"this database has triplet schema version {version}; this library reads {SCHEMA_VERSION}")
        self._terms = TermDictionary(
            self.backend,
            self._lock,
            meta,
            embedder=embedder,
            fuzzy_index=fuzzy_index,
            show_progress=bool(show_progress),
        )
        single = stored_json(meta.get("single_valued", "[]"), f"{self._terms.where}: meta 'single_valued'")
        if not isinstance(single, list) or not all(isinstance(r, str) for r in single):
            raise ValueError(f"{self._terms.where}: meta 'single_valued' is damaged (a list of relations expected)")
        self._writer = VersionedWriter(self.backend, self._lock, self._terms, single)
        self._reader = TripletReader(self.backend, self._terms)
        self._nodes = NodeTable(self.backend, self._lock)
        extra = {normalize_term(r) for r in single_valued}
        if extra - self._writer.single_valued:
            self.mark_single_valued(*extra)
        with self.backend.write() as cur:
            cur.execute(
                "INSERT INTO meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
                ("schema_version", str(SCHEMA_VERSION)),
            )

    # ------------------------------------------------------------------------------------------ settings
    @property
    def embedder(self) -> Embedder:
        """The term embedder (the embedded default is loaded on first use)."""
        return self._terms.embedder

    #: the kind of term index (``"exact"`` or ``"faiss"``; may be changed between calls)
    fuzzy_index = _TermSetting[str]()
    #: whether embedding many new terms shows a progress bar
    show_progress = _TermSetting[bool]()

    @property
    def single_valued(self) -> frozenset[str]:
        """Normalised relations that hold one object per subject at a time."""
        return frozenset(self._writer.single_valued)

    def mark_single_valued(self, *relations: str) -> None:
        """Mark relations single-valued for every later write (saved in the database)."""
        self._writer.mark_single_valued(*relations)

    # ------------------------------------------------------------------------------------------ writing
    def write(
        self,
        triplet: TripletLike,
        *,
        key: str | None = None,
        namespace: NamespaceLike = None,
        payload: Mapping[str, Any] | None = None,
        valid_from: Time = None,
        valid_to: Time = None,
        single_valued: bool | None = None,
    ) -> TripletRecord:
        """Store one triplet and return its record (see :meth:`write_many` for the rules)."""
        return self.write_many([TripletWrite(triplet, key, namespace, payload, valid_from, valid_to, single_valued)])[0]

    def write_many(
        self,
        items: Iterable[TripletWrite | TripletLike],
        *,
        namespace: NamespaceLike = None,
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
        return self._writer.write_many(items, namespace, single_valued)

    def update(
        self,
        key: str,
        triplet: TripletLike | None = None,
        *,
        namespace: NamespaceLike = None,
        payload: Mapping[str, Any] | None = None,
        valid_from: Time = None,
    ) -> TripletRecord:
        """Replace the current triplet (and/or payload) stored under ``key``; the old version keeps its interval.

        Raises KeyError if no current triplet has that key.
        """
        current = self.get(key, namespace=namespace)
        if current is None:
            raise KeyError(f"no current triplet with key {key!r} in namespace {namespace_tuple(namespace)!r}")
        triplet = current.triplet if triplet is None else triplet
        payload = current.payload if payload is None else payload
        return self.write(
            triplet, key=key, namespace=namespace, payload=payload, valid_from=valid_from, single_valued=False
        )

    def delete(
        self,
        key: str | None = None,
        *,
        triplet: TripletLike | None = None,
        namespace: NamespaceLike = None,
        hard: bool = False,
        at: Time = None,
    ) -> int:
        """End (or with ``hard=True`` erase) the triplet stored under ``key``, or every current copy of ``triplet``.

        A soft delete closes the validity interval at ``at`` (default now): ``as_of`` queries of earlier times
        still see the fact. A hard delete removes every version for good (use it for erasure requests).
        Returns the number of triplet rows affected; deleting something absent returns 0.
        """
        return self._writer.delete(None if key is None else check_text(key, "key"), triplet, namespace, hard, at)

    # ------------------------------------------------------------------------------------------ reading
    def get(self, key: str, *, namespace: NamespaceLike = None, as_of: Time = None) -> TripletRecord | None:
        """The triplet stored under ``key`` (current, or valid at ``as_of``), or None."""
        return self._reader.get(check_text(key, "key"), namespace, as_of)

    def get_many(self, keys: Sequence[str], *, namespace: NamespaceLike = None) -> list[TripletRecord | None]:
        """Current records for ``keys`` (``None`` where absent), in order; one query per chunk."""
        return self._reader.get_many([check_text(k, f"keys[{i}]") for i, k in enumerate(keys)], namespace)

    def read(
        self,
        t1: str | None = None,
        t2: str | None = None,
        t3: str | None = None,
        *,
        namespace: NamespaceLike = None,
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
        given = {"t1": t1, "t2": t2, "t3": t3}
        defaults = (self.threshold, self.fuzzy_k)
        return self._reader.read(given, namespace, prefix, as_of, fuzzy, threshold, fuzzy_k, defaults)

    def search(
        self,
        text: str,
        *,
        namespace: NamespaceLike = None,
        prefix: bool = False,
        as_of: Time = None,
        threshold: float | None = None,
        k: int = 5,
    ) -> list[TripletRecord]:
        """Triplets with any term equal or close to ``text`` (exact term first, else the closest terms by cosine),
        best score first. The free-text counterpart of :meth:`read`."""
        return self._reader.search(text, namespace, prefix, as_of, threshold, self.threshold, k)

    def records(
        self,
        *,
        namespace: NamespaceLike = None,
        prefix: bool = False,
        as_of: Time = None,
        history: bool = False,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[TripletRecord]:
        """Stored triplets in insertion order: current ones, those valid ``as_of``, or every version (``history``)."""
        return self._reader.records(namespace, prefix, as_of, history, limit, offset)

    def history(self, t1: str, t2: str, *, namespace: NamespaceLike = None) -> list[TripletRecord]:
        """Every version of the facts with subject ``t1`` and relation ``t2`` (exact terms), oldest first."""
        return self._reader.history(t1, t2, namespace)

    def namespaces(self, *, prefix: NamespaceLike = None, history: bool = False) -> list[Namespace]:
        """Distinct namespaces holding current triplets (or any, with ``history``), sorted."""
        return self._reader.namespaces(prefix, history)

    def count(self, *, namespace: NamespaceLike = None, prefix: bool = True) -> int:
        """Number of current triplets (under ``namespace``; the whole store by default)."""
        return self._reader.count(namespace, prefix)

    def __len__(self) -> int:
        return self.count()

    def term_count(self) -> int:
        """Number of distinct stored terms (each with one embedding)."""
        return self._terms.count()

    # ------------------------------------------------------------------------------------------ graph nodes
    def put_nodes(self, nodes: Iterable[NodeRecord], *, namespace: NamespaceLike = None) -> None:
        """Insert or replace node attributes (one transaction)."""
        self._nodes.put(nodes, namespace)

    def get_nodes(self, ids: Sequence[str] | None = None, *, namespace: NamespaceLike = None) -> list[NodeRecord]:
        """Stored node attributes (all of the namespace, or those with ``ids``)."""
        return self._nodes.get(None if ids is None else _check_ids(ids), namespace)

    def node_namespaces(self, *, kind: str | None = None) -> list[Namespace]:
        """Distinct namespaces holding node attributes (of ``kind``, or any), sorted."""
        return self._nodes.namespaces(kind)

    def delete_nodes(self, ids: Sequence[str], *, namespace: NamespaceLike = None) -> int:
        """Delete the nodes with ``ids``; the number deleted."""
        return self._nodes.delete(_check_ids(ids), namespace)

    # ------------------------------------------------------------------------------------------ lifecycle
    def optimize(self) -> None:
        """Refresh the database's planner statistics; worth calling after a bulk load of many triplets."""
        self.backend.optimize()

    def close(self) -> None:
        """Close the backend's connections and drop the in-memory term index."""
        self.backend.close()
        self._terms.drop_index()

    def __repr__(self) -> str:
        return f"TripletStore({self.backend!r}, threshold={self.threshold}, fuzzy_index={self.fuzzy_index!r})"


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
    if store is not None:
        check_type(store, TripletStore, "store must be a fragrel_integrations TripletStore")
    if store is not None and (embedder is not None or store_kwargs):
        raise ValueError("give either store= or the arguments to build one, not both")
    return store if store is not None else TripletStore(path, embedder=embedder, **store_kwargs)
