"""LlamaIndex nodes <-> core fragments, and the one re-ranking step shared by the retriever and the postprocessor.

All scoring is the core's :func:`~fragrel_integrations.core.rerank.rerank`; this module only turns nodes into
``Fragment`` keys ``(doc_id, position)`` and the results back into copied nodes with the scores in metadata.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llama_index.core.schema import BaseNode, MetadataMode, NodeRelationship, NodeWithScore, RelatedNodeInfo, TextNode

from ..core import conventions as kit
from ..core.conventions import ORDERS, SCORE_KEYS, check_key, score_metadata
from ..core.relations import Relation
from ..core.selection import check_k
from ..core.types import Fragment, ScoredFragment, parse_position

__all__ = [
    "MISSING_POSITION_MODES",
    "ORDERS",
    "SCORE_KEYS",
    "STORE_NODE_KEY",
    "NodeReranker",
    "check_key",
    "fragment_for_store",
    "node_doc_id",
    "node_from_fragment",
    "node_position",
    "related_id",
    "resolve_k",
    "scored_node",
    "scoring_text",
]

logger = logging.getLogger(__name__)

STORE_NODE_KEY = "fragrel_node"  # what a FragmentStore row keeps about its LlamaIndex node (id, source, hidden keys)
MISSING_POSITION_MODES = (*kit.MISSING_POSITION_MODES, *kit.MISSING_POSITION_ALIASES)

_TAGGER_HINT = (
    "tag the nodes when indexing with fragrel_integrations.llama_index.PositionTagger() (a transformation, "
    "e.g. VectorStoreIndex.from_documents(docs, transformations=[SentenceSplitter(), PositionTagger()])) "
    "or tag_positions(nodes), or pass on_missing_position='links' (PREVIOUS/NEXT links between candidates) "
    "or 'isolate' (no environment for such nodes)"
)


def resolve_k(similarity_top_k: int | None, k: int | None, default: int | None) -> int | None:
    """``similarity_top_k`` and its alias ``k``; both given must agree."""
    similarity_top_k = check_k(similarity_top_k, "similarity_top_k")
    k = check_k(k)
    if similarity_top_k is not None and k is not None and similarity_top_k != k:
        raise ValueError(f"similarity_top_k={similarity_top_k} and k={k} disagree: pass only one of them")
    chosen = similarity_top_k if similarity_top_k is not None else k
    return default if chosen is None else chosen


def node_doc_id(node: BaseNode, doc_id_key: str) -> str | None:
    """``metadata[doc_id_key]`` if set, else the id of the node's SOURCE document (``ref_doc_id``)."""
    value = node.metadata.get(doc_id_key)
    if value is not None:
        return str(value)
    source = node.relationships.get(NodeRelationship.SOURCE)
    return source.node_id if isinstance(source, RelatedNodeInfo) else None


def node_position(node: BaseNode, position_key: str) -> int | None:
    """``metadata[position_key]`` as an int (ints that went through a vector store as ``3.0`` or ``"3"`` too)."""
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


def related_id(node: BaseNode, rel: NodeRelationship) -> str | None:
    """The node id of a single PREVIOUS/NEXT/SOURCE relationship, or None."""
    info = node.relationships.get(rel)
    return info.node_id if isinstance(info, RelatedNodeInfo) else None


def _link_keys(nodes: Sequence[BaseNode], missing: Sequence[int]) -> dict[int, tuple[str, int]]:
    """Pseudo keys from PREVIOUS/NEXT links among the candidates: each run of linked candidates is one pseudo
    document with consecutive positions; a candidate linked to no other candidate is alone in its run."""
    first: dict[str, int] = {}
    for i in missing:
        first.setdefault(nodes[i].node_id, i)
    heads = [i for i in first.values() if related_id(nodes[i], NodeRelationship.PREVIOUS) not in first]
    keys: dict[str, tuple[str, int]] = {}
    for h in heads:
        run, pos, cur = f"fragrel-links:{nodes[h].node_id}", 0, h
        while cur is not None and nodes[cur].node_id not in keys:
            keys[nodes[cur].node_id] = (run, pos)
            pos += 1
            nxt = related_id(nodes[cur], NodeRelationship.NEXT)
            cur = first.get(nxt) if nxt is not None else None
    out = {}
    for i in missing:  # nodes on a cycle of links (malformed) have no head: each stands alone
        nid = nodes[i].node_id
        out[i] = keys.setdefault(nid, (f"fragrel-links:{nid}", 0))
    return out


def _with_hidden(keys: Sequence[str], extra: Sequence[str]) -> list[str]:
    return list(dict.fromkeys([*keys, *extra]))


def scored_node(node: BaseNode, scored: ScoredFragment) -> BaseNode:
    """A copy of ``node`` with the three FragRel scores in its metadata (hidden from the embed/LLM text)."""
    metadata = {
        **node.metadata,
        **score_metadata(scored),
    }
    return node.model_copy(
        update={
            "metadata": metadata,
            "excluded_embed_metadata_keys": _with_hidden(node.excluded_embed_metadata_keys, SCORE_KEYS),
            "excluded_llm_metadata_keys": _with_hidden(node.excluded_llm_metadata_keys, SCORE_KEYS),
        }
    )


def _jsonable(value: object) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def scoring_text(node: BaseNode) -> str:
    """The text FragRel scores: what LlamaIndex embeds (``MetadataMode.EMBED``), so that embedder cosine and a
    vector index's own scores agree."""
    return node.get_content(metadata_mode=MetadataMode.EMBED)


def fragment_for_store(node: BaseNode, doc_id: str, position: int) -> Fragment:
    """The :class:`Fragment` a :class:`FragmentStore` keeps for ``node``: its scoring text (as embedded), its
    JSON-serialisable metadata and, under ``"fragrel_node"``, its id, raw text, source document and hidden keys."""
    metadata: dict[str, Any] = {k: v for k, v in node.metadata.items() if _jsonable(v)}
    dropped = sorted(set(node.metadata) - set(metadata))
    if dropped:
        logger.debug("node %s: metadata keys %s are not JSON-serialisable and were not stored", node.node_id, dropped)
    metadata[STORE_NODE_KEY] = {
        "id": node.node_id,
        "text": node.get_content(metadata_mode=MetadataMode.NONE),
        "ref_doc_id": related_id(node, NodeRelationship.SOURCE),
        "excluded_embed_metadata_keys": list(node.excluded_embed_metadata_keys),
        "excluded_llm_metadata_keys": list(node.excluded_llm_metadata_keys),
    }
    return Fragment(scoring_text(node), doc_id, position, metadata)


def node_from_fragment(fragment: Fragment, *, doc_id_key: str = "doc_id", position_key: str = "position") -> TextNode:
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


@dataclass(frozen=True)
class NodeReranker:
    """The checked FragRel settings of a LlamaIndex component (the settings kit's :class:`WrapperSettings`) and
    the number of nodes to keep; calling it re-ranks ``NodeWithScore`` candidates.

    Build it with :meth:`build`, which hands every setting to the kit.
    """

    settings: kit.WrapperSettings
    k: int | None
    ranks_by_words: bool = False  # the base ranks by the query's words (BM25, fusion with BM25): no pool BM25

    @classmethod
    def build(cls, *, k: int | None = 5, ranks_by_words: bool = False, **settings: Any) -> NodeReranker:
        """Check every setting (:meth:`WrapperSettings.resolve <fragrel_integrations.core.conventions.
        WrapperSettings.resolve>`: the ``preset``'s defaults, ``expand`` 1 with a store)."""
        return cls(kit.WrapperSettings.resolve(**settings), check_k(k), ranks_by_words)

    @property
    def relation(self) -> Relation | None:
        return self.settings.relation

    @property
    def alpha(self) -> float | None:
        return self.settings.alpha

    @property
    def doc_id_key(self) -> str:
        return self.settings.doc_id_key

    @property
    def position_key(self) -> str:
        return self.settings.position_key

    @property
    def on_missing_position(self) -> str:
        return self.settings.on_missing_position

    def keys(self, nodes: Sequence[BaseNode]) -> list[tuple[str, int]]:
        """``(doc_id, position)`` of each node, with the configured fallback for nodes that lack one."""
        keys: list[tuple[str, int] | None] = []
        missing: list[int] = []
        for i, node in enumerate(nodes):
            doc_id, position = node_doc_id(node, self.doc_id_key), node_position(node, self.position_key)
            if doc_id is None or position is None:
                missing.append(i)
                keys.append(None)
            else:
                keys.append((doc_id, position))
        if missing:
            if self.on_missing_position == "raise":
                node = nodes[missing[0]]
                what = self.position_key if node_doc_id(node, self.doc_id_key) is not None else self.doc_id_key
                raise ValueError(
                    f"{len(missing)} of {len(nodes)} nodes have no {what!r} metadata (e.g. node {node.node_id!r}): "
                    + _TAGGER_HINT
                )
            if self.on_missing_position == "isolate":
                filled = {i: (f"fragrel-isolated:{nodes[i].node_id}", 0) for i in missing}
            else:
                filled = _link_keys(nodes, missing)
            for i, key in filled.items():
                keys[i] = key
        return keys  # type: ignore[return-value]

    def __call__(self, candidates: Sequence[NodeWithScore], query: str) -> list[NodeWithScore]:
        """Re-rank ``candidates`` for ``query``; returns new ``NodeWithScore`` objects (inputs are not modified)."""
        if not isinstance(query, str):
            raise TypeError(f"query must be str, got {type(query).__name__}")
        candidates = list(candidates)
        for i, c in enumerate(candidates):
            if not isinstance(c, NodeWithScore):
                raise TypeError(f"candidates[{i}] must be a NodeWithScore, got {type(c).__name__}")
        if not candidates:
            return []
        keys = self.keys([c.node for c in candidates])
        fragments = [
            Fragment(scoring_text(c.node), doc_id, position, dict(c.node.metadata))
            for c, (doc_id, position) in zip(candidates, keys, strict=True)
        ]
        results = self.settings.rerank(
            query, fragments, scores=[c.score for c in candidates], k=self.k, ranks_by_words=self.ranks_by_words
        )
        by_key: dict[tuple[str, int], BaseNode] = {}
        for c, key in zip(candidates, keys, strict=True):
            by_key.setdefault(key, c.node)
        out = []
        for r in results:
            node = by_key.get((r.fragment.doc_id, r.fragment.position))
            if node is None:  # a neighbour that came from the store
                node = node_from_fragment(r.fragment, doc_id_key=self.doc_id_key, position_key=self.position_key)
            out.append(NodeWithScore(node=scored_node(node, r), score=r.score))
        return out
