"""Write ``fragrel_doc_id`` / ``fragrel_position`` into node metadata at indexing time (and optionally into a
FragmentStore).

FragRel's context relation needs to know where each chunk sits in its document. LlamaIndex node parsers link
the chunks of one document with PREVIOUS/NEXT relationships but store no position; :class:`PositionTagger`
turns that chain into ``metadata["fragrel_position"]`` (0, 1, 2, ... within each document) so the position survives
any vector store, and hides the two keys from the embedding and LLM text so that tagging changes no embedding.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from llama_index.core.bridge.pydantic import Field
from llama_index.core.schema import BaseNode, NodeRelationship, TransformComponent

from .._validation import check_type
from ..adapters.pools import chain_order
from ..adapters.wrapper_settings import DEFAULT_DOC_ID_KEY, DEFAULT_POSITION_KEY, SETTING_DOCS, check_keys, stored_key
from ..core.store import FragmentStore
from ._convert import fragment_for_store, node_doc_id, node_links, related_id, with_hidden

__all__ = ["PositionTagger", "tag_positions"]

logger = logging.getLogger(__name__)


def _document_order(nodes: list[BaseNode], doc_id: str, use_links: bool) -> list[BaseNode]:
    """The nodes of one document in reading order: the PREVIOUS/NEXT chain when it covers them all, else as
    given (node parsers emit chunks in document order)."""
    if not use_links or len(nodes) < 2:
        return nodes
    if len({n.node_id for n in nodes}) != len(nodes):
        raise ValueError(f"document {doc_id!r} has repeated node ids: tag each node once")
    order = chain_order(**node_links(nodes))
    if not order:
        logger.debug(
            "document %r: PREVIOUS/NEXT links do not form one chain over its nodes; keeping the given order", doc_id
        )
        return nodes
    chain = [nodes[i] for i in order]
    if related_id(chain[0], NodeRelationship.PREVIOUS) is not None:
        logger.warning(
            "document %r: its first tagged node has a PREVIOUS node that was not given; positions count from this "
            "batch. Tag all nodes of a document together.",
            doc_id,
        )
    return chain


def tag_positions(
    nodes: Sequence[BaseNode],
    *,
    doc_id_key: str = DEFAULT_DOC_ID_KEY,
    position_key: str = DEFAULT_POSITION_KEY,
    store: FragmentStore | None = None,
    use_links: bool = True,
    hide_from_embed: bool = True,
    hide_from_llm: bool = True,
    default_doc_id: str | None = None,
) -> list[BaseNode]:
    """Set ``metadata[doc_id_key]`` and ``metadata[position_key]`` on each node, in place, and return the nodes.

    The default keys are ``fragrel_doc_id`` / ``fragrel_position``: LlamaIndex itself writes ``doc_id`` (the
    source document's id) into every vector store's metadata, so a store-side filter on that key finds its value,
    not FragRel's. The old defaults ``doc_id`` / ``position`` are still read on nodes tagged before.

    The document is ``metadata[doc_id_key]`` when already set, else the node's source document
    (``ref_doc_id``), else ``default_doc_id``. Positions count from 0 within each document, in the order of the
    PREVIOUS/NEXT chain when ``use_links`` and the links cover the document's nodes, else in the given order.
    Give all nodes of a document in one call (positions restart in every call). With ``store``, every node is
    also written to that :class:`~fragrel_integrations.FragmentStore` (one transaction) for neighbour expansion.

    >>> from llama_index.core.schema import TextNode
    >>> nodes = tag_positions([TextNode(text="a"), TextNode(text="b")], default_doc_id="book")
    >>> [(n.metadata["fragrel_doc_id"], n.metadata["fragrel_position"]) for n in nodes]
    [('book', 0), ('book', 1)]
    """
    check_keys(doc_id_key, position_key)
    if store is not None:
        check_type(store, FragmentStore, "store must be a fragrel_integrations.FragmentStore")
    nodes = list(nodes)
    groups: dict[str, list[BaseNode]] = {}
    for i, node in enumerate(nodes):
        check_type(node, BaseNode, f"nodes[{i}] must be a llama_index node")
        doc_id = node_doc_id(node, doc_id_key)
        if doc_id is None:
            if default_doc_id is None:
                raise ValueError(
                    f"node {node.node_id!r} has no source document and no {doc_id_key!r} metadata: build nodes from "
                    "Documents with a node parser, set node.metadata[doc_id_key], or pass default_doc_id"
                )
            doc_id = str(default_doc_id)
        groups.setdefault(doc_id, []).append(node)
    fragments = []
    for doc_id, members in groups.items():
        for position, node in enumerate(_document_order(members, doc_id, use_links)):
            # the keys it writes, and an old-named key it read the document from (FragRel's too: hidden alike)
            hidden = [doc_id_key, position_key, stored_key(node.metadata, doc_id_key)]
            node.metadata[doc_id_key] = doc_id
            node.metadata[position_key] = position
            if hide_from_embed:
                node.excluded_embed_metadata_keys = with_hidden(node.excluded_embed_metadata_keys, hidden)
            if hide_from_llm:
                node.excluded_llm_metadata_keys = with_hidden(node.excluded_llm_metadata_keys, hidden)
            if store is not None:
                fragments.append(fragment_for_store(node, doc_id, position))
    if store is not None:
        store.add(fragments)
    return nodes


class PositionTagger(TransformComponent):
    """A LlamaIndex transformation that runs :func:`tag_positions` (put it after the node parser).

    >>> from llama_index.core.node_parser import SentenceSplitter                          # doctest: +SKIP
    >>> steps = [SentenceSplitter(), PositionTagger(), embed_model]                         # doctest: +SKIP
    >>> nodes = IngestionPipeline(transformations=steps).run(documents=docs)              # doctest: +SKIP
    >>> index = VectorStoreIndex.from_documents(                                           # doctest: +SKIP
    ...     docs, transformations=[SentenceSplitter(), PositionTagger(store=store)], embed_model=embed_model)

    Notes: put it after every transformation that changes text or metadata (it stores the text as it will be
    embedded) and before the embedding model. Run it in one process (``num_workers`` splits documents across
    batches). With an ``IngestionPipeline`` cache, a cached run skips the transformation, so the ``store`` is
    written only on a cache miss (call :func:`tag_positions` on the nodes to fill a store afterwards).
    """

    doc_id_key: str = Field(default=DEFAULT_DOC_ID_KEY, description=SETTING_DOCS["doc_id_key"])
    position_key: str = Field(default=DEFAULT_POSITION_KEY, description=SETTING_DOCS["position_key"])
    use_links: bool = Field(default=True, description="Order each document's nodes by their PREVIOUS/NEXT chain.")
    hide_from_embed: bool = Field(default=True, description="Keep the two keys out of the embedding text.")
    hide_from_llm: bool = Field(default=True, description="Keep the two keys out of the LLM context.")
    default_doc_id: str | None = Field(default=None, description="Document id for nodes without a source document.")
    store: FragmentStore | None = Field(default=None, exclude=True, description="Also write the nodes here.")

    @classmethod
    def class_name(cls) -> str:
        return "PositionTagger"

    def model_post_init(self, context: Any, /) -> None:
        check_keys(self.doc_id_key, self.position_key)

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[BaseNode]:
        return tag_positions(nodes, **{name: getattr(self, name) for name in type(self).model_fields})
