"""What the LangChain and LlamaIndex surprise-tree retrievers share (no framework is imported here).

The adapters only convert: their documents / nodes to texts, a :class:`~.tree.TreeHit` to their document type
(with :func:`hit_metadata` and :func:`hit_id`), and their settings to a :meth:`~.tree.SurpriseTree.retrieve`
call (:func:`search`). Building a tree from texts is :func:`build_tree` / :func:`abuild_tree`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, Literal, TypedDict

from .._validation import check_type
from ..core.relation_aware import check_alpha
from ..core.selection import check_k
from ..core.tree import FIELDS, SUMMARISERS, ExtractiveSummariser, Summariser, TreeRelation
from ..core.tree.summary_tree import SurpriseTree, TreeHit
from ..core.tree.tree_nodes import check_search
from ..models.convert import optional_embedder
from .arguments import split_kwargs

__all__ = [
    "HIT_KEYS",
    "SEARCH_CHECKS",
    "SEARCH_DEFAULTS",
    "SEARCH_DOCS",
    "SEARCH_OPTIONS",
    "TreeSearch",
    "abuild_tree",
    "build_tree",
    "hit_id",
    "hit_metadata",
    "leaf_summariser",
    "search",
    "search_settings",
    "tree_inputs",
]

#: The metadata keys :func:`hit_metadata` adds (LlamaIndex hides them from the embed and LLM text).
HIT_KEYS = ("tree_node_id", "tree_layer", "tree_field", "tree_children", "relevance_score", "doc_id", "position")


def check_mode(value: object) -> str:
    """``mode``: ``"collapsed"`` (score every node text) or ``"traversal"`` (walk down from the roots)."""
    check_search(value, FIELDS)
    return value  # type: ignore[return-value]


def check_fields(value: object) -> tuple[str, ...]:
    """``fields``: a non-empty subset of ``("text", "summary", "surprise")``, as a tuple."""
    return check_search("collapsed", value)  # type: ignore[arg-type]


def check_tree_relation(value: object) -> TreeRelation | None:
    """``relation``: None or a :class:`TreeRelation`."""
    return None if value is None else check_type(value, TreeRelation, "relation must be a TreeRelation or None")


#: One check per setting of a surprise-tree retriever (``k`` and its LlamaIndex name ``similarity_top_k`` too).
SEARCH_CHECKS: dict[str, Callable[[Any], Any]] = {
    "k": check_k,
    "similarity_top_k": partial(check_k, name="similarity_top_k"),
    "budget_tokens": partial(check_k, name="budget_tokens"),
    "mode": check_mode,
    "fields": check_fields,
    "width": partial(check_k, name="width"),
    "relation": check_tree_relation,
    "alpha": check_alpha,
}

#: What each search setting of a surprise-tree retriever means, in the words both adapters show.
SEARCH_DOCS: dict[str, str] = {
    "budget_tokens": "Also stop when the returned texts reach this many tokens.",
    "mode": "'collapsed' (every node text competes) or 'traversal' (walk down from the roots).",
    "fields": "Which node texts may be returned: any of 'text', 'summary', 'surprise'.",
    "width": "Nodes kept per level in traversal mode.",
    "relation": "FragRel over the tree (TreeRelation(): texts related by node, parent/child and chunk position).",
    "alpha": "Weight of the relation's environment score (FragRel default 0.5).",
}


def tree_inputs(texts: list[str], ids: Sequence[str | None], metadatas: list[dict[str, Any]]) -> dict[str, Any]:
    """``texts``, ``doc_ids`` and ``metadatas`` for :meth:`SurpriseTree.build` / ``insert``: the ids only when
    every document has one and they are distinct (else the tree numbers the documents).

    >>> tree_inputs(["a", "b"], ["x", "x"], [{}, {}])["doc_ids"] is None
    True
    """
    usable = all(i is not None for i in ids) and len(set(ids)) == len(ids)
    return {"texts": texts, "doc_ids": list(ids) if usable else None, "metadatas": metadatas}


def leaf_summariser(
    chat_model: Any, summariser: str | None, embedder: Any, owner: str, **options: Any
) -> tuple[str, Summariser | ExtractiveSummariser]:
    """The summariser of single chunks for an ingestion step: ``"llm"`` (one ``chat_model`` call per chunk) or
    ``"extractive"`` (no model call; sentences embedded with ``embedder``, None = the embedded MiniLM); None
    picks ``"llm"`` when a ``chat_model`` is given. ``options``: ``summary_tokens``, ``surprise_tokens``,
    ``max_concurrency``, ``show_progress``; ``owner`` names the component in errors. Returns the name chosen and
    the summariser."""
    if summariser is None:
        summariser = "llm" if chat_model is not None else "extractive"
    if summariser not in SUMMARISERS:
        raise ValueError(f"summariser must be one of {SUMMARISERS} or None, got {summariser!r}")
    if summariser == "llm":
        if chat_model is None:
            raise ValueError(
                f"{owner}(summariser='llm') needs a chat_model (a LlamaIndex LLM or any ChatModel); "
                "use summariser='extractive' for model-free metadata"
            )
        return summariser, Summariser(chat_model, **options)
    options.pop("max_concurrency", None)
    model = optional_embedder(embedder)
    if model is None:
        from ..models.local import default_embedder

        model = default_embedder()
    return summariser, ExtractiveSummariser(model, **options)


class TreeSearch(TypedDict, total=False):
    """The search settings of a surprise-tree retriever besides ``k`` (meanings: :data:`SEARCH_DOCS`; defaults:
    :data:`SEARCH_DEFAULTS`, those of :meth:`SurpriseTree.retrieve`, which receives them)."""

    budget_tokens: int | None
    mode: Literal["collapsed", "traversal"]
    fields: Sequence[str]
    width: int
    relation: TreeRelation | None
    alpha: float


#: The retrieval settings an adapter holds besides ``k`` (passed on to :meth:`SurpriseTree.retrieve`).
SEARCH_OPTIONS: tuple[str, ...] = tuple(TreeSearch.__annotations__)
#: Each search setting's default: the one :meth:`SurpriseTree.retrieve` declares.
SEARCH_DEFAULTS: dict[str, Any] = {
    name: inspect.signature(SurpriseTree.retrieve).parameters[name].default for name in SEARCH_OPTIONS
}


def search_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Every search setting, checked (:data:`SEARCH_CHECKS`), the missing ones at their defaults; an unknown
    name is a TypeError listing the settings.

    >>> search_settings({"mode": "traversal"})["mode"], search_settings({})["width"]
    ('traversal', 3)
    """
    unknown = sorted(set(settings) - set(SEARCH_OPTIONS))
    if unknown:
        raise TypeError(f"unexpected keyword argument(s) {unknown}: the search settings are {list(SEARCH_OPTIONS)}")
    return {name: SEARCH_CHECKS[name](settings.get(name, SEARCH_DEFAULTS[name])) for name in SEARCH_OPTIONS}


def hit_metadata(hit: TreeHit) -> dict[str, Any]:
    """The node's metadata plus ``tree_node_id``, ``tree_layer``, ``tree_field`` (text / summary / surprise),
    ``relevance_score``, and ``doc_id`` and ``position`` (leaves) or ``tree_children`` (summary nodes)."""
    node = hit.node
    metadata: dict[str, Any] = {
        **node.metadata,
        "tree_node_id": node.id,
        "tree_layer": node.layer,
        "tree_field": hit.field,
        "relevance_score": hit.score,
    }
    if node.is_leaf:
        metadata["doc_id"], metadata["position"] = node.doc_id, node.position
    else:
        metadata["tree_children"] = list(node.children)
    return metadata


def hit_id(hit: TreeHit) -> str:
    """A stable id for one retrieved text: ``surprise-tree:<node id>:<field>``."""
    return f"surprise-tree:{hit.node.id}:{hit.field}"


def _prepare(kwargs: Mapping[str, Any], names: Sequence[str]) -> tuple[SurpriseTree, dict[str, Any], dict[str, Any]]:
    options = dict(kwargs)
    chat_model, embedder = options.pop("chat_model", None), options.pop("embedder", None)
    where = {"doc_ids": options.pop("doc_ids", None), "metadatas": options.pop("metadatas", None)}
    own, tree_kwargs = split_kwargs(options, names)
    return SurpriseTree(chat_model, optional_embedder(embedder), **tree_kwargs), where, own


def build_tree(
    texts: Sequence[str], kwargs: Mapping[str, Any], names: Sequence[str]
) -> tuple[SurpriseTree, dict[str, Any]]:
    """A :class:`SurpriseTree` built over ``texts``, and the adapter's own options (``names``) of ``kwargs``.

    ``kwargs`` holds ``chat_model`` (None: extractive summaries), ``embedder`` (any model
    :func:`optional_embedder` accepts; None: the embedded MiniLM), ``doc_ids``, ``metadatas``, the adapter's
    options and :class:`SurpriseTree` keywords (``summariser``, ``chunk_tokens``, ``seed``, ...).
    """
    tree, where, own = _prepare(kwargs, names)
    tree.build(texts, **where)
    return tree, own


async def abuild_tree(
    texts: Sequence[str], kwargs: Mapping[str, Any], names: Sequence[str]
) -> tuple[SurpriseTree, dict[str, Any]]:
    """Async :func:`build_tree` (summary calls via ``ainvoke`` with bounded concurrency)."""
    tree, where, own = _prepare(kwargs, names)
    await tree.abuild(texts, **where)
    return tree, own


def search(tree: SurpriseTree, query: str, k: int | None, settings: object) -> list[TreeHit]:
    """``tree.retrieve(query, k=k, ...)`` with the :data:`SEARCH_OPTIONS` read from the adapter ``settings``."""
    return tree.retrieve(query, k=k, **{name: getattr(settings, name) for name in SEARCH_OPTIONS})
