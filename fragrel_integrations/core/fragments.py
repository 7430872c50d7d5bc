"""Small framework-free value types shared by the core."""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._validation import MAX_JSON_DEPTH, check_type, json_depth_ok

__all__ = ["MAX_POSITION", "Fragment", "ScoredFragment", "check_position", "metadata_json", "parse_position"]

#: Largest ``|position|`` a fragment may have: 2**53, so that a position survives a float round trip through a
#: vector store's metadata and position differences never overflow int64.
MAX_POSITION = 2**53


def check_position(value: object, what: str = "position") -> int:
    """``value`` as an int position in ``[-MAX_POSITION, MAX_POSITION]``, or a ValueError/TypeError naming the fix.

    >>> check_position(3)
    3
    >>> check_position(2**70)
    Traceback (most recent call last):
    ...
    ValueError: position must be an int in [-2**53, 2**53] (order within the document), got 1180591620717411303424
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be int, got {type(value).__name__}")
    if not -MAX_POSITION <= value <= MAX_POSITION:
        raise ValueError(f"{what} must be an int in [-2**53, 2**53] (order within the document), got {value}")
    return value


def parse_position(value: object, what: str = "position") -> int:
    """A position read back from metadata: an int, an integral float (``3.0``) or a digit string (``"3"``), as
    vector stores hand them back; checked by :func:`check_position`.

    >>> parse_position(3.0), parse_position(" -2 ")
    (3, -2)
    """
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an int position (order within the document), got {value!r}")
    # some vector stores return every number as a float
    if isinstance(value, numbers.Integral) or (
        isinstance(value, numbers.Real) and math.isfinite(value) and float(value).is_integer()
    ):
        return check_position(int(value), what)
    if isinstance(value, str):
        digits = value.strip()
        if digits.lstrip("+-").isdigit() and len(digits) <= 20:  # longer cannot be in range
            return check_position(int(digits), what)
        if digits.lstrip("+-").isdigit():
            raise ValueError(f"{what} must be an int in [-2**53, 2**53] (order within the document), got {value!r}")
    raise TypeError(f"{what} must be an int position (order within the document), got {value!r}")


def metadata_json(metadata: Mapping[str, Any], what: str, *, sort_keys: bool = False) -> str:
    """``metadata`` (a mapping) as JSON text to store, or a TypeError starting with ``what``.

    >>> metadata_json({"b": 1, "a": [2]}, "fragment metadata", sort_keys=True)
    '{"a": [2], "b": 1}'
    """
    try:
        text = json.dumps(dict(metadata), sort_keys=sort_keys)
    except (TypeError, ValueError, RecursionError) as exc:
        raise TypeError(f"{what} must be JSON-serialisable: {exc}") from exc
    if not json_depth_ok(metadata):
        raise TypeError(f"{what} must nest at most {MAX_JSON_DEPTH} levels deep")
    return text


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
        check_type(self.text, str, "Fragment.text must be str")
        check_position(self.position, "Fragment.position")
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
