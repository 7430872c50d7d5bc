"""Value types of the triplet memory: a triplet, a stored record of one, and how a query term was matched."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from operator import attrgetter
from typing import Any

from ..._validation import check_text, check_type

__all__ = [
    "FIELDS",
    "Namespace",
    "NamespaceLike",
    "TermMatch",
    "Triplet",
    "TripletRecord",
    "decode_namespace",
    "encode_namespace",
    "namespace_tuple",
    "normalize_term",
    "to_timestamp",
]

#: the three columns of the memory table: first argument, relation, second argument
FIELDS = ("t1", "t2", "t3")

Namespace = tuple[str, ...]
#: what a namespace argument accepts (see :func:`namespace_tuple`)
NamespaceLike = str | Sequence[str] | None

_NS_SEP = "\x1f"  # unit separator: joins namespace labels in the database column


def normalize_term(text: str) -> str:
    """The form exact matching compares: NFKC, case-folded, whitespace collapsed, stripped.

    >>> normalize_term("  The  President\\tof ")
    'the president of'
    """
    check_text(text, "a triplet term")  # TypeError for a non-str, ValueError for a lone surrogate
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


@dataclass(frozen=True, slots=True)
class Triplet:
    """One fact ``<t1, t2, t3>``: first argument, relation, second argument (RET-LLM's memory unit).

    Terms keep the caller's spelling; they must be non-empty after stripping whitespace.

    >>> t = Triplet("Joe Biden", "president of", "United States")
    >>> subject, relation, obj = t
    >>> relation
    'president of'
    >>> Triplet.coerce({"subject": "a", "relation": "b", "object": "c"}) == Triplet("a", "b", "c")
    True
    """

    t1: str
    t2: str
    t3: str

    def __post_init__(self) -> None:
        for name in FIELDS:
            value = getattr(self, name)
            check_type(value, str, f"Triplet.{name} must be str")
            if not value.strip():
                raise ValueError(f"Triplet.{name} is empty: every term of a stored triplet needs text")
            if "\x00" in value:
                raise ValueError(f"Triplet.{name} contains a NUL character; remove it")
            check_text(value, f"Triplet.{name}")

    def __iter__(self) -> Iterator[str]:
        return iter((self.t1, self.t2, self.t3))

    subject = property(attrgetter("t1"), doc="The first argument, ``t1``.")
    relation = property(attrgetter("t2"), doc="The relation, ``t2``.")
    object = property(attrgetter("t3"), doc="The second argument, ``t3``.")

    def as_dict(self) -> dict[str, str]:
        """``{"subject": t1, "relation": t2, "object": t3}`` (the shape the framework stores use)."""
        return {"subject": self.t1, "relation": self.t2, "object": self.t3}

    @classmethod
    def coerce(cls, value: Triplet | Sequence[str] | Mapping[str, Any]) -> Triplet:
        """A Triplet from a Triplet, a 3-sequence, or a mapping with subject/relation/object (or t1/t2/t3)."""
        if isinstance(value, Triplet):
            return value
        if isinstance(value, Mapping):
            for keys in (("subject", "relation", "object"), FIELDS):
                if all(k in value for k in keys):
                    return cls(*(value[k] for k in keys))
            raise ValueError(
                "a triplet mapping needs the keys 'subject', 'relation' and 'object' (or t1, t2, t3), "
                f"got {sorted(value)}"
            )
        if isinstance(value, str) or not isinstance(value, Sequence) or len(value) != 3:
            raise TypeError(f"expected a Triplet, a (t1, t2, t3) sequence or a mapping, got {value!r}")
        return cls(*value)


@dataclass(frozen=True, slots=True)
class TermMatch:
    """How one given query term was resolved: ``exact`` match, or the ``term`` found fuzzily at ``similarity``."""

    field: str
    query: str
    term: str
    similarity: float
    exact: bool


@dataclass(frozen=True, slots=True)
class TripletRecord:
    """A stored triplet with its storage metadata.

    ``valid_from``/``valid_to`` (UNIX seconds; ``valid_to=None`` means still valid) bound when the fact held;
    a superseded fact keeps its interval. ``score`` is 1.0 for exact matches, else the smallest cosine of the
    fuzzy substitutions in ``matches``.
    """

    id: int
    key: str
    namespace: Namespace
    triplet: Triplet
    valid_from: float
    valid_to: float | None
    created_at: float
    payload: Mapping[str, Any] = field(default_factory=dict)
    score: float = 1.0
    matches: tuple[TermMatch, ...] = ()

    @property
    def current(self) -> bool:
        """Whether the fact is still valid (no end of validity)."""
        return self.valid_to is None

    def valid_at(self, when: float) -> bool:
        return self.valid_from <= when and (self.valid_to is None or when < self.valid_to)

    t1 = property(attrgetter("triplet.t1"), doc="The stored triplet's first argument.")
    t2 = property(attrgetter("triplet.t2"), doc="The stored triplet's relation.")
    t3 = property(attrgetter("triplet.t3"), doc="The stored triplet's second argument.")


def to_timestamp(value: float | int | datetime | None, *, name: str = "time") -> float | None:
    """UNIX seconds from a number or a datetime (naive datetimes are taken as UTC); None stays None.

    >>> to_timestamp(datetime(2021, 1, 20, tzinfo=UTC))
    1611100800.0
    """
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.timestamp()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a datetime or UNIX seconds, got {type(value).__name__}")
    value = float(value)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return value


def namespace_tuple(namespace: NamespaceLike) -> Namespace:
    """A namespace as a tuple of labels: ``"users/alice"`` is NOT split; pass ``("users", "alice")``.

    A plain string is one label. Labels must be non-empty strings without the unit-separator character.

    >>> namespace_tuple(("memories", "alice"))
    ('memories', 'alice')
    >>> namespace_tuple(None)
    ()
    """
    if namespace is None:
        return ()
    if isinstance(namespace, str):
        namespace = (namespace,)
    check_type(namespace, Sequence, "namespace must be a tuple of strings")
    out = tuple(namespace)
    for label in out:
        check_type(label, str, "namespace labels must be str")
        if not label:
            raise ValueError(f"namespace labels must be non-empty, got {out!r}")
        if _NS_SEP in label or "\x00" in label:
            raise ValueError("namespace labels must not contain the \\x1f or NUL characters")
        check_text(label, "a namespace label")
    return out


def encode_namespace(namespace: Namespace) -> str:
    """Database form of a namespace: each label followed by ``\\x1f``, so a prefix is a string prefix."""
    return "".join(label + _NS_SEP for label in namespace)


def decode_namespace(text: str) -> Namespace:
    return tuple(text.split(_NS_SEP)[:-1]) if text else ()
