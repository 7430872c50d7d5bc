"""FragRel as a LlamaIndex node postprocessor (re-ranks the nodes a query engine retrieved)."""

from __future__ import annotations

from typing import Any, Literal

from llama_index.core.bridge.pydantic import Field
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

from ..core.relations import ContextRelation, Relation
from ..core.store import FragmentStore
from ._convert import NodeReranker

__all__ = ["FragRelPostprocessor"]


class FragRelPostprocessor(BaseNodePostprocessor):
    """Re-score the nodes it is given with FragRel and keep the ``top_n`` best.

    Same conversion and scoring as :class:`~fragrel_integrations.llama_index.FragRelRetriever`: node scores are
    the independent scores (or ``embedder`` cosine when a node has none), ``doc_id``/``position`` metadata give
    the context relation, and the returned copies carry ``relevance_score``, ``fragrel_independent_score`` and
    ``fragrel_environment_score`` in metadata. Retrieve a larger pool than ``top_n`` so the environment has
    something to read.

    >>> engine = index.as_query_engine(                                                   # doctest: +SKIP
    ...     similarity_top_k=20, node_postprocessors=[FragRelPostprocessor(top_n=5)], llm=llm)
    >>> [n.score for n in engine.query("Who found the footprint?").source_nodes]          # doctest: +SKIP
    """

    top_n: int | None = Field(default=5, description="Nodes to keep (None keeps them all, re-ordered).")
    alpha: float = Field(default=0.5, description="Weight of the environment score.")
    relation: Relation = Field(
        default_factory=ContextRelation, exclude=True, description="Fragment relation (default ContextRelation(0.3))."
    )
    embedder: Any = Field(
        default=None,
        exclude=True,
        description="LlamaIndex BaseEmbedding or object with embed_documents/embed_query, for nodes without a score "
        "(default: the embedded all-MiniLM-L6-v2).",
    )
    store: FragmentStore | None = Field(
        default=None, exclude=True, description="FragmentStore written by PositionTagger, for neighbour expansion."
    )
    expand: int | None = Field(default=None, description="Neighbour radius in the store (default 1 with a store).")
    order: Literal["score", "position"] = Field(default="score", description="'score' or 'position' order.")
    doc_id_key: str = Field(default="doc_id", description="Metadata key of the document id.")
    position_key: str = Field(default="position", description="Metadata key of the position.")
    on_missing_position: Literal["raise", "isolate", "links"] = Field(
        default="raise", description="What to do with nodes that have no position: 'raise', 'isolate' or 'links'."
    )

    @classmethod
    def class_name(cls) -> str:
        return "FragRelPostprocessor"

    def model_post_init(self, context: Any, /) -> None:
        self._reranker()  # validate the settings now, not at the first query

    def _reranker(self) -> NodeReranker:
        return NodeReranker.build(
            relation=self.relation,
            alpha=self.alpha,
            k=self.top_n,
            embedder=self.embedder,
            store=self.store,
            expand=self.expand,
            order=self.order,
            doc_id_key=self.doc_id_key,
            position_key=self.position_key,
            on_missing_position=self.on_missing_position,
        )

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        if query_bundle is None:
            raise ValueError(
                "FragRelPostprocessor needs the query: call postprocess_nodes(nodes, query_str=...) "
                "or use it inside a query engine"
            )
        return self._reranker()(nodes, query_bundle.query_str)
