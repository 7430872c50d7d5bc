"""Small framework-free value types shared by the core."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Fragment", "ScoredFragment"]


@dataclass(frozen=True, slots=True)
class Fragment:
    """A piece of a document at a known place.

    ``doc_id`` and ``position`` (order within the document) are what the context relation reads.

    >>> Fragment("It was a dark night.", doc_id="book", position=3).n_words
    5
    """

    text: str
    doc_id: str = "0"
    position: int = 0
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise TypeError(f"Fragment.text must be str, got {type(self.text).__name__}")
        if isinstance(self.position, bool) or not isinstance(self.position, int):
            raise TypeError(f"Fragment.position must be int, got {type(self.position).__name__}")
        if not isinstance(self.doc_id, str):
            object.__setattr__(self, "doc_id", str(self.doc_id))

    @property
    def n_words(self) -> int:
        """Number of whitespace-separated words."""
        return len(self.text.split())


@dataclass(frozen=True, slots=True)
class ScoredFragment:
    """A retrieved fragment with its three FragRel scores.

    ``score`` = ``independent_score + alpha * environment_score``.
    """

    fragment: Fragment
    score: float
    independent_score: float
    environment_score: float

    @property
    def text(self) -> str:
        return self.fragment.text
