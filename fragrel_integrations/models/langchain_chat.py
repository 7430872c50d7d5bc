"""Use any LangChain chat model (``BaseChatModel``) or text LLM (``BaseLLM``) as a :class:`ChatModel`.

LangChain is imported when an adapter is built, never at module import.

>>> from langchain_openai import ChatOpenAI                                      # doctest: +SKIP
>>> model = LangChainChatModel(ChatOpenAI(model="gpt-4o-mini"))                 # doctest: +SKIP
>>> model.invoke("Say hi", max_tokens=8)                                        # doctest: +SKIP
'Hi!'

``stop`` is LangChain's standard call argument and is always passed. ``temperature`` and ``max_tokens`` are
passed as call-time keyword arguments when given (provider integrations such as ``ChatOpenAI`` and
``ChatAnthropic`` merge them into the request); with ``forward_params=False`` they are dropped and the values
the model was built with apply.

Constrained replies (``reply_format``, see :mod:`fragrel_integrations.models.structured`) are not enforced
here (``supports_format`` is False): LangChain's ``with_structured_output`` differs per provider (tool calling,
JSON mode, a parsed object instead of text) and covers neither label choices nor regexes, so the steps ask for free text
and parse it with their lenient parsers, as before. To get enforcement, call the same server through
:class:`~fragrel_integrations.models.openai_chat.OpenAIChatModel` (or the embedded ``LlamaCppChatModel``).
"""

from __future__ import annotations

from typing import Any

from .._optional import require
from .chat import ChatModelBase, Messages, context_window, given_params, model_id, to_messages
from .yes_no import TOP_LOGPROBS, LogprobsYesNo

__all__ = ["LangChainChatModel"]


def _text(result: Any) -> str:
    if isinstance(result, str):  # BaseLLM returns a string
        return result
    content = getattr(result, "content", result)
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks
        parts = [b if isinstance(b, str) else b.get("text", "") for b in content if isinstance(b, str | dict)]
        return "".join(p for p in parts if isinstance(p, str))
    raise TypeError(f"the LangChain model returned {type(result).__name__}, not a message or a string")


class LangChainChatModel(LogprobsYesNo, ChatModelBase):
    """Adapter: LangChain ``BaseChatModel``/``BaseLLM`` -> :class:`ChatModel` (sync and native async)."""

    def __init__(self, model: Any, *, forward_params: bool = True) -> None:
        require("langchain_core", "langchain")
        from langchain_core.language_models import BaseLanguageModel

        if not isinstance(model, BaseLanguageModel):
            raise TypeError(
                f"expected a LangChain BaseChatModel or BaseLLM, got {type(model).__name__}; "
                "use fragrel_integrations.models.as_chat_model for other model objects"
            )
        self.model = model
        self.forward_params = forward_params
        self.model_name = model_id(model)
        #: None until the first yes/no question; False once the model returned no logprobs (not asked again).
        self.logprobs_supported: bool | None = None

    @property
    def context_window(self) -> int | None:
        return context_window(self.model)

    def count_tokens(self, text: str) -> int:
        """The word-based estimate (LangChain's ``get_num_tokens`` may need tiktoken, which downloads)."""
        from .tokens import estimate_tokens

        return estimate_tokens(text)

    @staticmethod
    def _convert(messages: list[dict[str, str]]) -> list[Any]:
        from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

        kinds = {"system": SystemMessage, "user": HumanMessage, "assistant": AIMessage}
        return [kinds[m["role"]](content=m["content"]) for m in messages]

    def _kwargs(self, temperature: float | None, max_tokens: int | None, stop: list[str] | None) -> dict[str, Any]:
        """``stop`` always; temperature and max_tokens when ``forward_params``."""
        if not self.forward_params:
            return given_params(None, None, stop)
        return given_params(temperature, max_tokens, stop)

    def _generate(
        self, messages: list[dict[str, str]], temperature: float | None, max_tokens: int | None, stop: list[str] | None
    ) -> str:
        return _text(self.model.invoke(self._convert(messages), **self._kwargs(temperature, max_tokens, stop)))

    async def _agenerate(
        self, messages: list[dict[str, str]], temperature: float | None, max_tokens: int | None, stop: list[str] | None
    ) -> str:
        result = await self.model.ainvoke(self._convert(messages), **self._kwargs(temperature, max_tokens, stop))
        return _text(result)

    # ------------------------------------------------------------------------------ yes/no by probability
    def _asks_logprobs(self) -> bool:
        """Models with ``logprobs`` and ``top_logprobs`` fields (``ChatOpenAI`` and its kin) are asked."""
        fields = getattr(type(self.model), "model_fields", {})
        return "logprobs" in fields and "top_logprobs" in fields

    def _yes_no_call(self, messages: Messages) -> tuple[list[Any], dict[str, Any]]:
        kwargs = {"logprobs": True, "top_logprobs": TOP_LOGPROBS, "max_tokens": 1, "temperature": 0.0}
        return self._convert(to_messages(messages)), kwargs

    def _logprobs_reply(self, messages: Messages) -> Any:
        lc_messages, kwargs = self._yes_no_call(messages)
        return self.model.invoke(lc_messages, **kwargs)

    async def _alogprobs_reply(self, messages: Messages) -> Any:
        lc_messages, kwargs = self._yes_no_call(messages)
        return await self.model.ainvoke(lc_messages, **kwargs)

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
