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
from typing import Protocol, runtime_checkable

import numpy as np

from ..._validation import check_min_int, check_type
from .interactions import MemoryItem

__all__ = ["InMemoryStreamIndex", "SCMIndexError", "StreamIndex", "add_turn", "check_vector", "pool_items"]


@runtime_checkable
class StreamIndex(Protocol):
    """What :class:`~fragrel_integrations.core.scm.SelfControlledMemory` needs from an external index.

    ``isinstance`` checks only that the three methods exist.
    """

    def add(self, item: MemoryItem, text: str, embedding: np.ndarray) -> None:
        """Index one stored turn: ``text`` is what the stream embedded (the summary, else the full turn) and
        ``embedding`` the memory's vector of it. Replaces an entry with the same ``(session_id, index)``."""

    def search(self, session_id: str, query: str, embedding: np.ndarray, k: int) -> list[tuple[int, float]]:
        """At most ``k`` ``(interaction index, similarity)`` pairs of ``session_id`` only, best first.

        ``query`` is the observation and ``embedding`` the memory's vector of it; an index that embeds with its
        own model uses the text."""

    def delete_session(self, session_id: str) -> None:
        """Remove every entry of ``session_id``."""


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
        check_type(item, MemoryItem, "item must be a MemoryItem")
        vector = check_vector(embedding, finite=True)
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
