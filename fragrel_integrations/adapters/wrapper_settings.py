"""The settings kit of the FragRel wrappers: every setting the LangChain and LlamaIndex wrappers expose, checked once.

Both frameworks' wrappers (LangChain ``FragRelRetriever``; LlamaIndex ``FragRelRetriever`` and
``FragRelPostprocessor``) declare their fields, convert their framework's types and hand the settings to
:meth:`WrapperSettings.resolve`, which fills the preset's defaults and checks each setting with the one check
function below, so the same bad setting fails with the same words in every wrapper. Pydantic wrappers run the
checks as ``mode="before"`` field validators (:func:`field_checks`) and read their fields back with
:meth:`WrapperSettings.of`; :data:`SETTING_DOCS` holds what each setting means. This module also owns the
missing-position policy and its spellings, the metadata key names and the score metadata written on every result.

>>> from fragrel_integrations.core.fragments import Fragment, ScoredFragment
>>> score_metadata(ScoredFragment(Fragment("a", "d", 0), 0.75, 0.5, 0.5))
{'relevance_score': 0.75, 'fragrel_independent_score': 0.5, 'fragrel_environment_score': 0.5}
>>> check_on_missing_position("error")
'raise'
>>> WrapperSettings.resolve(preset="dialogue").order
'position'

With ``preset="auto"`` (the default) the settings a user left unset are chosen for each candidate pool from what it
looks like (:func:`~fragrel_integrations.core.presets.detect_preset`: dialogue, haystack, many documents, ...).
Independent scores: the base's own scores (or its ranking when it gives none) fused with a BM25 score computed on
the pool itself (``lexical``, :func:`~fragrel_integrations.core.rerank.lexical_fusion`); an ``embedder`` only
serves a relation that needs embeddings, and re-scoring a score-less pool by cosine is its own argument
(``score_embedder``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from functools import partial
from typing import Any, Literal

from .._validation import check_min_int, check_query
from ..core.fragments import Fragment, ScoredFragment
from ..core.presets import AUTO, DEFAULT_PRESET, Preset
from ..core.presets import preset as get_preset
from ..core.relation_aware import check_alpha
from ..core.relations import Relation
from ..core.rerank import NeighbourSource, rerank
from ..core.selection import check_k

__all__ = [
    "DEFAULT_DOC_ID_KEY",
    "DEFAULT_POSITION_KEY",
    "ENVIRONMENT_SCORE_KEY",
    "FIELD_SETTINGS",
    "INDEPENDENT_SCORE_KEY",
    "POOL_LEXICAL",
    "SCORE_KEYS",
    "SETTING_DOCS",
    "SETTING_NAMES",
    "WrapperSettings",
    "check_k",
    "check_key",
    "check_keys",
    "check_on_missing_position",
    "check_order",
    "check_pool_size",
    "check_query",
    "field_checks",
    "read_key",
    "resolve_k",
    "score_metadata",
    "stored_key",
]

#: Metadata keys written on every returned Document / node: the final score and FragRel's two parts.
RELEVANCE_SCORE_KEY = "relevance_score"
INDEPENDENT_SCORE_KEY = "fragrel_independent_score"
ENVIRONMENT_SCORE_KEY = "fragrel_environment_score"
SCORE_KEYS: tuple[str, str, str] = (RELEVANCE_SCORE_KEY, INDEPENDENT_SCORE_KEY, ENVIRONMENT_SCORE_KEY)

#: Metadata keys that hold a fragment's document id and position, unless the user names others. Like every key
#: FragRel writes they start with ``fragrel_``, so no framework's own metadata takes them (LlamaIndex writes the
#: source document's id as ``doc_id`` into every vector store's metadata).
DEFAULT_DOC_ID_KEY = "fragrel_doc_id"
DEFAULT_POSITION_KEY = "fragrel_position"
#: The default keys' old names, still read where an item lacks the default key (items tagged before the rename).
LEGACY_KEYS: dict[str, str] = {DEFAULT_DOC_ID_KEY: "doc_id", DEFAULT_POSITION_KEY: "position"}

#: ``on_missing_position``: ``"raise"`` a ValueError naming the fix, ``"isolate"`` (no environment for such a
#: candidate) or ``"links"`` (LlamaIndex PREVIOUS/NEXT relationships; LangChain Documents have none); ``"error"``
#: is the LangChain retriever's old name for ``"raise"``.
_MISSING_POSITION_MODES: tuple[str, str, str] = ("raise", "isolate", "links")


def score_metadata(hit: ScoredFragment) -> dict[str, float]:
    """The three score entries an adapter adds to a returned item's metadata."""
    return dict(zip(SCORE_KEYS, (hit.score, hit.independent_score, hit.environment_score), strict=True))


# ------------------------------------------------------------------------------------------ one check per setting


#: Weight of the pool's own BM25 score in the independent score, per preset (``lexical`` unset), chosen on the
#: dev data (``benchmarks/results/wrapper_*_dev.md``).
POOL_LEXICAL: dict[str, float] = {"general": 0.5, "dialogue": 0.5, "story": 0.5, "haystack": 0.5, "multidoc": 0.5}


def _check_preset(value: object) -> str:
    """A preset name (``"auto"``, ``"general"``, ``"dialogue"``, ...); ValueError listing the names otherwise."""
    if isinstance(value, Preset):
        return value.name
    if value != AUTO:
        get_preset(value)  # type: ignore[arg-type]
    return value  # type: ignore[return-value]


def _check_lexical(value: object) -> float:
    """``lexical``: the weight in [0, 1] of the pool's own BM25 score in ``s_ind``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(
            f"lexical must be a number in [0, 1] (weight of a BM25 score computed on the candidate pool; 0: the "
            f"base's scores alone) or None (the preset's), got {value!r}"
        )
    return float(value)


def _optional(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``check`` for a setting whose None means "the default"."""
    return lambda value: None if value is None else check(value)


def _count_check(name: str, meaning: str, default: str) -> Callable[[Any], int | None]:
    """The check of a setting that is None (``default``) or an int >= 0 (``meaning``)."""
    return _optional(partial(check_min_int, name=name, minimum=0, hint=f" ({meaning}) or None ({default})"))


def resolve_k(value: object, alias: object, default: int | None, name: str = "similarity_top_k") -> int | None:
    """The number of results from a setting and its alias ``k`` (LlamaIndex's ``similarity_top_k``); both given
    must agree; ``default`` when neither is.

    >>> resolve_k(None, 3, 5), resolve_k(None, None, 5)
    (3, 5)
    """
    value, alias = check_k(value, name), check_k(alias)
    if value is not None and alias is not None and value != alias:
        raise ValueError(f"{name}={value} and k={alias} disagree: pass only one of them")
    chosen = value if value is not None else alias
    return default if chosen is None else chosen


def check_pool_size(value: object) -> int | None:
    """``pool_size``: None (``max(10 * k, 50)``) or a positive int."""
    return check_k(value, "pool_size")


def check_order(value: object) -> str | None:
    """``order``: None (the preset's), ``"score"`` or ``"position"`` (document order)."""
    if value is not None and value not in ("score", "position"):
        raise ValueError(f"order must be 'score' or 'position' (document order) or None (the preset's), got {value!r}")
    return value  # type: ignore[return-value]


def _check_outside(value: object) -> str:
    """``outside``: ``"floor"`` or ``"ignore"``."""
    if value not in ("floor", "ignore"):
        raise ValueError(f"outside must be 'floor' or 'ignore', got {value!r}")
    return value  # type: ignore[return-value]


def check_on_missing_position(value: object, *, links: bool = True) -> str:
    """The canonical ``on_missing_position`` (old spellings mapped); ``links=False`` where candidates carry no
    PREVIOUS/NEXT relationships (LangChain Documents)."""
    canonical = "raise" if isinstance(value, str) and value == "error" else value
    if canonical not in _MISSING_POSITION_MODES:
        raise ValueError(
            f"on_missing_position must be 'raise' (alias 'error'), 'isolate' or 'links' (LlamaIndex nodes), "
            f"got {value!r}"
        )
    if canonical == "links" and not links:
        raise ValueError(
            "on_missing_position='links' follows LlamaIndex PREVIOUS/NEXT relationships, which LangChain Documents "
            "do not have: use 'isolate', or write positions with add_positions"
        )
    return canonical  # type: ignore[return-value]


def stored_key(metadata: Mapping[str, Any], key: str) -> str:
    """The key that holds ``key``'s value in ``metadata``: ``key``, or (for a default key that is not set) its old
    name (:data:`LEGACY_KEYS`) where that is set.

    >>> stored_key({"position": 3}, DEFAULT_POSITION_KEY), stored_key({"position": 3}, "chunk")
    ('position', 'chunk')
    """
    legacy = LEGACY_KEYS.get(key)
    if metadata.get(key) is None and legacy is not None and metadata.get(legacy) is not None:
        return legacy
    return key


def read_key(metadata: Mapping[str, Any], key: str) -> Any:
    """``metadata[key]``, else (for a default key) the value under its old name, else None (:func:`stored_key`).

    >>> read_key({"position": 3}, DEFAULT_POSITION_KEY), read_key({"position": 3}, "chunk")
    (3, None)
    """
    return metadata.get(stored_key(metadata, key))


def check_key(name: str, value: object) -> str:
    """A metadata key setting (``doc_id_key``, ``position_key``): a non-empty str."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty metadata key (str), got {value!r}")
    return value


def check_keys(doc_id_key: object, position_key: object) -> tuple[str, str]:
    """Both metadata keys, checked, and different from each other."""
    doc_id_key, position_key = check_key("doc_id_key", doc_id_key), check_key("position_key", position_key)
    if doc_id_key == position_key:
        raise ValueError(f"doc_id_key and position_key must differ, both are {doc_id_key!r}")
    return doc_id_key, position_key


def _check_relation(value: object) -> Relation | None:
    """``relation``: None (the preset's ``ContextRelation``) or a core :class:`Relation`."""
    if value is not None and not isinstance(value, Relation):
        raise TypeError(f"relation must be a Relation such as ContextRelation(0.3) or None, got {value!r}")
    return value


def _check_store(value: object) -> NeighbourSource | None:
    """``store``: None or a :class:`~fragrel_integrations.FragmentStore` (anything with ``neighbours(keys,
    radius=)``)."""
    if value is not None and not callable(getattr(value, "neighbours", None)):
        raise TypeError(
            "store must be a fragrel_integrations.FragmentStore (filled by add_positions(chunks, store=...) or "
            f"PositionTagger(store=...)), got {type(value).__name__}"
        )
    return value  # type: ignore[return-value]


def _check_embedder(value: object) -> Any:
    from ..models.convert import optional_embedder

    return optional_embedder(value)  # LangChain, LlamaIndex or plain embedders; TypeError naming the fix


#: What each setting means, in the words every wrapper shows (LangChain field and LlamaIndex ``Field`` descriptions).
SETTING_DOCS: dict[str, str] = {
    "preset": "Settings for a kind of text: 'auto' (chosen per pool from what it looks like), 'general', 'story', "
    "'dialogue', 'haystack' or 'multidoc' (relation, alpha, top_m, order, lexical); explicit settings win.",
    "alpha": "Weight of the environment score; None = the preset's.",
    "top_m": "How many of the best candidates lend support to their neighbours; None = the preset's, 0 = all.",
    "relation": "The fragment relation (a core Relation); None = the preset's ContextRelation.",
    "lexical": "Weight in [0, 1] of a BM25 score computed on the pool itself, fused with the base's scores (or "
    "ranking); None = the preset's (0 for a base that already ranks by words: BM25, a fusion with BM25), 0 = the "
    "base's scores alone.",
    "embedder": "Embeds the pool for a relation that needs embeddings (e.g. SemanticRelation); it never scores the "
    "pool (a LangChain or LlamaIndex embedding, or any Embedder).",
    "score_embedder": "Re-scores a score-less pool by its cosine instead of the base's ranking (your explicit choice).",
    "pool_size": "Candidates to ask the base retriever for; None = max(10 * k, 50).",
    "store": "FragmentStore holding every chunk (add_positions(..., store=...) or PositionTagger(store=...)), for "
    "neighbour expansion.",
    "expand": "Neighbour radius: stored fragments within expand positions of a candidate join the pool; None = 1 "
    "with a store, else 0.",
    "outside": "Positions outside the pool count with the pool's lowest score ('floor') or not at all ('ignore').",
    "order": "'score' or 'position' (document order, e.g. dialogue turns by time); None = the preset's.",
    "doc_id_key": "Metadata key of the document id (default 'fragrel_doc_id'; the old name 'doc_id' is still read).",
    "position_key": "Metadata key of the position within the document (default 'fragrel_position'; the old name "
    "'position' is still read).",
    "score_key": "Metadata key of the base's score; None = the store's relevance score, then 'relevance_score', "
    "then 'score'.",
    "on_missing_position": "'raise' a ValueError naming the fix when a candidate has no position ('error' is its "
    "old spelling), 'isolate' (no environment for it) or 'links' (LlamaIndex PREVIOUS/NEXT relationships between "
    "candidates; adjacent chunks only).",
}


def field_checks(names: Sequence[str], *, links: bool = True) -> dict[str, Callable[[Any], Any]]:
    """The kit's check of each named wrapper field, for a pydantic ``mode="before"`` field validator (so a bad
    value fails with the kit's words, not pydantic's). ``k``, ``top_n`` and ``pool_size`` count results or
    candidates, ``budget_words`` the words of a core index's hits; ``links=False`` where candidates carry no
    PREVIOUS/NEXT relationships.

    >>> field_checks(["top_n"])["top_n"](0)
    Traceback (most recent call last):
    ValueError: top_n must be a positive int or None, got 0
    """
    checks: dict[str, Callable[[Any], Any]] = {
        "k": check_k,
        "top_n": partial(check_k, name="top_n"),
        "pool_size": check_pool_size,
        "budget_words": partial(check_k, name="budget_words"),
        "preset": _check_preset,
        "alpha": _optional(check_alpha),
        "top_m": _count_check("top_m", "how many of the best candidates lend support; 0: all", "the preset's"),
        "lexical": _optional(_check_lexical),
        "relation": _check_relation,
        "store": _check_store,
        "expand": _count_check("expand", "neighbour radius", "1 with a store"),
        "outside": _check_outside,
        "order": check_order,
        "on_missing_position": partial(check_on_missing_position, links=links),
        "doc_id_key": partial(check_key, "doc_id_key"),
        "position_key": partial(check_key, "position_key"),
        "score_key": _optional(partial(check_key, "score_key")),
    }
    return {name: checks[name] for name in names}


# ------------------------------------------------------------------------------------------------ the settings


@dataclass(frozen=True)
class WrapperSettings:
    """The resolved, checked FragRel settings of one wrapper; :meth:`rerank` scores a candidate pool with them.

    ``top_m`` 0 means every candidate lends support; ``expand`` is the store neighbour radius. With
    ``preset="auto"`` the settings the user left unset stay None and are chosen for each pool (:meth:`for_pool`).
    """

    preset: str
    relation: Relation | None
    alpha: float | None
    top_m: int | None
    order: Literal["score", "position"] | None
    lexical: float | None
    outside: Literal["floor", "ignore"]
    embedder: Any
    score_embedder: Any
    store: NeighbourSource | None
    expand: int
    doc_id_key: str
    position_key: str
    on_missing_position: Literal["raise", "isolate", "links"]

    @classmethod
    def resolve(
        cls,
        *,
        preset: str | Preset = DEFAULT_PRESET,
        relation: Relation | None = None,
        alpha: float | None = None,
        top_m: int | None = None,
        order: str | None = None,
        lexical: float | None = None,
        outside: str = "floor",
        embedder: object = None,
        score_embedder: object = None,
        store: object = None,
        expand: int | None = None,
        doc_id_key: str = DEFAULT_DOC_ID_KEY,
        position_key: str = DEFAULT_POSITION_KEY,
        on_missing_position: str = "raise",
        links: bool = True,
    ) -> WrapperSettings:
        """Check every setting and fill the unset ones from ``preset`` (``relation``, ``alpha``, ``top_m``,
        ``order``, ``lexical``; with ``"auto"`` they are chosen per pool); ``expand`` defaults to 1 with a ``store``,
        else 0; ``top_m=0`` lets every candidate lend support. ``links=False`` for a framework whose candidates
        carry no PREVIOUS/NEXT relationships."""
        given = dict(locals())  # the arguments by name
        checked = {name: check(given[name]) for name, check in field_checks(FIELD_SETTINGS, links=links).items()}
        if checked["expand"] is None:
            checked["expand"] = 0 if checked["store"] is None else 1
        if checked["expand"] > 0 and checked["store"] is None:
            raise ValueError(
                "expand > 0 needs a store: fill a FragmentStore with add_positions(chunks, store=store) or "
                "PositionTagger(store=store); or leave expand unset"
            )
        check_keys(checked["doc_id_key"], checked["position_key"])
        settings = cls(**checked, embedder=_check_embedder(embedder), score_embedder=_check_embedder(score_embedder))
        return settings if checked["preset"] == AUTO else settings.for_pool(())  # lexical: per base (for_pool)

    @classmethod
    def of(cls, wrapper: object, *, links: bool = True) -> WrapperSettings:
        """:meth:`resolve` with every setting read from the attribute of the same name on ``wrapper`` (a
        wrapper's fields; :data:`SETTING_NAMES`)."""
        return cls.resolve(**{name: getattr(wrapper, name) for name in SETTING_NAMES}, links=links)

    def for_pool(self, fragments: Sequence[Fragment], *, ranks_by_words: bool | None = None) -> WrapperSettings:
        """These settings with the unset ones filled from the preset (for ``"auto"``: the preset of
        ``fragments``, :func:`~fragrel_integrations.core.presets.detect_preset`). ``lexical`` is filled only when
        ``ranks_by_words`` is given: 0 for a base that already ranks by the query's words (BM25, a hybrid
        ensemble), else the preset's :data:`POOL_LEXICAL`."""
        chosen = get_preset(self.preset, fragments)
        lexical = self.lexical
        if lexical is None and ranks_by_words is not None:
            lexical = 0.0 if ranks_by_words else POOL_LEXICAL[chosen.name]
        return replace(
            self,
            relation=chosen.relation() if self.relation is None else self.relation,
            alpha=chosen.alpha if self.alpha is None else self.alpha,
            top_m=(chosen.top_m or 0) if self.top_m is None else self.top_m,
            order=chosen.order if self.order is None else self.order,
            lexical=lexical,
        )

    def rerank(
        self,
        query: str,
        fragments: Sequence[Fragment],
        *,
        scores: Sequence[float | None] | None,
        k: int | None,
        ranks_by_words: bool = False,
    ) -> list[ScoredFragment]:
        """:func:`~fragrel_integrations.core.rerank.rerank` of a candidate pool (best first) with these settings
        (with ``preset="auto"``, those of the pool's kind of text); ``ranks_by_words``: the base already ranks by
        the query's words (see :meth:`for_pool`)."""
        s = self.for_pool(fragments, ranks_by_words=ranks_by_words)
        names = ("relation", "alpha", "embedder", "score_embedder", "store", "expand", "order", "outside", "lexical")
        return rerank(query, fragments, k=k, scores=scores, top_m=s.top_m or None, **{n: getattr(s, n) for n in names})


#: The settings :meth:`WrapperSettings.resolve` takes, by the name every wrapper gives them.
SETTING_NAMES: tuple[str, ...] = tuple(field.name for field in fields(WrapperSettings))
#: The settings a wrapper checks field by field (:func:`field_checks`); the embedders are checked by :meth:`resolve`.
FIELD_SETTINGS: tuple[str, ...] = tuple(name for name in SETTING_NAMES if name not in ("embedder", "score_embedder"))
