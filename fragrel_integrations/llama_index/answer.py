"""Grounded answers as a LlamaIndex response synthesizer: a query engine's reply is an answer the retrieved nodes
support, with the quoted evidence cited, or "not stated" and the closest evidence (all logic:
:func:`~fragrel_integrations.core.grounding.grounded_answer`; nodes cited by their position metadata).

>>> from llama_index.core.schema import NodeWithScore, TextNode
>>> from fragrel_integrations.testing import ScriptedChatModel
>>> node = TextNode(text="The parrot was called Poll.", metadata={"doc_id": "crusoe", "position": 7})
>>> synth = GroundedSynthesizer(ScriptedChatModel(["Poll"]))
>>> print(synth.synthesize("What was the parrot called?", [NodeWithScore(node=node, score=1.0)]))
Poll
<BLANKLINE>
Evidence:
  “The parrot was called Poll.” (crusoe, fragment 7, sentence 1)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core import Settings
from llama_index.core.llms import LLM
from llama_index.core.response_synthesizers import BaseSynthesizer
from llama_index.core.schema import MetadataMode, NodeWithScore

from ..adapters.answer_step import AnswerStep, aone_chunk, one_chunk
from ..adapters.wrapper_settings import DEFAULT_DOC_ID_KEY, DEFAULT_POSITION_KEY
from ._convert import check_nodes
from .llm import FragRelLLM

__all__ = ["GroundedSynthesizer"]


def _items(nodes: object) -> list[tuple[str, dict[str, Any]]]:
    return [(n.node.get_content(MetadataMode.NONE), n.node.metadata) for n in check_nodes(nodes, "nodes")]


class GroundedSynthesizer(BaseSynthesizer):
    """Answer only from the retrieved nodes: ``index.as_query_engine(response_synthesizer=GroundedSynthesizer())``.

    ``llm``: any LlamaIndex LLM or core chat model (None: ``Settings.llm``); ``embed_model`` ranks the evidence
    sentences with the hybrid score (None: BM25 alone); ``doc_id_key``/``position_key`` cite the nodes (as
    :class:`~fragrel_integrations.llama_index.PositionTagger` writes them; else by rank); ``settings`` are
    :class:`~fragrel_integrations.core.grounding.AnswerSettings` (``max_sentences``, ``max_tokens``, ...), checked
    here. The reply is :meth:`GroundedAnswer.format() <fragrel_integrations.core.grounding.GroundedAnswer.format>`;
    with ``streaming=True`` it comes as one chunk (async: an async stream), after the support check.
    """

    def __init__(
        self,
        llm: Any = None,
        *,
        embed_model: Any = None,
        doc_id_key: str = DEFAULT_DOC_ID_KEY,
        position_key: str = DEFAULT_POSITION_KEY,
        streaming: bool = False,
        **settings: Any,
    ) -> None:
        llm = Settings.llm if llm is None else llm
        step = AnswerStep.of(llm, embed_model, settings, doc_id_key=doc_id_key, position_key=position_key)
        super().__init__(llm=llm if isinstance(llm, LLM) else FragRelLLM(model=step.model), streaming=streaming)
        self._step, self._stream = step, streaming

    def _get_prompts(self) -> dict[str, Any]:
        return {}  # the prompt is core.grounding.ANSWER_PROMPT, fitted to the evidence

    def _update_prompts(self, prompts_dict: dict[str, Any]) -> None:
        return None

    def get_response(self, query_str: str, text_chunks: Sequence[str], **response_kwargs: Any) -> Any:
        text = self._step.answer(query_str, self._step.text_fragments(text_chunks)).format()
        return one_chunk(text) if self._stream else text

    async def aget_response(self, query_str: str, text_chunks: Sequence[str], **response_kwargs: Any) -> Any:
        text = (await self._step.aanswer(query_str, self._step.text_fragments(text_chunks))).format()
        return aone_chunk(text) if self._stream else text

    def synthesize(self, query: Any, nodes: list[NodeWithScore], *args: Any, **kwargs: Any) -> Any:
        with self._step.retrieved(_items(nodes)):
            return super().synthesize(query, nodes, *args, **kwargs)

    async def asynthesize(self, query: Any, nodes: list[NodeWithScore], *args: Any, **kwargs: Any) -> Any:
        with self._step.retrieved(_items(nodes)):
            return await super().asynthesize(query, nodes, *args, **kwargs)
