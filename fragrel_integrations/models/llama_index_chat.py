"""Use any LlamaIndex ``LLM`` as a :class:`ChatModel` (``llm.chat`` / ``llm.achat``).

LlamaIndex is imported when an adapter is built, never at module import.

>>> from llama_index.llms.openai_like import OpenAILike                                    # doctest: +SKIP
>>> llm = OpenAILike(model="smollm2", api_base="http://127.0.0.1:8000/v1", is_chat_model=True)  # doctest: +SKIP
>>> LlamaIndexChatModel(llm).invoke("Say hi", max_tokens=8)                                # doctest: +SKIP
'Hi!'

``temperature``, ``max_tokens`` and ``stop`` are passed as keyword arguments of ``chat`` when given (the OpenAI
family merges them into the request); ``forward_params=False`` drops them so the LLM's own settings apply.
The context window comes from ``llm.metadata.context_window``.

Constrained replies (``reply_format``, see :mod:`fragrel_integrations.models.structured`) are not enforced
here (``supports_format`` is False): LlamaIndex's ``structured_predict`` differs per provider (tool calling, JSON mode,
a parsed object instead of text) and covers neither label choices nor regexes, so the steps ask for free text
and parse it with their lenient parsers, as before. To get enforcement, call the same server through
:class:`~fragrel_integrations.models.openai_chat.OpenAIChatModel` (or the embedded ``LlamaCppChatModel``).
"""

from __future__ import annotations

from typing import Any

from .._optional import require
from .chat import ChatModelBase, Messages, given_params, model_id, to_messages
from .yes_no import TOP_LOGPROBS, LogprobsYesNo

__all__ = ["LlamaIndexChatModel"]


class LlamaIndexChatModel(LogprobsYesNo, ChatModelBase):
    """Adapter: LlamaIndex ``LLM`` -> :class:`ChatModel` (sync and native async)."""

    def __init__(self, llm: Any, *, forward_params: bool = True) -> None:
        require("llama_index.core", "llama-index")
        from llama_index.core.llms import LLM

        if not isinstance(llm, LLM):
            raise TypeError(
                f"expected a LlamaIndex LLM, got {type(llm).__name__}; "
                "use fragrel_integrations.models.as_chat_model for other model objects"
            )
        self.llm = llm
        self.forward_params = forward_params
        self.model_name = model_id(llm)
        #: None until the first yes/no question; False once the model returned no logprobs (not asked again).
        self.logprobs_supported: bool | None = None

    @property
    def context_window(self) -> int | None:
        value = getattr(self.llm.metadata, "context_window", None)
        return value if isinstance(value, int) and value > 0 else None

    def count_tokens(self, text: str) -> int:
        """The word-based estimate (LlamaIndex's default tokenizer is tiktoken, which downloads)."""
        from .tokens import estimate_tokens

        return estimate_tokens(text)

    @staticmethod
    def _convert(messages: list[dict[str, str]]) -> list[Any]:
        from llama_index.core.llms import ChatMessage, MessageRole

        roles = {"system": MessageRole.SYSTEM, "user": MessageRole.USER, "assistant": MessageRole.ASSISTANT}
        return [ChatMessage(role=roles[m["role"]], content=m["content"]) for m in messages]

    def _kwargs(self, temperature: float | None, max_tokens: int | None, stop: list[str] | None) -> dict[str, Any]:
        return given_params(temperature, max_tokens, stop) if self.forward_params else {}

    def _generate(
        self, messages: list[dict[str, str]], temperature: float | None, max_tokens: int | None, stop: list[str] | None
    ) -> str:
        response = self.llm.chat(self._convert(messages), **self._kwargs(temperature, max_tokens, stop))
        return response.message.content or ""

    async def _agenerate(
        self, messages: list[dict[str, str]], temperature: float | None, max_tokens: int | None, stop: list[str] | None
    ) -> str:
        response = await self.llm.achat(self._convert(messages), **self._kwargs(temperature, max_tokens, stop))
        return response.message.content or ""

    # ------------------------------------------------------------------------------ yes/no by probability
    def _asks_logprobs(self) -> bool:
        """Chat models with ``logprobs`` and ``top_logprobs`` fields (``OpenAI``, ``OpenAILike(is_chat_model=True)``)
        are asked."""
        fields = getattr(type(self.llm), "model_fields", {})
        chat = getattr(getattr(self.llm, "metadata", None), "is_chat_model", False)
        return chat is True and "logprobs" in fields and "top_logprobs" in fields

    def _yes_no_call(self, messages: Messages) -> tuple[list[Any], dict[str, Any]]:
        kwargs = {"logprobs": True, "top_logprobs": TOP_LOGPROBS, "max_tokens": 1, "temperature": 0.0}
        return self._convert(to_messages(messages)), kwargs

    def _logprobs_reply(self, messages: Messages) -> Any:
        li_messages, kwargs = self._yes_no_call(messages)
        return self.llm.chat(li_messages, **kwargs)

    async def _alogprobs_reply(self, messages: Messages) -> Any:
        li_messages, kwargs = self._yes_no_call(messages)
        return await self.llm.achat(li_messages, **kwargs)

    def _first_token_logprobs(self, reply: Any) -> list[tuple[str, float]] | None:
        """From ``ChatResponse.logprobs[0]`` (the first token's ``LogProb`` alternatives)."""
        logprobs = getattr(reply, "logprobs", None)
        if not logprobs or not logprobs[0]:
            return None
        return [(lp.token, lp.logprob) for lp in logprobs[0] if hasattr(lp, "token") and hasattr(lp, "logprob")]
