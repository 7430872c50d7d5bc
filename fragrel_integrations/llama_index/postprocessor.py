"""FragRel as a LlamaIndex node postprocessor (re-ranks the nodes a query engine retrieved)."""

from __future__ import annotations

import warnings
from typing import Any, Literal

from llama_index.core.bridge.pydantic import Field, PrivateAttr, ValidationInfo, field_validator
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

from .. import adapters as kit
from ..core.presets import DEFAULT_PRESET
from ..core.relations import Relation
from ..core.selection import check_k
from ._convert import NodeReranker

__all__ = ["FragRelPostprocessor"]

dispatcher = get_dispatcher(__name__)

#: The settings kit's check of each field, run before pydantic's own type check (so the words are the kit's); the
#: rest are checked together when the postprocessor is built.
_CHECKS = kit.field_checks(("top_n", *kit.FIELD_SETTINGS))
_DOCS = kit.SETTING_DOCS


class FragRelPostprocessor(BaseNodePostprocessor):
    """Re-score the nodes it is given with FragRel and keep the ``top_n`` best.

    Scores and returned copies as :class:`~fragrel_integrations.llama_index.FragRelRetriever`'s, but it cannot
    ask the retriever for more: give the query engine ``similarity_top_k=50`` (its default is 2); it warns once
    when it gets no more nodes than it keeps. It emits ``ReRankStartEvent`` / ``ReRankEndEvent`` like LlamaIndex's
    rerankers (``model_name`` is ``"fragrel:<preset>"``).

    >>> engine = index.as_query_engine(                                                   # doctest: +SKIP
    ...     similarity_top_k=50, node_postprocessors=[FragRelPostprocessor(top_n=5)], llm=llm)
    >>> [n.score for n in engine.query("Who found the footprint?").source_nodes]          # doctest: +SKIP
    """

    top_n: int | None = Field(default=5, description="Nodes to keep (None keeps them all, re-ordered).")
    preset: str = Field(default=DEFAULT_PRESET, description=_DOCS["preset"])
    alpha: float | None = Field(default=None, description=_DOCS["alpha"])
    top_m: int | None = Field(default=None, description=_DOCS["top_m"])
    relation: Relation | None = Field(default=None, exclude=True, description=_DOCS["relation"])
    lexical: float | None = Field(default=None, description=_DOCS["lexical"])
    embedder: Any = Field(default=None, exclude=True, description=_DOCS["embedder"])
    score_embedder: Any = Field(default=None, exclude=True, description=_DOCS["score_embedder"])
    store: Any = Field(default=None, exclude=True, description=_DOCS["store"])
    expand: int | None = Field(default=None, description=_DOCS["expand"])
    order: Literal["score", "position"] | None = Field(default=None, description=_DOCS["order"])
    outside: Literal["floor", "ignore"] = Field(default="floor", description=_DOCS["outside"])
    doc_id_key: str = Field(default=kit.DEFAULT_DOC_ID_KEY, description=_DOCS["doc_id_key"])
    position_key: str = Field(default=kit.DEFAULT_POSITION_KEY, description=_DOCS["position_key"])
    on_missing_position: Literal["raise", "error", "isolate", "links"] = Field(
        default="raise", description=_DOCS["on_missing_position"]
    )

    @classmethod
    def class_name(cls) -> str:
        return "FragRelPostprocessor"

    @field_validator(*_CHECKS, mode="before")
    @classmethod
    def _check_setting(cls, value: Any, info: ValidationInfo) -> Any:
        return _CHECKS[info.field_name](value)  # the kit's check: the same words as in LangChain

    _warned: bool = PrivateAttr(default=False)

    def model_post_init(self, context: Any, /) -> None:
        self._reranker()  # validate the settings now, not at the first query

    @property
    def settings(self) -> kit.WrapperSettings:
        """The resolved, checked FragRel settings (the kit's :class:`WrapperSettings`)."""
        return kit.WrapperSettings.of(self)

    def _reranker(self) -> NodeReranker:
        return NodeReranker(self.settings, check_k(self.top_n, "top_n"))  # top_n may be reassigned unchecked

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
