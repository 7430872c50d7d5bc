"""An external index over the SCM memory stream: the vector search used for memory activation.

The stream (:class:`~fragrel_integrations.core.scm.stream.SCMStream` or any ``MemoryStream``) stays the ordered
record of every turn; a :class:`StreamIndex` only answers "which earlier turns of this session are closest to
the observation?". Users who already run a vector database (Chroma, pgvector, Qdrant, ...) plug it in through the
framework adapters :class:`fragrel_integrations.langchain.scm_index.VectorStoreStreamIndex` (any LangChain
``VectorStore``) and :class:`fragrel_integrations.llama_index.scm_index.VectorStoreStreamIndex` (any LlamaIndex
vector store). :class:`InMemoryStreamIndex` is the framework-free reference implementation (tests, examples).

Entries are keyed by ``(session_id, interaction index)``; ``add`` must replace an existing entry with the same
key (upsert), so :meth:`SelfControlledMemory.reindex <fragrel_integrations.core.scm.SelfControlledMemory.reindex>`
can always run again. The async workflow calls these sync methods in a worker thread.

>>> import numpy as np
>>> index = InMemoryStreamIndex()
>>> index.add(MemoryItem("ana", 0, "My cat is Miso.", "Nice."), "cat Miso", np.array([1.0, 0.0]))
>>> index.add(MemoryItem("ana", 1, "I live in Lisbon.", "Lovely."), "Lisbon", np.array([0.0, 1.0]))
>>> index.add(MemoryItem("bob", 0, "My dog is Rex.", "Cute."), "dog Rex", np.array([1.0, 0.0]))
>>> [(i, round(s, 3)) for i, s in index.search("ana", "my cat?", np.array([0.9, 0.1]), k=1)]
[(0, 0.994)]
>>> index.delete_session("ana"); index.search("ana", "my cat?", np.array([0.9, 0.1]), k=5)
[]
"""

from __future__ import annotations

import operator
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..._validation import check_min_int
from .interactions import MemoryItem
from .stream import check_session

__all__ = [
    "PROBE_BLOCK",
    "EntryIds",
    "InMemoryStreamIndex",
    "SCMIndexError",
    "StoreIndexAdapter",
    "StreamIndex",
    "add_turn",
    "check_entry",
    "check_filter",
    "check_keys",
    "check_search",
    "check_store_options",
    "check_vector",
    "default_entry_id",
    "entry_id",
    "first_hits",
    "owned_index",
    "pool_items",
    "probe_ids",
    "read_index",
]


def default_entry_id(session_id: str, index: int) -> str:
    """The id adapters give a turn's entry in an external store: ``f"scm:{session_id}:{index}"``."""
    return f"scm:{session_id}:{index}"


def read_index(value: object) -> int | None:
    """An interaction index read back from store metadata (stores may return it as int, float or str).

    >>> read_index(3), read_index(3.0), read_index("3"), read_index(True), read_index("x")
    (3, 3, 3, None, None)
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def check_keys(session_key: object, index_key: object) -> tuple[str, str]:
    """Validate the two metadata key names adapters store with each entry (non-empty, different strs)."""
    for name, value in (("session_key", session_key), ("index_key", index_key)):
        if not isinstance(value, str) or not value:
            raise TypeError(f"{name} must be a non-empty str, got {value!r}")
    if session_key == index_key:
        raise ValueError(f"session_key and index_key must differ, both are {session_key!r}")
    return session_key, index_key  # type: ignore[return-value]


def check_store_options(
    session_key: object, index_key: object, fetch_k: object, make_id: object
) -> tuple[str, str, int | None, Callable[[str, int], str]]:
    """Validate what both vector-store adapters take: the metadata keys (:func:`check_keys`), ``fetch_k`` (an int
    >= 1 or None) and ``make_id`` (a function ``(session_id, index) -> str``; None: :func:`default_entry_id`)."""
    session_key, index_key = check_keys(session_key, index_key)
    if fetch_k is not None:
        check_min_int(fetch_k, "fetch_k", 1, hint=" or None")
    if make_id is not None and not callable(make_id):
        raise TypeError(f"make_id must be a function (session_id, index) -> str, got {type(make_id).__name__}")
    return session_key, index_key, fetch_k, make_id or default_entry_id  # type: ignore[return-value]


def check_filter(value: object, name: str, returns: str, hint: str = "") -> None:
    """TypeError unless ``value`` (an adapter's per-session filter) is None or a function session_id -> ``returns``."""
    if value is not None and not callable(value):
        raise TypeError(
            f"{name} must be a function session_id -> {returns} (or None), got {type(value).__name__}{hint}"
        )


def check_search(session_id: object, k: object) -> None:
    """Validate a ``search`` call of an adapter: a non-empty session id (TypeError) and ``k`` >= 1 (ValueError)."""
    check_session(session_id)
    check_min_int(k, "k", 1)


def entry_id(make_id: Callable[[str, int], str], session_id: str, index: int) -> str:
    """``make_id(session_id, index)``, checked to be a non-empty str (TypeError otherwise)."""
    value = make_id(session_id, index)
    if not isinstance(value, str) or not value:
        raise TypeError(f"make_id must return a non-empty str, got {value!r}")
    return value


def first_hits(candidates: Iterable[tuple[int | None, float]], k: int) -> list[tuple[int, float]]:
    """The first ``k`` ``(interaction index, score)`` of a store's results, skipping ``None`` (not a turn of the
    session) and repeated indexes; reads ``candidates`` lazily, only as far as needed.

    >>> first_hits([(3, 0.9), (None, 0.8), (3, 0.7), (1, 0.5), (0, 0.4)], 2)
    [(3, 0.9), (1, 0.5)]
    """
    hits: list[tuple[int, float]] = []
    seen: set[int] = set()
    for index, score in candidates:
        if index is None or index in seen:
            continue
        seen.add(index)
        hits.append((index, score))
        if len(hits) == k:
            break
    return hits


def owned_index(metadata: Mapping[str, Any] | None, session_id: str, session_key: str, index_key: str) -> int | None:
    """The interaction index an entry's ``metadata`` records, if the entry is a turn of ``session_id``, else None
    (adapters post-filter every store's results with it, so another session's turns never come back).

    >>> owned_index({"scm_session": "ana", "scm_index": "3"}, "ana", "scm_session", "scm_index")
    3
    >>> owned_index({"scm_session": "bob", "scm_index": 3}, "ana", "scm_session", "scm_index") is None
    True
    """
    metadata = metadata or {}
    if metadata.get(session_key) != session_id:
        return None
    return read_index(metadata.get(index_key))


#: Ids asked of a store per probe of :func:`probe_ids`.
PROBE_BLOCK = 256


def probe_ids(ids_of: Callable[[int, int], set[str]], found: Callable[[list[str]], set[str]]) -> set[str]:
    """The entry ids a store holds for one session, probed in blocks of :data:`PROBE_BLOCK` until a block has none:
    ``ids_of(start, stop)`` gives the ids of interaction indexes ``start..stop-1``, ``found(ids)`` those of them the
    store holds.

    >>> held = {f"scm:ana:{i}" for i in range(300)}
    >>> len(probe_ids(lambda a, b: {f"scm:ana:{i}" for i in range(a, b)}, lambda ids: held & set(ids)))
    300
    """
    hits: set[str] = set()
    start = 0
    while True:
        block = found(sorted(ids_of(start, start + PROBE_BLOCK)))
        if not block:
            return hits
        hits |= block
        start += PROBE_BLOCK


class EntryIds:
    """The entry ids an adapter added to an external store, by session (thread-safe): which ids a session has
    (to delete them) and whose turn an id is (to recognise custom ids in a store that returns ids only).

    >>> ids = EntryIds()
    >>> ids.add("ana", 0, "doc-1"); ids.owner("doc-1"), ids.of("ana"), ids.forget("ana"), ids.of("ana")
    (('ana', 0), {'doc-1'}, None, set())
    """

    def __init__(self) -> None:
        self._owners: dict[str, tuple[str, int]] = {}
        self._lock = threading.Lock()

    def add(self, session_id: str, index: int, entry_id: str) -> None:
        """Record that ``entry_id`` holds turn ``index`` of ``session_id``."""
        with self._lock:
            self._owners[entry_id] = (session_id, index)

    def owner(self, entry_id: str) -> tuple[str, int] | None:
        """``(session_id, index)`` of an added id, or None."""
        with self._lock:
            return self._owners.get(entry_id)

    def of(self, session_id: str) -> set[str]:
        """The ids added for ``session_id``."""
        with self._lock:
            return {i for i, (s, _) in self._owners.items() if s == session_id}

    def forget(self, session_id: str) -> None:
        """Forget the ids of ``session_id`` (after its entries were deleted)."""
        with self._lock:
            for entry_id in [i for i, (s, _) in self._owners.items() if s == session_id]:
                del self._owners[entry_id]


def check_entry(item: object, text: object) -> None:
    """Validate one ``add`` call of an adapter: a :class:`MemoryItem` and its non-empty text."""
    if not isinstance(item, MemoryItem):
        raise TypeError(f"item must be a MemoryItem, got {type(item).__name__}")
    if not isinstance(text, str) or not text:
        raise TypeError(f"text must be a non-empty str, got {text!r}")


@runtime_checkable
class StreamIndex(Protocol):
    """What :class:`~fragrel_integrations.core.scm.SelfControlledMemory` needs from an external index.

    ``isinstance`` checks only that the three methods exist.
    """

    def add(self, item: MemoryItem, text: str, embedding: np.ndarray) -> None:
        """Index one stored turn: ``text`` is what the stream embedded (the summary, else the full turn) and
        ``embedding`` the memory's vector of it. Replaces an entry with the same ``(session_id, index)``."""
        ...

    def search(self, session_id: str, query: str, embedding: np.ndarray, k: int) -> list[tuple[int, float]]:
        """At most ``k`` ``(interaction index, similarity)`` pairs of ``session_id`` only, best first.

        ``query`` is the observation and ``embedding`` the memory's vector of it; an index that embeds with its
        own model uses the text."""
        ...

    def delete_session(self, session_id: str) -> None:
        """Remove every entry of ``session_id``."""
        ...


class SCMIndexError(RuntimeError):
    """The external index failed after the turn was written to the stream (nothing is lost).

    ``item`` is the stored turn; ``session_id`` its session. Repair the index with
    ``memory.reindex(session_id)`` (adds are upserts, so already indexed turns are simply rewritten).
    """

    def __init__(self, message: str, item: MemoryItem | None = None, session_id: str | None = None) -> None:
        super().__init__(message)
        self.item = item
        self.session_id = session_id if session_id is not None else (item.session_id if item else None)


class InMemoryStreamIndex:
    """A framework-free :class:`StreamIndex`: brute-force cosine over the memory's embeddings, per session.

    Thread-safe; holds everything in memory (nothing persists). Useful for tests and as a template.
    """

    def __init__(self) -> None:
        self._entries: dict[str, dict[int, tuple[str, np.ndarray]]] = {}
        self._lock = threading.Lock()

    def add(self, item: MemoryItem, text: str, embedding: np.ndarray) -> None:
        """Index one turn (replacing an entry with the same session and interaction index)."""
        if not isinstance(item, MemoryItem):
            raise TypeError(f"item must be a MemoryItem, got {type(item).__name__}")
        vector = np.asarray(embedding, dtype=np.float64).ravel()
        if vector.size == 0 or not np.all(np.isfinite(vector)):
            raise ValueError("embedding must be a non-empty finite vector")
        with self._lock:
            self._entries.setdefault(item.session_id, {})[item.index] = (str(text), vector)

    def search(self, session_id: str, query: str, embedding: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The ``k`` turns of the session with the highest cosine to ``embedding``, best first (ties: earlier)."""
        check_min_int(k, "k", 1)
        q = np.asarray(embedding, dtype=np.float64).ravel()
        with self._lock:
            entries = sorted(self._entries.get(session_id, {}).items())
        if not entries:
            return []
        e = np.stack([vector for _, (_, vector) in entries])
        if e.shape[1] != q.shape[0]:
            raise ValueError(f"indexed embeddings have dimension {e.shape[1]} but the query has {q.shape[0]}")
        s = (e @ q) / np.maximum(np.linalg.norm(e, axis=1) * max(float(np.linalg.norm(q)), 1e-12), 1e-12)
        top = np.argsort(-s, kind="stable")[:k]
        return [(entries[int(t)][0], float(s[int(t)])) for t in top]

    def delete_session(self, session_id: str) -> None:
        """Forget every entry of the session."""
        with self._lock:
            self._entries.pop(session_id, None)

    def __len__(self) -> int:
        with self._lock:
            return sum(len(entries) for entries in self._entries.values())

    def __repr__(self) -> str:
        return f"InMemoryStreamIndex(sessions={len(self._entries)}, entries={len(self)})"


def pool_items(hits: object, candidates: list[MemoryItem], session_id: str, pool_size: int) -> list[MemoryItem]:
    """The candidate turns named by an index's ``search`` hits (the first ``pool_size``; the flash turn and
    unknown indexes dropped), in time order; a RuntimeWarning when none is named, and TypeError for hits that are
    not ``(interaction index, similarity)`` pairs."""
    if not isinstance(hits, list | tuple):
        raise TypeError(f"index.search must return a list of (interaction index, similarity), got {hits!r}")
    by_index = {it.index: it for it in candidates}
    chosen: dict[int, MemoryItem] = {}
    for hit in hits[:pool_size]:
        try:
            position, score = hit
            position = operator.index(position)
            float(score)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"index.search must return (interaction index, similarity) pairs, got {hit!r}") from exc
        if position in by_index:
            chosen[position] = by_index[position]
    if not chosen:
        warnings.warn(
            f"the index returned none of the {len(candidates)} earlier turns of session {session_id!r}, so "
            f"no memory is recalled; if the stream was written without this index, run "
            f"memory.reindex({session_id!r})",
            RuntimeWarning,
            stacklevel=2,
        )
    return [chosen[i] for i in sorted(chosen)]


def add_turn(index: StreamIndex, item: MemoryItem, text: str, embedding: np.ndarray, reindex: bool = False) -> None:
    """Add a stored turn to ``index``; a failure raises :class:`SCMIndexError` (the stream keeps the turn)."""
    try:
        index.add(item, text, embedding)
    except Exception as exc:
        where = f"turn {item.index} of session {item.session_id!r}"
        done = (
            f"reindexing stopped at {where} (the stream is unchanged)"
            if reindex
            else f"{where} is saved in the stream but was not added to the index"
        )
        raise SCMIndexError(
            f"{done}: {type(exc).__name__}: {exc}; once the index works again, run "
            f"memory.reindex({item.session_id!r}) (it rewrites the session's entries, nothing is duplicated)",
            item,
        ) from exc


def check_vector(embedding: object, finite: bool = False) -> np.ndarray:
    """``embedding`` as a flat float64 vector: non-empty (and finite, with ``finite=True``), else ValueError."""
    vector = np.asarray(embedding, dtype=np.float64).ravel()
    if vector.size == 0 or (finite and not np.all(np.isfinite(vector))):
        raise ValueError(f"embedding must be a non-empty{' finite' if finite else ''} vector")
    return vector


class StoreIndexAdapter:
    """What the vector-store adapters of every framework share (a :class:`StreamIndex` over an external store):
    the options, entry ids and metadata, ownership of a hit, and the repr.

    Args:
        session_key, index_key: the metadata keys of an entry's session id and interaction index.
        fetch_k: entries asked from the store per search (at least the memory's ``k``; None: ``k``); raise it
            when the store's filter is weak, so post-filtering still leaves enough turns.
        make_id: ``make_id(session_id, index)`` gives an entry's id (default :func:`default_entry_id`; stores
            that need UUIDs, such as Qdrant, can use ``uuid.uuid5`` of it). Ids must be stable: adding a turn
            again replaces its entry.

    >>> adapter = StoreIndexAdapter(object(), session_key="s", index_key="i", fetch_k=None, make_id=None)
    >>> adapter.entry_id("ana", 2), adapter.entry_metadata(MemoryItem("ana", 2, "o", "r")), adapter.fetch(3)
    ('scm:ana:2', {'s': 'ana', 'i': 2}, 3)
    >>> adapter.hit_index(None, "scm:ana:2", "ana"), adapter.hit_index({"s": "bob", "i": 1}, "x", "ana")
    (2, None)
    """

    def __init__(
        self, store: object, *, session_key: object, index_key: object, fetch_k: object, make_id: object
    ) -> None:
        self.session_key, self.index_key, self.fetch_k, self.make_id = check_store_options(
            session_key, index_key, fetch_k, make_id
        )
        self._store_name = type(store).__name__
        #: The entry ids this object added, with their (session, index): what a store that returns ids only is read by.
        self.added_ids = EntryIds()

    def entry_id(self, session_id: str, index: int) -> str:
        """The checked id of a turn's entry (``make_id(session_id, index)``)."""
        return entry_id(self.make_id, session_id, index)

    def entry_metadata(self, item: MemoryItem) -> dict[str, Any]:
        """``{session_key: session id, index_key: interaction index}`` of a turn's entry."""
        return {self.session_key: item.session_id, self.index_key: item.index}

    def fetch(self, k: int) -> int:
        """Entries to ask the store for when the memory wants ``k``."""
        return max(k, self.fetch_k or k)

    def hit_index(self, metadata: Mapping[str, Any] | None, hit_id: str | None, session_id: str) -> int | None:
        """The interaction index of a store hit if it is a turn of ``session_id``, else None: read from its
        ``metadata`` when the store returns it, else from its id (the default id's text, or the ids this object
        added)."""
        if metadata is not None:
            return owned_index(metadata, session_id, self.session_key, self.index_key)
        if hit_id is None:
            return None
        if self.make_id is default_entry_id:
            prefix = f"scm:{session_id}:"
            return read_index(hit_id[len(prefix) :]) if hit_id.startswith(prefix) else None
        owner = self.added_ids.owner(hit_id)
        return owner[1] if owner is not None and owner[0] == session_id else None

    def probe_session(self, session_id: str, found: Callable[[list[str]], set[str]]) -> set[str]:
        """The ids of ``session_id``'s entries a store holds, probing :meth:`entry_id` ids in blocks (see
        :func:`probe_ids`); ``found(ids)`` returns those of ``ids`` the store holds."""
        return probe_ids(lambda start, stop: {self.entry_id(session_id, i) for i in range(start, stop)}, found)

    def ranked_hits(
        self,
        session_id: str,
        ids: Sequence[str],
        metadatas: Sequence[Mapping[str, Any] | None],
        scores: Sequence[float],
        k: int,
    ) -> list[tuple[int, float]]:
        """The first ``k`` hits of ``session_id`` (see :func:`first_hits`) in a store's result: the hits' ``ids``,
        with their ``metadatas`` and ``scores`` where the store returned them (shorter lists: the rest have none;
        a hit without a score scores 0.0)."""
        candidates = (
            (
                self.hit_index(metadatas[n] if n < len(metadatas) else None, hit_id, session_id),
                float(scores[n]) if n < len(scores) else 0.0,
            )
            for n, hit_id in enumerate(ids)
        )
        return first_hits(candidates, k)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self._store_name}, session_key={self.session_key!r}, index_key={self.index_key!r})"
        )
