"""LangChain and LlamaIndex models as the core's protocols (a framework is imported when an adapter is built).

``temperature`` and ``max_tokens`` go as call-time keywords (``forward_params=False`` keeps the model's own);
LangChain always gets ``stop``. No ``reply_format`` is enforced: the steps parse free text (for enforcement call the
same server through :class:`~fragrel_integrations.models.openai_chat.OpenAIChatModel`).

>>> from langchain_core.language_models import FakeListChatModel
>>> LangChainChatModel(FakeListChatModel(responses=["Hi!"])).invoke("Say hi", max_tokens=8)
'Hi!'
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._optional import require
from .._validation import check_type
from .chat import ChatModelBase, Messages, context_window, given_params, model_id, to_messages
from .tokens import estimate_tokens
from .yes_no import TOP_LOGPROBS, LogprobsYesNo

__all__ = ["LangChainChatModel", "LlamaIndexChatModel", "LlamaIndexEmbedder", "is_llama_index_embedding"]

_YES_NO_CALL = {"logprobs": True, "top_logprobs": TOP_LOGPROBS, "max_tokens": 1, "temperature": 0.0}


class _FrameworkChatModel(LogprobsYesNo, ChatModelBase):
    """A framework model called (``_call`` / ``_acall``, looked up on the wrapped model per call) with converted
    messages."""

    def __init__(self, wrapped: Any, forward_params: bool, expected: type, what: str) -> None:
        check_type(
            wrapped,
            expected,
            f"expected {what}",
            hint="; use fragrel_integrations.models.as_chat_model for other model objects",
        )
        self.forward_params = forward_params
        self.model_name = model_id(wrapped)
        self.logprobs_supported: bool | None = None

    def count_tokens(self, text: str) -> int:
        """The word-based estimate (the frameworks' default tokenizers may download)."""
        return estimate_tokens(text)

    @abstractmethod
    def _convert(self, messages: list[dict[str, str]]) -> list[Any]: ...

    @abstractmethod
    def _call(self, messages: list[Any], **kwargs: Any) -> Any: ...

    @abstractmethod
    async def _acall(self, messages: list[Any], **kwargs: Any) -> Any: ...

    @abstractmethod
    def _reply(self, result: Any) -> str: ...

    def _kwargs(self, temperature: float | None, max_tokens: int | None, stop: list[str] | None) -> dict[str, Any]:
        return given_params(temperature, max_tokens, stop) if self.forward_params else {}

    def _generate(self, messages, temperature, max_tokens, stop) -> str:  # type: ignore[no-untyped-def]
        return self._reply(self._call(self._convert(messages), **self._kwargs(temperature, max_tokens, stop)))

    async def _agenerate(self, messages, temperature, max_tokens, stop) -> str:  # type: ignore[no-untyped-def]
        return self._reply(await self._acall(self._convert(messages), **self._kwargs(temperature, max_tokens, stop)))

    def _logprobs_reply(self, messages: Messages) -> Any:
        return self._call(self._convert(to_messages(messages)), **_YES_NO_CALL)

    async def _alogprobs_reply(self, messages: Messages) -> Any:
        return await self._acall(self._convert(to_messages(messages)), **_YES_NO_CALL)

    @staticmethod
    def _has_logprobs_fields(model: Any) -> bool:
        fields = getattr(type(model), "model_fields", {})
        return "logprobs" in fields and "top_logprobs" in fields


class LangChainChatModel(_FrameworkChatModel):
    """A LangChain ``BaseChatModel`` or ``BaseLLM`` as a :class:`~.chat.ChatModel` (sync and native async)."""

    def __init__(self, model: Any, *, forward_params: bool = True) -> None:
        require("langchain_core", "langchain")
        from langchain_core.language_models import BaseLanguageModel

        super().__init__(model, forward_params, BaseLanguageModel, "a LangChain BaseChatModel or BaseLLM")
        self.model = model

    def _call(self, messages: list[Any], **kwargs: Any) -> Any:
        return self.model.invoke(messages, **kwargs)

    async def _acall(self, messages: list[Any], **kwargs: Any) -> Any:
        return await self.model.ainvoke(messages, **kwargs)

    @property
    def context_window(self) -> int | None:
        return context_window(self.model)

    def _convert(self, messages: list[dict[str, str]]) -> list[Any]:
        from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

        kinds = {"system": SystemMessage, "user": HumanMessage, "assistant": AIMessage}
        return [kinds[m["role"]](content=m["content"]) for m in messages]

    def _kwargs(self, temperature: float | None, max_tokens: int | None, stop: list[str] | None) -> dict[str, Any]:
        """``stop`` always; the others when ``forward_params``."""
        return given_params(*((temperature, max_tokens) if self.forward_params else (None, None)), stop)

    def _reply(self, result: Any) -> str:
        content = getattr(result, "content", result)  # BaseLLM returns a string
        if isinstance(content, str):
            return content
        if isinstance(content, list):  # content blocks
            parts = [b if isinstance(b, str) else b.get("text", "") for b in content if isinstance(b, str | dict)]
            return "".join(p for p in parts if isinstance(p, str))
        raise TypeError(f"the LangChain model returned {type(result).__name__}, not a message or a string")

    def _asks_logprobs(self) -> bool:
        """Models with ``logprobs`` and ``top_logprobs`` fields (``ChatOpenAI`` and its kin) are asked."""
        return self._has_logprobs_fields(self.model)

    def _first_token_logprobs(self, reply: Any) -> list[tuple[str, float]] | None:
        """From ``response_metadata["logprobs"]["content"][0]`` (langchain-openai's layout)."""
        logprobs = (getattr(reply, "response_metadata", None) or {}).get("logprobs")
        content = logprobs.get("content") if isinstance(logprobs, dict) else None
        if not content or not isinstance(content[0], dict):
            return None
        first = content[0]
        pairs = {t["token"]: t["logprob"] for t in first.get("top_logprobs") or [] if isinstance(t, dict)}
        if "token" in first and "logprob" in first:
            pairs.setdefault(first["token"], first["logprob"])  # the sampled token, when the top list lacks it
        return list(pairs.items())


class LlamaIndexChatModel(_FrameworkChatModel):
    """A LlamaIndex ``LLM`` as a :class:`~.chat.ChatModel` (``llm.chat`` / ``llm.achat``)."""

    def __init__(self, llm: Any, *, forward_params: bool = True) -> None:
        require("llama_index.core", "llama-index")
        from llama_index.core.llms import LLM

        super().__init__(llm, forward_params, LLM, "a LlamaIndex LLM")
        self.llm = llm

    def _call(self, messages: list[Any], **kwargs: Any) -> Any:
        return self.llm.chat(messages, **kwargs)

    async def _acall(self, messages: list[Any], **kwargs: Any) -> Any:
        return await self.llm.achat(messages, **kwargs)

    @property
    def context_window(self) -> int | None:
        value = getattr(self.llm.metadata, "context_window", None)
        return value if isinstance(value, int) and value > 0 else None

    def _convert(self, messages: list[dict[str, str]]) -> list[Any]:
        from llama_index.core.llms import ChatMessage, MessageRole

        roles = {"system": MessageRole.SYSTEM, "user": MessageRole.USER, "assistant": MessageRole.ASSISTANT}
        return [ChatMessage(role=roles[m["role"]], content=m["content"]) for m in messages]

    def _reply(self, result: Any) -> str:
        return result.message.content or ""

    def _asks_logprobs(self) -> bool:
        """Chat LLMs with ``logprobs`` and ``top_logprobs`` fields (``OpenAI``, ``OpenAILike``)."""
        chat = getattr(getattr(self.llm, "metadata", None), "is_chat_model", False)
        return chat is True and self._has_logprobs_fields(self.llm)

    def _first_token_logprobs(self, reply: Any) -> list[tuple[str, float]] | None:
        """From ``ChatResponse.logprobs[0]`` (the first token's ``LogProb`` alternatives)."""
        logprobs = getattr(reply, "logprobs", None)
        if not logprobs or not logprobs[0]:
            return None
        return [(lp.token, lp.logprob) for lp in logprobs[0] if hasattr(lp, "token") and hasattr(lp, "logprob")]


def is_llama_index_embedding(obj: object) -> bool:
    """True for an instance of LlamaIndex's ``BaseEmbedding`` (without importing it)."""
    return any(
        cls.__name__ == "BaseEmbedding" and cls.__module__.startswith("llama_index.core") for cls in type(obj).__mro__
    )


class LlamaIndexEmbedder:
    """A LlamaIndex ``BaseEmbedding`` as a core :class:`~.embedder.Embedder` (its batching and query instructions).

    >>> from llama_index.core.embeddings import MockEmbedding
    >>> LlamaIndexEmbedder(MockEmbedding(embed_dim=8)).embed_documents(["a", "b"]).shape
    (2, 8)
    """

    def __init__(self, embed_model: Any, *, show_progress: bool = False) -> None:
        if not is_llama_index_embedding(embed_model):
            raise TypeError(
                f"embed_model must be a llama_index BaseEmbedding, got {type(embed_model).__name__}; "
                "objects with embed_documents/embed_query can be passed to fragrel directly"
            )
        self.embed_model = embed_model
        self.show_progress = show_progress

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        vectors = self.embed_model.get_text_embedding_batch(list(texts), show_progress=self.show_progress)
        return np.asarray(vectors, dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return np.asarray(self.embed_model.get_query_embedding(text), dtype=np.float32)

    def __repr__(self) -> str:
        return f"LlamaIndexEmbedder({type(self.embed_model).__name__}(model_name={self.embed_model.model_name!r}))"
