"""FragRel as a LlamaIndex node postprocessor (re-ranks the nodes a query engine retrieved)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import partial
from typing import Any, Literal

from llama_index.core.bridge.pydantic import Field, PrivateAttr, ValidationInfo, field_validator
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

from ..core import conventions as kit
from ..core.presets import DEFAULT_PRESET
from ..core.relations import Relation
from ._convert import NodeReranker

__all__ = ["FragRelPostprocessor"]

dispatcher = get_dispatcher(__name__)

#: The settings kit's check of each field, run before pydantic's own type check (so the words are the kit's); the
#: rest are checked together when the postprocessor is built.
_SETTING_CHECKS: dict[str, Callable[[Any], Any]] = {
    "top_n": partial(kit.check_k, name="top_n"),
    "relation": kit.check_relation,
    "store": kit.check_store,
    "preset": kit.check_preset,
    "alpha": kit.check_alpha_setting,
    "top_m": kit.check_top_m_setting,
    "lexical": kit.check_lexical,
    "expand": kit.check_expand,
    "outside": kit.check_outside,
    "order": kit.check_order,
    "on_missing_position": kit.check_on_missing_position,
    "doc_id_key": partial(kit.check_key, "doc_id_key"),
    "position_key": partial(kit.check_key, "position_key"),
}


class FragRelPostprocessor(BaseNodePostprocessor):
    """Re-score the nodes it is given with FragRel and keep the ``top_n`` best.

    Same conversion and scoring as :class:`~fragrel_integrations.llama_index.FragRelRetriever`: node scores are
    the independent scores (the node ranking when a node has none, or ``score_embedder`` cosine if you give one;
    fused with a BM25 score on the nodes themselves, ``lexical``),
    ``doc_id``/``position`` metadata give the context relation, and the returned copies carry ``relevance_score``,
    ``fragrel_independent_score`` and ``fragrel_environment_score`` in metadata. A postprocessor cannot ask the
    retriever for more: give the query engine ``similarity_top_k=50`` (its default is 2); it warns once when it
    gets no more nodes than it keeps. Like LlamaIndex's rerankers it emits ``ReRankStartEvent`` and
    ``ReRankEndEvent`` through the instrumentation dispatcher (``model_name`` is ``"fragrel:<preset>"``).

    >>> engine = index.as_query_engine(                                                   # doctest: +SKIP
    ...     similarity_top_k=50, node_postprocessors=[FragRelPostprocessor(top_n=5)], llm=llm)
    >>> [n.score for n in engine.query("Who found the footprint?").source_nodes]          # doctest: +SKIP
    """

    top_n: int | None = Field(default=5, description="Nodes to keep (None keeps them all, re-ordered).")
    preset: str = Field(
        default=DEFAULT_PRESET,
        description="'auto' (each pool's kind of text), 'general', 'story', 'dialogue', 'haystack' or 'multidoc': "
        "relation, alpha, top_m, order, lexical.",
    )
    alpha: float | None = Field(default=None, description="Weight of the environment score (default: the preset's).")
    top_m: int | None = Field(
        default=None, description="How many of the best nodes lend support (default: the preset's; 0: all)."
    )
    relation: Relation | None = Field(
        default=None, exclude=True, description="Fragment relation (default: the preset's ContextRelation)."
    )
    lexical: float | None = Field(
        default=None,
        description="Weight in [0, 1] of a BM25 score computed on the nodes themselves, fused with their scores "
        "(default: the preset's; 0: the node scores alone).",
    )
    embedder: Any = Field(
        default=None,
        exclude=True,
        description="LlamaIndex BaseEmbedding or object with embed_documents/embed_query, for a relation that needs "
        "embeddings (it never scores the nodes).",
    )
    score_embedder: Any = Field(
        default=None,
        exclude=True,
        description="Re-scores nodes that come without a score by its cosine (default: their ranking).",
    )
    store: Any = Field(
        default=None, exclude=True, description="FragmentStore written by PositionTagger, for neighbour expansion."
    )
    expand: int | None = Field(default=None, description="Neighbour radius in the store (default 1 with a store).")
    order: Literal["score", "position"] | None = Field(
        default=None, description="'score' or 'position' order (default: the preset's)."
    )
    outside: Literal["floor", "ignore"] = Field(
        default="floor", description="Positions not among the nodes count with the lowest node score, or not at all."
    )
    doc_id_key: str = Field(default="doc_id", description="Metadata key of the document id.")
    position_key: str = Field(default="position", description="Metadata key of the position.")
    on_missing_position: Literal["raise", "error", "isolate", "links"] = Field(
        default="raise", description="What to do with nodes that have no position: 'raise', 'isolate' or 'links'."
    )

    @classmethod
    def class_name(cls) -> str:
        return "FragRelPostprocessor"

    @field_validator(*_SETTING_CHECKS, mode="before")
    @classmethod
    def _check_setting(cls, value: Any, info: ValidationInfo) -> Any:
        return _SETTING_CHECKS[info.field_name](value)  # the kit's check: the same words as in LangChain

    _warned: bool = PrivateAttr(default=False)

    def model_post_init(self, context: Any, /) -> None:
        self._reranker()  # validate the settings now, not at the first query

    def _reranker(self) -> NodeReranker:
        return NodeReranker.build(
            preset=self.preset,
            outside=self.outside,
            relation=self.relation,
            alpha=self.alpha,
            top_m=self.top_m,
            lexical=self.lexical,
            k=self.top_n,
            embedder=self.embedder,
            score_embedder=self.score_embedder,
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
        if self.top_n is not None and len(nodes) <= self.top_n and not self._warned:
            self._warned = True
            warnings.warn(
                f"FragRelPostprocessor got {len(nodes)} nodes and keeps top_n={self.top_n}, so it can only re-order "
                "them: retrieve more candidates, e.g. index.as_query_engine(similarity_top_k=50, "
                "node_postprocessors=[FragRelPostprocessor(top_n=5)])",
                UserWarning,
                stacklevel=3,
            )
        dispatcher.event(
            ReRankStartEvent(
                query=query_bundle,
                nodes=nodes,
                top_n=len(nodes) if self.top_n is None else self.top_n,
                model_name=f"fragrel:{self.preset}",
            )
        )
        ranked = self._reranker()(nodes, query_bundle.query_str)
        dispatcher.event(ReRankEndEvent(nodes=ranked))
        return ranked
