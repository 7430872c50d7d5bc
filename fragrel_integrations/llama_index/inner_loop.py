"""ILM-TR's inner loop as a LlamaIndex ``CustomQueryEngine``: the final short-term memory is the response.

All loop logic is the core :class:`~fragrel_integrations.core.inner_loop.InnerLoopEngine`; this module turns
``NodeWithScore`` results into core fragments and back, and builds the ``Response``.

>>> from llama_index.core.retrievers import BaseRetriever
>>> from llama_index.core.schema import NodeWithScore, TextNode
>>> class Fixed(BaseRetriever):
...     def _retrieve(self, query_bundle):
...         return [NodeWithScore(node=TextNode(text="Fred left the milk in the cellar."), score=1.0)]
>>> from fragrel_integrations.testing import ScriptedChatModel
>>> engine = InnerLoopQueryEngine(Fixed(), ScriptedChatModel(["In the cellar."], cycle=True))
>>> response = engine.query("Where is the milk?")
>>> str(response), response.metadata["stop_reason"], len(response.source_nodes)
('In the cellar.', 'converged', 1)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.response.schema import Response
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.callbacks import CallbackManager
from llama_index.core.query_engine import CustomQueryEngine
from llama_index.core.schema import MetadataMode, NodeWithScore

from .._validation import check_type
from ..adapters import loop_runs as kit
from ..adapters.wrapper_settings import DEFAULT_DOC_ID_KEY, DEFAULT_POSITION_KEY, check_key
from ..core.fragments import Fragment, ScoredFragment
from ..core.inner_loop import InnerLoopEngine, InnerLoopResult
from ._convert import check_nodes, hit_node, node_doc_id, node_position

__all__ = ["InnerLoopQueryEngine"]

_UNLOCATED = "fragrel:unlocated"


def _node_hit(item: NodeWithScore, doc_id_key: str, position_key: str) -> ScoredFragment:
    """A core fragment for a retrieved node: the text the LLM would see, its location and score."""
    node = item.node
    doc_id = node_doc_id(node, doc_id_key) or _UNLOCATED  # then the text alone tells nodes apart (dedupe)
    position = node_position(node, position_key)
    fragment = Fragment(node.get_content(metadata_mode=MetadataMode.LLM), doc_id, 0 if position is None else position)
    return kit.scored_from_metadata(fragment, item.score, node.metadata)


class InnerLoopQueryEngine(CustomQueryEngine):
    """ILM-TR's inner loop over any LlamaIndex retriever and LLM.

    Each round retrieves with the question plus the short-term memory (STM); the LLM rewrites the STM from the
    retrieved nodes; the loop stops when consecutive memories agree (LCS similarity >= ``threshold``) or after
    ``max_loops`` rounds. The ``Response`` text is the final STM, ``source_nodes`` are the nodes shown to the LLM
    (each once, in the order first shown) and ``metadata`` holds ``converged``, ``stop_reason``, ``n_rounds`` and
    the JSON-serialisable trace under ``"inner_loop"`` (see ``InnerLoopResult.to_dict``).

    Args:
        retriever: any LlamaIndex ``BaseRetriever`` (e.g. ``index.as_retriever(similarity_top_k=4)``); None only
            with an ``engine`` that has its own retriever.
        llm: a LlamaIndex ``LLM``, a LangChain chat model or a :class:`~fragrel_integrations.models.chat.ChatModel`.
        engine: a built core :class:`InnerLoopEngine` (custom prompts, budgets); then leave ``llm`` unset. The
            settings below, when given, override the engine's.
        max_loops, threshold, max_stm_tokens, dedupe, show_progress: the loop settings
            (:data:`~fragrel_integrations.adapters.loop_runs.ADAPTER_SETTING_DOCS`).
        doc_id_key, position_key: node metadata keys for the fragment's location (used by ``dedupe``).

    If the retriever or the LLM raises, the :class:`InnerLoopError` carries the completed rounds in ``.result``
    and a partial ``Response`` in ``.output``.
    """

    retriever: Any = None
    llm: Any = None
    engine: Any = None
    max_loops: int | None = None
    threshold: float | None = None
    max_stm_tokens: int | None = None
    dedupe: bool | None = None
    show_progress: bool | None = None
    doc_id_key: str = DEFAULT_DOC_ID_KEY
    position_key: str = DEFAULT_POSITION_KEY

    _core: InnerLoopEngine = PrivateAttr()

    def __init__(
        self,
        retriever: BaseRetriever | None = None,
        llm: Any = None,
        *,
        engine: InnerLoopEngine | None = None,
        max_loops: int | None = None,
        threshold: float | None = None,
        max_stm_tokens: int | None = None,
        dedupe: bool | None = None,
        show_progress: bool | None = None,
        doc_id_key: str = DEFAULT_DOC_ID_KEY,
        position_key: str = DEFAULT_POSITION_KEY,
        callback_manager: CallbackManager | None = None,
    ) -> None:
        if retriever is not None:
            check_type(
                retriever,
                BaseRetriever,
                "retriever must be a llama_index BaseRetriever (e.g. index.as_retriever(similarity_top_k=4))",
            )
        settings = {name: value for name, value in locals().items() if name in kit.ADAPTER_SETTINGS}
        core = kit.engine_for_adapter(
            engine,
            llm,
            settings,
            has_retriever=retriever is not None,
            model_arg="llm",
            model_hint="a LlamaIndex LLM",
            retriever_hint="a LlamaIndex retriever, e.g. index.as_retriever()",
        )
        kwargs: dict[str, Any] = {} if callback_manager is None else {"callback_manager": callback_manager}
        super().__init__(
            retriever=retriever,
            llm=llm,
            engine=engine,
            **settings,
            doc_id_key=check_key("doc_id_key", doc_id_key),
            position_key=check_key("position_key", position_key),
            **kwargs,
        )
        self._core = core

    @property
    def core_engine(self) -> InnerLoopEngine:
        """The core engine every query delegates to (the LlamaIndex retriever is attached per query)."""
        return self._core

    # ---------------------------------------------------------------------------------------------- conversion

    def _bind(self) -> tuple[InnerLoopEngine, Callable[[Iterable[ScoredFragment]], list[NodeWithScore]]]:
        retriever = self.retriever
        return kit.bind_retriever(
            self._core,
            None if retriever is None else (retriever.retrieve, retriever.aretrieve),
            lambda result: check_nodes(result, "the retriever's result"),
            lambda item: _node_hit(item, self.doc_id_key, self.position_key),
            lambda hit: hit_node(hit, self.doc_id_key, self.position_key),
        )

    def _response(self, result: InnerLoopResult, nodes: Callable[[Iterable[ScoredFragment]], list]) -> Response:
        return Response(
            response=result.format(),
            source_nodes=nodes(result.fragments),
            metadata={
                **{name: getattr(result, name) for name in ("answer", "supported", "converged", "stop_reason")},
                "n_rounds": len(result.rounds),
                "inner_loop": result.to_dict(),
            },
        )

    # ---------------------------------------------------------------------------------------------- querying

    def custom_query(self, query_str: str) -> Response:
        return kit.run(self._bind(), query_str, self._response)

    async def acustom_query(self, query_str: str) -> Response:
        return await kit.arun(self._bind(), query_str, self._response)
