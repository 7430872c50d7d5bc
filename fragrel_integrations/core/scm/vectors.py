"""A session's turns as scoring needs them, grown per turn: embeddings (one float32 matrix), their norms, and the
turns as FragRel fragments with their layout, so a turn converts only the turns added since.

Streams are append-only and return the same :class:`~fragrel_integrations.core.scm.interactions.MemoryItem` objects
from their caches, so a cached matrix stays valid while its first and last rows belong to the very items the
stream now returns in those places (checked by identity: a cleared and refilled session returns new objects).
Rows never change once written, so views handed out earlier stay valid when the matrix grows.

>>> import numpy as np
>>> from fragrel_integrations.core.scm.interactions import MemoryItem
>>> items = [MemoryItem("s", i, "q", "a", embedding=np.full(2, i + 1.0, np.float32)) for i in range(3)]
>>> rows = TurnMatrix.from_vectors(items[:2], [it.embedding for it in items[:2]])
>>> rows.extends(items), rows.append(items[2:], [items[2].embedding]).n
(True, 3)
>>> rows.view(3)[0].tolist(), rows.view(3)[1].round(3).tolist()
([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]], [1.414, 2.828, 4.243])
>>> rows.layout(2).positions.tolist(), rows.layout(2).fragments[1].position
([0, 1], 1)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..fragments import Fragment
from ..relations import FragmentLayout
from .interactions import MemoryItem

__all__ = ["TurnMatrix"]


def _rows(vectors: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    matrix = np.stack([np.asarray(v, dtype=np.float32) for v in vectors]) if vectors else np.zeros((0, 0), np.float32)
    norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix, dtype=np.float64)) if vectors else np.zeros(0)
    return matrix, norms


def turn_fragment(item: MemoryItem) -> Fragment:
    """A turn as a FragRel fragment: its summary (else its text), one document per session, position = index."""
    return Fragment(item.summary or item.text, item.session_id, item.index)


class TurnMatrix:
    """The embeddings (float32 rows), their norms and the fragments of a session's first ``n`` turns, in time
    order."""

    def __init__(self, matrix: np.ndarray, norms: np.ndarray, items: Sequence[MemoryItem]):
        self._matrix, self._norms = matrix, norms
        self.n = int(matrix.shape[0])
        self.first, self.last = (items[0], items[-1]) if items else (None, None)
        self.fragments = [turn_fragment(it) for it in items]
        self._positions = np.fromiter((it.index for it in items), np.int64, len(items))

    @classmethod
    def from_vectors(cls, items: Sequence[MemoryItem], vectors: Sequence[np.ndarray]) -> TurnMatrix:
        """Rows for ``items`` (``vectors[i]`` is the embedding of ``items[i]``)."""
        matrix, norms = _rows(vectors)
        return cls(matrix, norms, items)

    @property
    def dim(self) -> int:
        return int(self._matrix.shape[1]) if self.n else 0

    def extends(self, items: Sequence[MemoryItem]) -> bool:
        """Whether ``items`` starts with the turns this matrix holds (same objects first and last)."""
        n = self.n
        return 0 < n <= len(items) and items[0] is self.first and items[n - 1] is self.last

    def append(self, items: Sequence[MemoryItem], vectors: Sequence[np.ndarray]) -> TurnMatrix:
        """Add rows for ``items`` (the turns after the last one); the buffer doubles when full."""
        if not items:
            return self
        matrix, norms = _rows(vectors)
        if self.n and matrix.shape[1] != self.dim:
            raise ValueError(f"new turn embeddings have dimension {matrix.shape[1]}, the session's {self.dim}")
        need = self.n + matrix.shape[0]
        if need > self._matrix.shape[0]:
            capacity = max(need, 2 * self._matrix.shape[0])
            grown = np.empty((capacity, matrix.shape[1]), np.float32)
            grown_norms = np.empty(capacity)
            grown[: self.n], grown_norms[: self.n] = self._matrix[: self.n], self._norms[: self.n]
            self._matrix, self._norms = grown, grown_norms
        self._matrix[self.n : need], self._norms[self.n : need] = matrix, norms
        self.fragments.extend(turn_fragment(it) for it in items)
        self._positions = np.concatenate([self._positions, np.fromiter((it.index for it in items), np.int64)])
        self.n, self.last = need, items[-1]
        if self.first is None:
            self.first = items[0]
        return self

    def view(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The first ``n`` rows and their norms (views: rows never change)."""
        return self._matrix[:n], self._norms[:n]

    def layout(self, n: int) -> FragmentLayout:
        """The FragRel layout of the first ``n`` turns (one document: the session)."""
        return FragmentLayout(np.zeros(n, np.int64), self._positions[:n], self.fragments[:n])  # kept per turn
