"""A candidate pool as the FragRel wrappers see it: where each candidate sits, what its base scored it, how the
re-ranked hits map back to the framework's items, and the numbers behind the size of the pool.

Items are the framework's (LangChain Documents, LlamaIndex nodes); this module sees only their metadata, ids and
links, so both frameworks apply the same missing-position fallbacks and the same score rules.

>>> linked_keys(["a", "b", "c"], previous=[None, "a", None], following=["b", None, None])
[('fragrel-links:a', 0), ('fragrel-links:a', 1), ('fragrel-links:c', 0)]
>>> default_pool_size(5)
50
"""

from __future__ import annotations

import hashlib
import itertools
import json
import numbers
from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from ..core.fragments import Fragment, ScoredFragment, parse_position
from ..core.rerank import rank_scores
from .wrapper_settings import WrapperSettings, read_key, stored_key

__all__ = [
    "chain_order",
    "check_score_kind",
    "default_pool_size",
    "fuse_minmax",
    "isolated_key",
    "jsonable_metadata",
    "linked_keys",
    "minmax_scores",
    "oriented_scores",
    "read_location",
    "read_score",
    "rerank_items",
]

T = TypeVar("T")
Key = tuple[str, int]

#: Metadata keys tried, in order, for a base retriever's score when the user names none.
DEFAULT_SCORE_KEYS: tuple[str, ...] = ("relevance_score", "score")


def default_pool_size(k: int) -> int:
    """Candidates asked of the base when the user sets no ``pool_size``: ``max(10 * k, 50)``."""
    return max(10 * k, 50)


# ------------------------------------------------------------------------------------------------ locations


def read_location(metadata: Mapping[str, Any], doc_id_key: str, position_key: str) -> Key | None:
    """``(doc_id, position)`` from the metadata, or None when either key is missing (or None); a default key is
    also read under its old name (:data:`~fragrel_integrations.adapters.wrapper_settings.LEGACY_KEYS`)."""
    doc_id, position_key = read_key(metadata, doc_id_key), stored_key(metadata, position_key)
    position = metadata.get(position_key)
    if doc_id is None or position is None:
        return None
    return str(doc_id), parse_position(position, f"metadata[{position_key!r}]")


def isolated_key(item_id: str | None, text: str, metadata: Mapping[str, Any]) -> str:
    """A document id of its own for an item without position metadata (its id, else a content hash).

    >>> isolated_key("7", "text", {})
    'fragrel:isolated:id:7'
    """
    if item_id is not None:
        return f"fragrel:isolated:id:{item_id}"
    payload = json.dumps([text, metadata], sort_keys=True, default=repr)
    return "fragrel:isolated:sha1:" + hashlib.sha1(payload.encode("utf-8")).hexdigest()


def linked_keys(ids: Sequence[str], *, previous: Sequence[str | None], following: Sequence[str | None]) -> list[Key]:
    """Pseudo keys from PREVIOUS/NEXT links among candidates (``on_missing_position="links"``): each run of
    linked candidates is one pseudo document with consecutive positions; a candidate linked to no other candidate
    (or on a malformed cycle of links) is alone in its run."""
    first: dict[str, int] = {}
    for j, item_id in enumerate(ids):
        first.setdefault(item_id, j)
    heads = [j for j in first.values() if previous[j] not in first]
    keys: dict[str, Key] = {}
    for head in heads:
        run, position, cur = f"fragrel-links:{ids[head]}", 0, head
        while cur is not None and ids[cur] not in keys:
            keys[ids[cur]] = (run, position)
            position += 1
            cur = first.get(following[cur])  # type: ignore[arg-type]  # None: the run ends
    return [keys.setdefault(item_id, (f"fragrel-links:{item_id}", 0)) for item_id in ids]


def chain_order(ids: Sequence[str], *, previous: Sequence[str | None], following: Sequence[str | None]) -> list[int]:
    """The indices of ``ids`` in the order of their one PREVIOUS/NEXT chain, or [] when the links do not form one
    chain that covers them all (then the given order is the reading order)."""
    index = {item_id: i for i, item_id in enumerate(ids)}
    heads = [i for i in range(len(ids)) if previous[i] not in index]
    if len(heads) != 1:
        return []
    chain: list[int] = []
    seen: set[int] = set()
    cur: int | None = heads[0]
    while cur is not None and cur not in seen:
        chain.append(cur)
        seen.add(cur)
        cur = index.get(following[cur] or "")
    return chain if len(chain) == len(ids) else []


def jsonable_metadata(metadata: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The entries of ``metadata`` a FragmentStore can keep (JSON-serialisable), and the keys left out, sorted.

    >>> jsonable_metadata({"a": 1, "b": object()})[1]
    ['b']
    """
    kept = {}
    for key, value in metadata.items():
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            continue
        kept[key] = value
    return kept, sorted(set(metadata) - set(kept))


# ------------------------------------------------------------------------------------------------ scores


def read_score(metadata: Mapping[str, Any], score_key: str | None) -> float | None:
    """The base retriever's score from the metadata (``score_key``, or the first of DEFAULT_SCORE_KEYS found)."""
    for key in DEFAULT_SCORE_KEYS if score_key is None else (score_key,):
        value = metadata.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"metadata[{key!r}] must be a number (the base retriever's score), got {value!r}")
        return float(value)
    return None


#: What a store's raw scores are, and how :func:`oriented_scores` turns each kind into a similarity (all but
#: ``"l2"`` affinely, which FragRel's ranking does not see): ``"similarity"`` kept; ``"cosine_distance"`` 1 - d;
#: ``"squared_l2"`` 1 - d / 2 and ``"l2"`` 1 - d**2 / 2 (both the cosine for unit vectors); ``"distance"`` (any
#: other distance) -d.
SCORE_KINDS: tuple[str, ...] = ("similarity", "cosine_distance", "squared_l2", "l2", "distance")
_TO_SIMILARITY: dict[str, Callable[[float], float]] = {
    "similarity": lambda s: s,
    "cosine_distance": lambda d: 1.0 - d,
    "squared_l2": lambda d: 1.0 - d / 2.0,
    "l2": lambda d: 1.0 - d * d / 2.0,
    "distance": lambda d: -d,
}


def check_score_kind(value: object) -> str | None:
    """``None`` (unknown: :func:`oriented_scores` applies its rule) or one of :data:`SCORE_KINDS`."""
    if value is not None and value not in SCORE_KINDS:
        raise ValueError(f"score kind must be one of {', '.join(map(repr, SCORE_KINDS))} or None, got {value!r}")
    return value  # type: ignore[return-value]


def oriented_scores(scores: Sequence[float | None], kind: str | None = None) -> list[float | None]:
    """Raw store scores as similarities ("higher is better"), one rule for every store in both frameworks.

    ``kind`` is what the store's metric says its scores are (:data:`SCORE_KINDS`); each distance becomes a
    similarity. Unknown (None): a store lists its best match first, so scores that grow down the list (sorted
    ascending, not all equal) are distances and are negated; any other list is kept as it is. A list with a
    missing score (None) is returned unchanged (the ranking stands in for it).

    >>> oriented_scores([0.1, 0.4])
    [-0.1, -0.4]
    >>> oriented_scores([0.5, 0.5, 0.2]), oriented_scores([0.2, 1.0], "squared_l2")
    ([0.5, 0.5, 0.2], [0.9, 0.5])
    """
    kind = check_score_kind(kind)
    values = list(scores)
    if any(s is None for s in values):
        return values
    if kind is None:
        ascending = all(a <= b for a, b in itertools.pairwise(values))  # type: ignore[operator]
        kind = "distance" if ascending and values and values[-1] > values[0] else "similarity"  # type: ignore[operator]
    convert = _TO_SIMILARITY[kind]
    return [convert(float(s)) for s in values]  # type: ignore[arg-type]


def minmax_scores(raw: Sequence[float | None]) -> np.ndarray:
    """One fusion member's scores min-max scaled to [0, 1] (its best 1, its last 0); its ranking ``1 - r/n`` when
    it gives no scores.

    >>> minmax_scores([3.0, 1.0]).tolist(), minmax_scores([None, None]).tolist()
    ([1.0, 0.0], [1.0, 0.5])
    """
    if any(s is None for s in raw):
        return rank_scores(len(raw))
    s = np.asarray(raw, dtype=np.float64)
    span = float(s.max() - s.min()) if s.size else 0.0
    return (s - s.min()) / span if span > 0 else np.ones_like(s)


def fuse_minmax(
    members: Sequence[Sequence[tuple[Hashable, float | None]]], weights: Sequence[float]
) -> list[tuple[Hashable, float]]:
    """Weighted min-max fusion of fusion members' ``(key, score)`` lists: ``sum_i weight_i * minmax_i(score)``
    (0 where member ``i`` did not return the key), best first.

    >>> members = [[("a", 2.0), ("b", 1.0)], [("b", 5.0), ("c", 1.0)]]
    >>> [(key, float(score)) for key, score in fuse_minmax(members, [0.25, 0.75])]
    [('b', 0.75), ('a', 0.25), ('c', 0.0)]
    """
    fused: dict[Hashable, float] = defaultdict(float)
    for member, weight in zip(members, weights, strict=False):
        for (key, _), score in zip(member, minmax_scores([s for _, s in member]), strict=True):
            fused[key] += weight * score
    ranked = sorted(fused, key=fused.__getitem__, reverse=True)
    return [(key, fused[key]) for key in ranked]


# ------------------------------------------------------------------------------------------------ re-ranking


def _no_links(missing: list[int]) -> list[Key]:
    raise ValueError("on_missing_position='links' needs items with PREVIOUS/NEXT links (LlamaIndex nodes)")


def rerank_items(
    settings: WrapperSettings,
    query: str,
    items: Sequence[T],
    *,
    locate: Callable[[T], Key | None],
    fragment: Callable[[T, Key], Fragment],
    isolated: Callable[[int], Key],
    error: Callable[[list[int]], Exception],
    linked: Callable[[list[int]], list[Key]] = _no_links,
    neighbour: Callable[[Fragment], T],
    **options: Any,
) -> list[tuple[T, ScoredFragment]]:
    """Re-rank framework items with ``settings``: ``locate(item)`` reads its ``(doc_id, position)``, None where it
    is missing, which the ``on_missing_position`` policy fills (``"raise"`` raises ``error(missing indices)``,
    ``"isolate"`` uses ``isolated(i)``, ``"links"`` ``linked(missing indices)``); ``fragment(item, key)`` is the
    item as a core fragment; ``options`` are :meth:`WrapperSettings.rerank`'s (``scores``, ``k``,
    ``ranks_by_words``). Each hit comes with the first item at its location, or ``neighbour(fragment)`` for a
    stored neighbour that joined the pool."""
    keys = [locate(item) for item in items]
    missing = [i for i, key in enumerate(keys) if key is None]
    if missing and settings.on_missing_position == "raise":
        raise error(missing)
    if missing:
        filled = [isolated(i) for i in missing] if settings.on_missing_position == "isolate" else linked(missing)
        for i, key in zip(missing, filled, strict=True):
            keys[i] = key
    fragments = [fragment(item, key) for item, key in zip(items, keys, strict=True)]  # type: ignore[arg-type]
    first: dict[Key, T] = {}
    for item, f in zip(items, fragments, strict=True):
        first.setdefault((f.doc_id, f.position), item)
    out = []
    for hit in settings.rerank(query, fragments, **options):
        item = first.get((hit.fragment.doc_id, hit.fragment.position))
        out.append((neighbour(hit.fragment) if item is None else item, hit))
    return out
