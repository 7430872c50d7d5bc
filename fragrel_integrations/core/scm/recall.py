"""SCM's step 3 (retrieval): the per-session caches that make scoring earlier turns cheap.

:class:`SessionCache` holds, per session, the stacked embeddings of its turns (:class:`~.vectors.TurnMatrix`,
grown as the stream grows) and the lexical gate's vocabulary of names; both are thread-safe and rebuilt when the
stream changed behind the cache's back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator
from typing import Any

import numpy as np

from ..steps import CallStep
from .gates import NameVocabulary
from .interactions import MemoryItem
from .vectors import TurnMatrix

__all__ = ["SessionCache"]


class SessionCache:
    """Per-session caches of an SCM memory: turn embeddings and the lexical gate's names.

    Args:
        embed: embeds turn texts (rows of float32), for turns stored without an embedding.
    """

    def __init__(self, embed: Callable[[list[str]], np.ndarray]) -> None:
        self._embed = embed
        self.matrices: dict[str, TurnMatrix] = {}  # session -> its turns' embeddings, grown per turn
        self.names: dict[str, tuple[int, int, NameVocabulary]] = {}  # session -> capitalised words (lexical gate)
        self._lock = threading.Lock()

    def forget(self, session_id: str) -> None:
        """Drop the session's caches (it was cleared)."""
        with self._lock:
            self.matrices.pop(session_id, None)
            self.names.pop(session_id, None)

    def vocabulary(self, session_id: str, candidates: list[MemoryItem]) -> NameVocabulary:
        """The lexical gate's words of the candidates' texts, kept per session and grown with new turns."""
        with self._lock:
            entry = self.names.get(session_id)
        start, vocabulary = 0, NameVocabulary()
        if entry is not None:
            n, last, cached = entry
            if 0 < n <= len(candidates) and candidates[n - 1].index == last:
                start, vocabulary = n, cached.copy()
        vocabulary.update(it.text for it in candidates[start:])
        with self._lock:
            self.names[session_id] = (len(candidates), candidates[-1].index, vocabulary)
        return vocabulary

    def turn_matrix(
        self, session_id: str, candidates: list[MemoryItem], cached: bool
    ) -> Generator[CallStep, Any, TurnMatrix]:
        """The candidates' rows (turns stored without an embedding are embedded now, as a step); read its first
        ``len(candidates)`` rows. With ``cached`` the session's rows are kept and only turns added since are added."""
        with self._lock:
            entry = self.matrices.get(session_id) if cached else None
        if entry is not None and not entry.extends(candidates):
            entry = None
        start = entry.n if entry is not None else 0
        new = candidates[start:]
        vectors: list[np.ndarray | None] = [it.embedding for it in new]
        missing = [i for i, v in enumerate(vectors) if v is None]
        if missing:
            fresh = yield CallStep(self._embed, ([new[i].summary or new[i].text for i in missing],))
            for i, v in zip(missing, fresh, strict=True):
                vectors[i] = v
        dims = {v.shape[0] for v in vectors if v is not None} | ({entry.dim} if entry is not None else set())
        if len(dims) != 1:
            raise ValueError(
                f"the session's turns were embedded with different dimensions {sorted(dims)}: "
                "clear the session or use one embedder"
            )
        if entry is None:
            entry = TurnMatrix.from_vectors(new, vectors)  # type: ignore[arg-type]
            if cached:
                with self._lock:
                    self.matrices[session_id] = entry
            return entry
        with self._lock:
            if entry.n == start:
                return entry.append(new, vectors)  # type: ignore[arg-type]
        # another thread grew the rows meanwhile: build a private copy for this call
        rows, _ = entry.view(start)
        return TurnMatrix.from_vectors(candidates, [*rows, *vectors])  # type: ignore[list-item]
