"""ILM-TR's inner loop as a LangChain ``Runnable``: question in, final short-term memory (the answer) out.

All loop logic is the core :class:`~fragrel_integrations.core.inner_loop.InnerLoopEngine`; this module converts
LangChain ``Document`` objects to core fragments and back, and wires LangChain callbacks and streaming.

>>> from langchain_core.documents import Document
>>> from langchain_core.runnables import RunnableLambda
>>> from fragrel_integrations.testing import ScriptedChatModel
>>> docs = [Document("Bill journeyed to the bedroom."), Document("Bill dropped the key there.")]
>>> loop = InnerLoopRunnable(retriever=RunnableLambda(lambda q: docs),
...                          model=ScriptedChatModel(["The key is in the bedroom."], cycle=True))
>>> out = loop.invoke("Where is the key?")
>>> out["answer"], out["converged"], len(out["rounds"])
('The key is in the bedroom.', True, 2)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from functools import partial
from typing import Any, Self

from langchain_core.callbacks import AsyncCallbackManagerForChainRun, CallbackManagerForChainRun
from langchain_core.documents import Document
from langchain_core.retrievers import RetrieverLike
from langchain_core.runnables import RunnableConfig, RunnableSerializable
from langchain_core.runnables.config import patch_config
from pydantic import ConfigDict, Field, PrivateAttr, field_validator, model_validator

from ..adapters import loop_runs as kit
from ..adapters.pools import read_location, read_score
from ..adapters.wrapper_settings import DEFAULT_DOC_ID_KEY, DEFAULT_POSITION_KEY, check_key
from ..core.fragments import Fragment, ScoredFragment
from ..core.inner_loop import InnerLoopEngine
from ._documents import as_runnable, check_documents, hit_document, isolated_key

__all__ = ["InnerLoopRunnable"]

_DOCS = kit.ADAPTER_SETTING_DOCS


def _document_hit(doc: Document, doc_id_key: str, position_key: str) -> ScoredFragment:
    """A core fragment for a retrieved Document (its score, and FragRel's sub-scores when it carries them)."""
    doc_id, position = read_location(doc.metadata, doc_id_key, position_key) or (isolated_key(doc), 0)
    return kit.scored_from_metadata(
        Fragment(doc.page_content, doc_id, position, dict(doc.metadata)), read_score(doc.metadata, None), doc.metadata
    )


class InnerLoopRunnable(RunnableSerializable[str | dict[str, Any], dict[str, Any]]):
    """ILM-TR's inner loop over any LangChain retriever and chat model, as a ``Runnable``.

    Each round retrieves with the question plus the short-term memory (STM), then the model rewrites the STM;
    the loop stops when consecutive memories agree (``threshold``) or after ``max_loops`` rounds. Input: a
    question string or ``{"question": ...}``. Output: :func:`~fragrel_integrations.adapters.loop_runs.result_dict`
    (``answer`` is the final STM; ``rounds`` and ``documents`` hold the retriever's own Documents, or new ones with
    ``fragrel_doc_id``, ``fragrel_position`` and the FragRel scores for an engine's core retriever). ``stream`` /
    ``astream`` yield it after every round (``stop_reason`` None until the last).

    Build it from ``retriever`` (any ``Runnable[str, list[Document]]``, or a function) and ``model`` (a LangChain
    chat model or LLM, a LlamaIndex LLM or a :class:`~fragrel_integrations.models.chat.ChatModel`), or from a
    built core ``engine`` (custom prompts, budgets; a ``retriever`` given too replaces its own; settings given
    override its own). If the retriever or the model raises, the :class:`InnerLoopError` carries the completed
    rounds in ``.result`` (core types) and ``.output`` (this dict).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    retriever: RetrieverLike | None = None
    """Any Runnable[str, list[Document]] (e.g. ``vectorstore.as_retriever()``); a plain function is wrapped."""
    model: Any = None
    """The answer model: LangChain chat model or LLM, LlamaIndex LLM, or our ChatModel."""
    engine: InnerLoopEngine | None = None
    """A built core engine (its model, prompts and settings are used); then leave ``model`` unset."""
    max_loops: int | None = Field(None, description=_DOCS["max_loops"])
    threshold: float | None = Field(None, description=_DOCS["threshold"])
    max_stm_tokens: int | None = Field(None, description=_DOCS["max_stm_tokens"])
    dedupe: bool | None = Field(None, description=_DOCS["dedupe"])
    show_progress: bool | None = Field(None, description=_DOCS["show_progress"])
    doc_id_key: str = DEFAULT_DOC_ID_KEY
    position_key: str = DEFAULT_POSITION_KEY

    _core: InnerLoopEngine | None = PrivateAttr(default=None)

    _coerce_retriever = field_validator("retriever", mode="before")(as_runnable)

    @model_validator(mode="after")
    def _build_engine(self) -> Self:
        engine = kit.engine_for_adapter(
            self.engine,
            self.model,
            {name: getattr(self, name) for name in kit.ADAPTER_SETTINGS},
            has_retriever=self.retriever is not None,
            model_arg="model",
            model_hint="a LangChain chat model",
            retriever_hint="any Runnable[str, list[Document]], e.g. vectorstore.as_retriever()",
        )
        check_key("doc_id_key", self.doc_id_key), check_key("position_key", self.position_key)
        self._core = engine
        return self

    @property
    def core_engine(self) -> InnerLoopEngine:
        """The core engine every call delegates to (the LangChain retriever is attached per call)."""
        return self._core  # type: ignore[return-value]  # set by the validator

    # ---------------------------------------------------------------------------------------------- conversion

    def _bind(self, config: RunnableConfig) -> tuple[InnerLoopEngine, Callable[[Iterable[ScoredFragment]], list]]:
        """The engine for one call, retrieving through ``self.retriever`` with ``config`` (callbacks), and the
        conversion of hits back to the retriever's Documents (new Documents for the engine's own retriever)."""
        r = self.retriever
        calls = None if r is None else (partial(r.invoke, config=config), partial(r.ainvoke, config=config))
        return kit.bind_retriever(
            self.core_engine,
            calls,
            lambda result: check_documents(result, "the retriever's result"),
            lambda doc: _document_hit(doc, self.doc_id_key, self.position_key),
            partial(hit_document, doc_id_key=self.doc_id_key, position_key=self.position_key),
        )

    # ---------------------------------------------------------------------------------------------- running

    @staticmethod
    def _no_kwargs(kwargs: dict[str, Any]) -> None:
        if kwargs:
            raise TypeError(f"InnerLoopRunnable takes no extra call arguments, got {sorted(kwargs)}")

    def invoke(self, input: str | dict[str, Any], config: RunnableConfig | None = None, **kwargs: Any) -> dict:
        self._no_kwargs(kwargs)
        return self._call_with_config(self._invoke, input, config)

    def _invoke(
        self, input: str | dict[str, Any], run_manager: CallbackManagerForChainRun, config: RunnableConfig
    ) -> dict[str, Any]:
        bound = self._bind(patch_config(config, callbacks=run_manager.get_child()))
        return kit.run(bound, kit.question_of(input, "InnerLoopRunnable"), kit.result_dict)

    async def ainvoke(self, input: str | dict[str, Any], config: RunnableConfig | None = None, **kwargs: Any) -> dict:
        self._no_kwargs(kwargs)
        return await self._acall_with_config(self._ainvoke, input, config)

    async def _ainvoke(
        self, input: str | dict[str, Any], run_manager: AsyncCallbackManagerForChainRun, config: RunnableConfig
    ) -> dict[str, Any]:
        bound = self._bind(patch_config(config, callbacks=run_manager.get_child()))
        return await kit.arun(bound, kit.question_of(input, "InnerLoopRunnable"), kit.result_dict)

    def stream(
        self, input: str | dict[str, Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[dict[str, Any]]:
        """Yield the output dict after every round (the last one has ``stop_reason`` set)."""
        self._no_kwargs(kwargs)
        yield from self._transform_stream_with_config(iter([input]), self._stream_rounds, config)

    def _stream_rounds(self, inputs: Iterator[Any], config: RunnableConfig) -> Iterator[dict[str, Any]]:
        question = list(inputs)[-1]  # a single input
        yield from kit.stream(self._bind(config), kit.question_of(question, "InnerLoopRunnable"), kit.result_dict)

    async def astream(
        self, input: str | dict[str, Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[dict[str, Any]]:
        """Async :meth:`stream`."""
        self._no_kwargs(kwargs)

        async def one() -> AsyncIterator[Any]:
            yield input

        async for chunk in self._atransform_stream_with_config(one(), self._astream_rounds, config):
            yield chunk

    async def _astream_rounds(self, inputs: AsyncIterator[Any], config: RunnableConfig) -> AsyncIterator[dict]:
        question = [q async for q in inputs][-1]  # a single input
        async for chunk in kit.astream(
            self._bind(config), kit.question_of(question, "InnerLoopRunnable"), kit.result_dict
        ):
            yield chunk
