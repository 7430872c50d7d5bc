"""Any of our chat models (the embedded SmolLM2 above all) as a LlamaIndex ``LLM`` for chat and query engines.
For a server or a llama.cpp model with function calling, use LlamaIndex's own ``OpenAILike``
(llama-index-llms-openai-like) or ``LlamaCPP`` (llama-index-llms-llama-cpp).

>>> from llama_index.core.chat_engine import SimpleChatEngine
>>> from fragrel_integrations.testing import ScriptedChatModel
>>> engine = SimpleChatEngine.from_defaults(llm=FragRelLLM(model=ScriptedChatModel(["Hi! How can I help?"])))
>>> engine.chat("Hello").response
'Hi! How can I help?'
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, TypeVar

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
)
from llama_index.core.constants import DEFAULT_CONTEXT_WINDOW, DEFAULT_NUM_OUTPUTS
from llama_index.core.llms import LLM
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from pydantic import Field, field_validator, model_validator

from .._validation import check_type
from ..adapters.arguments import check_wrapped_chat_model
from ..adapters.wrapped_chat import astream_pieces, reply_text, role_messages, stream_pieces
from ..models.chat import check_context_window, check_params, context_window, is_instance_of, model_id

__all__ = ["FragRelLLM", "to_role_messages"]

_ROLES = {
    MessageRole.SYSTEM: "system",
    MessageRole.DEVELOPER: "system",
    MessageRole.USER: "user",
    MessageRole.ASSISTANT: "assistant",
    MessageRole.CHATBOT: "assistant",
    MessageRole.MODEL: "assistant",
}
_TOOL_ROLES = frozenset({MessageRole.TOOL, MessageRole.FUNCTION})
_MEDIA_BLOCKS = frozenset({"image", "audio", "video", "document"})

R = TypeVar("R")


def to_role_messages(messages: Sequence[ChatMessage]) -> list[dict[str, str]]:
    """LlamaIndex ``ChatMessage`` objects -> ``{"role", "content"}`` dicts (see
    :func:`~fragrel_integrations.adapters.wrapped_chat.role_messages`); media blocks raise ``ValueError``.

    >>> to_role_messages([ChatMessage(role="system", content="Be brief."), ChatMessage(role="user", content="Hi")])
    [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'Hi'}]
    """
    turns: list[tuple[str, str, list[tuple[str, Any]], str]] = []
    tool_names: dict[str, str] = {}  # tool_call_id -> tool name, to label the results
    for message in messages:
        texts: list[str] = []
        calls: list[tuple[str, Any]] = []
        for block in message.blocks:
            kind = getattr(block, "block_type", None)
            if kind in _MEDIA_BLOCKS:
                raise ValueError(
                    f"a {message.role.value} message has a {kind!r} block: the wrapped chat model reads text only"
                )
            if kind == "text":
                texts.append(block.text)
            elif kind == "tool_call":
                calls.append((block.tool_name, block.tool_kwargs))
                if block.tool_call_id:
                    tool_names[block.tool_call_id] = block.tool_name
        if message.role in _TOOL_ROLES:
            extra = message.additional_kwargs
            call_id = extra.get("tool_call_id")
            turns.append(
                ("tool", "".join(texts), [], extra.get("name") or tool_names.get(call_id) or call_id or "tool")
            )
        elif message.role in _ROLES:
            turns.append((_ROLES[message.role], "".join(texts), calls, ""))
        else:  # a role added by a later LlamaIndex
            raise ValueError(f"cannot send a {message.role!r} message to a chat model (roles: system, user, assistant)")
    return role_messages(turns)


def _chat_response(text: str, delta: str | None = None) -> ChatResponse:
    message = ChatMessage(role=MessageRole.ASSISTANT, content=text)
    return ChatResponse(message=message, delta=text if delta is None else delta)


def _completion(text: str, delta: str | None = None) -> CompletionResponse:
    return CompletionResponse(text=text, delta=text if delta is None else delta)


class FragRelLLM(LLM):
    """A :class:`~fragrel_integrations.models.chat.ChatModel` as a LlamaIndex chat LLM (no function calling).

    ``temperature``, ``max_tokens`` and ``stop`` are the defaults of every call; ``chat(..., temperature=...,
    max_tokens=..., stop=...)`` overrides them (other keywords are ignored). Streaming methods yield the model's
    pieces.

    >>> from fragrel_integrations.testing import ScriptedChatModel
    >>> llm = FragRelLLM(model=ScriptedChatModel(["Paris. A city."]), max_tokens=16, stop=["."])
    >>> llm.complete("Capital of France?").text, llm.metadata.is_chat_model
    ('Paris', True)
    """

    model: Any = Field(description="The wrapped chat model: an object with invoke(messages, ...) -> str.")
    temperature: float | None = Field(default=None, description="Default sampling temperature (None: model's).")
    max_tokens: int | None = Field(default=None, description="Default reply length limit (None: model's).")
    stop: str | list[str] | None = Field(default=None, description="Default stop strings (one string: a list of one).")
    context_window: int | None = Field(default=None, description="Override of the model's context window.")

    @field_validator("model")
    @classmethod
    def _check_model(cls, model: Any) -> Any:
        native = "a LlamaIndex LLM" if isinstance(model, LLM) else None
        foreign = is_instance_of(model, "langchain_core.language_models", "BaseLanguageModel")
        return check_wrapped_chat_model(model, native=native, convert="LangChain models", foreign=foreign)

    @model_validator(mode="after")
    def _check_params(self) -> FragRelLLM:
        self.temperature, self.max_tokens, self.stop = check_params(self.temperature, self.max_tokens, self.stop)
        self.context_window = check_context_window(self.context_window)
        return self

    @classmethod
    def class_name(cls) -> str:
        return "fragrel_llm"

    @property
    def metadata(self) -> LLMMetadata:
        """Context window, reply length and name of the wrapped model."""
        output = getattr(self.model, "default_max_tokens", None)
        if not isinstance(output, int) or isinstance(output, bool) or output < 1:
            output = DEFAULT_NUM_OUTPUTS
        return LLMMetadata(
            context_window=self.context_window or context_window(self.model, DEFAULT_CONTEXT_WINDOW),
            num_output=self.max_tokens or output,
            is_chat_model=True,
            model_name=model_id(self.model),
        )

    def _params(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        t, n, s = check_params(kwargs.get("temperature", self.temperature), kwargs.get("max_tokens", self.max_tokens),
                               kwargs.get("stop", self.stop))  # fmt: skip
        return {"temperature": t, "max_tokens": n, "stop": s}

    def _invoke(self, sent: list[dict[str, str]], kwargs: dict[str, Any]) -> str:
        return reply_text(self.model, self.model.invoke(sent, **self._params(kwargs)))

    async def _ainvoke(self, sent: list[dict[str, str]], kwargs: dict[str, Any]) -> str:
        params = self._params(kwargs)
        if callable(getattr(self.model, "ainvoke", None)):
            return reply_text(self.model, await self.model.ainvoke(sent, **params))
        return reply_text(self.model, await asyncio.to_thread(self.model.invoke, sent, **params))

    @staticmethod
    def _prompt(prompt: str) -> list[dict[str, str]]:
        check_type(prompt, str, "prompt must be str")
        return [{"role": "user", "content": prompt}]

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """Send the conversation to the wrapped model; the reply is the assistant message."""
        return _chat_response(self._invoke(to_role_messages(messages), kwargs))

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """Async :meth:`chat` (the model's ``ainvoke`` when it has one)."""
        return _chat_response(await self._ainvoke(to_role_messages(messages), kwargs))

    def _stream(
        self, sent: list[dict[str, str]], kwargs: dict[str, Any], respond: Callable[[str, str], R]
    ) -> Iterator[R]:
        params = self._params(kwargs)  # checked now, before the first piece is asked for

        def gen() -> Iterator[R]:
            text = ""
            for piece in stream_pieces(self.model, sent, params):
                text += piece
                yield respond(text, piece)

        return gen()

    def _astream(
        self, sent: list[dict[str, str]], kwargs: dict[str, Any], respond: Callable[[str, str], R]
    ) -> AsyncIterator[R]:
        params = self._params(kwargs)

        async def gen() -> AsyncIterator[R]:
            text = ""
            async for piece in astream_pieces(self.model, sent, params):
                text += piece
                yield respond(text, piece)

        return gen()

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        """:meth:`chat` as a stream; each response holds the text so far and the new ``delta``."""
        return self._stream(to_role_messages(messages), kwargs, _chat_response)

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseAsyncGen:
        """Async :meth:`stream_chat`."""
        return self._astream(to_role_messages(messages), kwargs, _chat_response)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        """Send ``prompt`` as one user message (``formatted`` is accepted and ignored)."""
        return _completion(self._invoke(self._prompt(prompt), kwargs))

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        """Async :meth:`complete`."""
        return _completion(await self._ainvoke(self._prompt(prompt), kwargs))

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        """:meth:`complete` as a stream."""
        return self._stream(self._prompt(prompt), kwargs, _completion)

    @llm_completion_callback()
    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseAsyncGen:
        """Async :meth:`stream_complete`."""
        return self._astream(self._prompt(prompt), kwargs, _completion)
