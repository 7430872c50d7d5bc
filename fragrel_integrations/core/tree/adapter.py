"""What the LangChain and LlamaIndex surprise-tree retrievers share (no framework is imported here).

The adapters only convert: their documents / nodes to texts, a :class:`~.tree.TreeHit` to their document type
(with :func:`hit_metadata` and :func:`hit_id`), and their settings to a :meth:`~.tree.SurpriseTree.retrieve`
call (:func:`search`). Building a tree from texts is :func:`build_tree` / :func:`abuild_tree`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..._adapters import split_kwargs
from ...models.convert import optional_embedder
from .tree import SurpriseTree, TreeHit

__all__ = ["SEARCH_OPTIONS", "abuild_tree", "build_tree", "hit_id", "hit_metadata", "search"]

#: The retrieval settings an adapter holds besides ``k`` (passed on to :meth:`SurpriseTree.retrieve`).
SEARCH_OPTIONS = ("budget_tokens", "mode", "fields", "width", "relation", "alpha")


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
