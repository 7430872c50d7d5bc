"""LlamaIndex nodes <-> core fragments, and the one re-ranking step shared by the retriever and the postprocessor.

All scoring is the core's :func:`~fragrel_integrations.core.rerank.rerank`; this module only turns nodes into
``Fragment`` keys ``(doc_id, position)`` and the results back into copied nodes with the scores in metadata.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from llama_index.core.schema import BaseNode, MetadataMode, NodeRelationship, NodeWithScore, RelatedNodeInfo, TextNode

from .. import adapters as kit
from .._validation import check_type
from ..adapters import pools as pool
from ..adapters.wrapper_settings import SCORE_KEYS, score_metadata
from ..core.fragments import Fragment, ScoredFragment, parse_position

__all__ = [
    "NodeReranker",
    "check_all",
    "check_nodes",
    "fragment_for_store",
    "hit_node",
    "node_doc_id",
    "node_from_fragment",
    "node_links",
    "node_position",
    "related_id",
    "scored_node",
    "scoring_text",
    "with_hidden",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

STORE_NODE_KEY = "fragrel_node"  # what a FragmentStore row keeps about its LlamaIndex node (id, source, hidden keys)

_TAGGER_HINT = (
    "tag the nodes when indexing with fragrel_integrations.llama_index.PositionTagger() (a transformation, "
    "e.g. VectorStoreIndex.from_documents(docs, transformations=[SentenceSplitter(), PositionTagger()])) "
    "or tag_positions(nodes), or pass on_missing_position='links' (PREVIOUS/NEXT links between candidates) "
    "or 'isolate' (no environment for such nodes)"
)


def node_doc_id(node: BaseNode, doc_id_key: str) -> str | None:
    """``metadata[doc_id_key]`` if set (a default key also under its old name), else the id of the node's SOURCE
    document (``ref_doc_id``)."""
    value = kit.read_key(node.metadata, doc_id_key)
    return related_id(node, NodeRelationship.SOURCE) if value is None else str(value)


def node_position(node: BaseNode, position_key: str) -> int | None:
    """``metadata[position_key]`` as an int (ints that went through a vector store as ``3.0`` or ``"3"`` too)."""
    position_key = kit.stored_key(node.metadata, position_key)
    value = node.metadata.get(position_key)
    if value is None:
        return None
    try:
        return parse_position(value, f"node {node.node_id!r}: metadata[{position_key!r}]")
    except (TypeError, ValueError) as exc:
        raise type(exc)(
            f"{exc}; re-tag the nodes with PositionTagger or set position_key to the metadata key that holds the "
            "position"
        ) from None


def _location(node: BaseNode, doc_id_key: str, position_key: str) -> tuple[str, int] | None:
    doc_id, position = node_doc_id(node, doc_id_key), node_position(node, position_key)
    return None if doc_id is None or position is None else (doc_id, position)


def related_id(node: BaseNode, rel: NodeRelationship) -> str | None:
    """The node id of a single PREVIOUS/NEXT/SOURCE relationship, or None."""
    info = node.relationships.get(rel)
    return info.node_id if isinstance(info, RelatedNodeInfo) else None


def node_links(nodes: Sequence[BaseNode]) -> dict[str, list[Any]]:
    """The ids and PREVIOUS/NEXT ids of ``nodes``, for :func:`~fragrel_integrations.adapters.pools.linked_keys` and
    :func:`~fragrel_integrations.adapters.pools.chain_order`."""
    return {
        "ids": [n.node_id for n in nodes],
        "previous": [related_id(n, NodeRelationship.PREVIOUS) for n in nodes],
        "following": [related_id(n, NodeRelationship.NEXT) for n in nodes],
    }


def check_all(items: object, what: str, kind: type[T], label: str) -> list[T]:
    """``items`` as a list of ``kind``, or a TypeError naming the first item that is not one."""
    items = list(items)  # type: ignore[call-overload]
    for i, item in enumerate(items):
        check_type(item, kind, f"{what}[{i}] must be {label}")
    return items


def check_nodes(items: object, what: str) -> list[NodeWithScore]:
    """``items`` as a list of ``NodeWithScore`` or a TypeError naming ``what`` produced it."""
    return check_all(items, what, NodeWithScore, "a NodeWithScore")


def with_hidden(keys: Sequence[str], extra: Sequence[str]) -> list[str]:
    """``keys`` and then ``extra``, each once (a node's ``excluded_*_metadata_keys``)."""
    return list(dict.fromkeys([*keys, *extra]))


def scored_node(node: BaseNode, scored: ScoredFragment) -> BaseNode:
    """A copy of ``node`` with the three FragRel scores in its metadata (hidden from the embed/LLM text)."""
    return node.model_copy(
        update={
            "metadata": {**node.metadata, **score_metadata(scored)},
            "excluded_embed_metadata_keys": with_hidden(node.excluded_embed_metadata_keys, SCORE_KEYS),
            "excluded_llm_metadata_keys": with_hidden(node.excluded_llm_metadata_keys, SCORE_KEYS),
        }
    )


def scoring_text(node: BaseNode) -> str:
    """The text FragRel scores and shows the preset detector: the node's content without its metadata header
    (``MetadataMode.NONE``), the same text a LangChain Document's ``page_content`` holds, so identical candidates
    score alike in both frameworks (a ``key: value`` header would read as dialogue lines)."""
    return node.get_content(metadata_mode=MetadataMode.NONE)


def fragment_for_store(node: BaseNode, doc_id: str, position: int) -> Fragment:
    """The :class:`Fragment` a :class:`FragmentStore` keeps for ``node``: its scoring text (as embedded), its
    JSON-serialisable metadata and, under ``"fragrel_node"``, its id, raw text, source document and hidden keys."""
    metadata, dropped = pool.jsonable_metadata(node.metadata)
    if dropped:
        logger.debug("node %s: metadata keys %s are not JSON-serialisable and were not stored", node.node_id, dropped)
    metadata[STORE_NODE_KEY] = {
        "id": node.node_id,
        "text": scoring_text(node),
        "ref_doc_id": related_id(node, NodeRelationship.SOURCE),
        "excluded_embed_metadata_keys": list(node.excluded_embed_metadata_keys),
        "excluded_llm_metadata_keys": list(node.excluded_llm_metadata_keys),
    }
    return Fragment(scoring_text(node), doc_id, position, metadata)


def node_from_fragment(
    fragment: Fragment, *, doc_id_key: str = kit.DEFAULT_DOC_ID_KEY, position_key: str = kit.DEFAULT_POSITION_KEY
) -> TextNode:
    """A :class:`TextNode` for a core fragment (a stored neighbour, or a hit of a core index)."""
    metadata = dict(fragment.metadata)
    info = metadata.pop(STORE_NODE_KEY, None)
    info = info if isinstance(info, Mapping) else {}
    metadata[doc_id_key] = fragment.doc_id
    metadata[position_key] = fragment.position
    hidden = [doc_id_key, position_key]
    node = TextNode(
        id_=str(info.get("id") or f"fragrel:{fragment.doc_id}:{fragment.position}"),
        text=str(info.get("text", fragment.text)),
        metadata=metadata,
        excluded_embed_metadata_keys=list(info.get("excluded_embed_metadata_keys", hidden)),
        excluded_llm_metadata_keys=list(info.get("excluded_llm_metadata_keys", hidden)),
    )
    if info.get("ref_doc_id"):
        node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=str(info["ref_doc_id"]))
    return node


def hit_node(hit: ScoredFragment, doc_id_key: str, position_key: str) -> NodeWithScore:
    """A core hit as a scored ``NodeWithScore`` (:func:`node_from_fragment` with the scores, :func:`scored_node`)."""
    node = node_from_fragment(hit.fragment, doc_id_key=doc_id_key, position_key=position_key)
    return NodeWithScore(node=scored_node(node, hit), score=hit.score)


@dataclass(frozen=True)
class NodeReranker:
    """The checked FragRel settings of a LlamaIndex component (the settings kit's :class:`WrapperSettings`) and
    the number of nodes to keep; calling it re-ranks ``NodeWithScore`` candidates."""

    settings: kit.WrapperSettings
    k: int | None  # checked by the owner
    ranks_by_words: bool = False  # the base ranks by the query's words (BM25, fusion with BM25): no pool BM25
    score_kind: str | None = None  # what node scores are (the store's metric; pool.SCORE_KINDS); None: the rule

    def __call__(self, candidates: Sequence[NodeWithScore], query: str) -> list[NodeWithScore]:
        """Re-rank ``candidates`` for ``query``; returns new ``NodeWithScore`` objects (inputs are not modified).

        Node scores are oriented first (:func:`~fragrel_integrations.adapters.pools.oriented_scores`): distances
        become similarities."""
        kit.check_query(query)
        candidates = check_nodes(candidates, "candidates")
        if not candidates:
            return []
        nodes = [c.node for c in candidates]
        s = self.settings

        def error(missing: list[int]) -> ValueError:
            node = nodes[missing[0]]
            what = s.position_key if node_doc_id(node, s.doc_id_key) is not None else s.doc_id_key
            return ValueError(
                f"{len(missing)} of {len(nodes)} nodes have no {what!r} metadata (e.g. node {node.node_id!r}): "
                + _TAGGER_HINT
            )

        ranked = pool.rerank_items(
            s,
            query,
            nodes,
            locate=lambda n: _location(n, s.doc_id_key, s.position_key),
            fragment=lambda node, key: Fragment(scoring_text(node), *key, dict(node.metadata)),
            isolated=lambda i: (f"fragrel-isolated:{nodes[i].node_id}", 0),
            linked=lambda missing: pool.linked_keys(**node_links([nodes[i] for i in missing])),
            error=error,
            scores=pool.oriented_scores([c.score for c in candidates], self.score_kind),
            k=self.k,
            ranks_by_words=self.ranks_by_words,
            neighbour=partial(node_from_fragment, doc_id_key=s.doc_id_key, position_key=s.position_key),
        )
        return [NodeWithScore(node=scored_node(node, hit), score=hit.score) for node, hit in ranked]
