"""Any of our chat models (the embedded SmolLM2, ``OpenAIChatModel``, ``CachedChatModel``, ...) as a LangChain
``BaseChatModel``, for agents and chains: the reverse of :mod:`fragrel_integrations.models.langchain_chat`.

The wrapped model is text in, text out: there is no tool calling (``bind_tools`` raises ``NotImplementedError``
as LangChain's base class does) and no ``with_structured_output``. ``stream`` yields the whole reply as one chunk.
Token counts in ``usage_metadata`` are exact when the model counts tokens itself (``LlamaCppChatModel``), else
the offline estimate of :mod:`fragrel_integrations.models.tokens`.

>>> from fragrel_integrations.testing import ScriptedChatModel
>>> chat = FragRelChatModel(model=ScriptedChatModel(["Paris. It is big."]), max_tokens=16, stop=["."])
>>> chat.invoke([("system", "Answer briefly."), ("human", "Capital of France?")]).content
'Paris'
>>> chat.model.calls[0]["messages"][0]
{'role': 'system', 'content': 'Answer briefly.'}
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseLanguageModel
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from pydantic import field_validator, model_validator

from ..models.chat import check_params, model_id
from ..models.tokens import count_message_tokens, count_tokens

__all__ = ["FragRelChatModel", "to_role_messages"]

_ROLE_ALIASES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "ai": "assistant",
}
_MEDIA_BLOCKS = frozenset({"image", "image_url", "audio", "input_audio", "video", "file", "document", "media"})
_TOOL_KWARGS = ("tools", "tool_choice", "functions", "function_call")


def _text(message: BaseMessage) -> str:
    """The text of ``message``; media blocks raise (a text model cannot see them), other non-text blocks drop."""
    content = message.content
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, Mapping):
            kind = block.get("type")
            if kind in _MEDIA_BLOCKS:
                raise ValueError(
                    f"a {message.type} message has a {kind!r} content block: the wrapped chat model reads text only"
                )
            if kind == "text" and isinstance(block.get("text"), str):
                parts.append(block["text"])
    return "".join(parts)


def _tool_calls_text(message: AIMessage) -> str:
    return "\n".join(
        f"[tool call {call['name']}({json.dumps(call.get('args', {}), ensure_ascii=False, sort_keys=True)})]"
        for call in message.tool_calls
    )


def to_role_messages(messages: list[BaseMessage]) -> list[dict[str, str]]:
    """LangChain messages -> ``{"role", "content"}`` dicts for a :class:`~fragrel_integrations.models.chat.ChatModel`.

    System -> ``system``, human -> ``user``, AI -> ``assistant`` (tool calls from another model's turn are
    written out as text), tool and function results -> ``user`` turns labelled ``Tool result (name):``.
    ``ChatMessage`` roles ``system``/``developer``/``user``/``human``/``assistant``/``ai`` are mapped; other
    roles raise ``ValueError``. Message ``name`` fields are ignored.

    >>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    >>> to_role_messages([HumanMessage("2+2?"), AIMessage("4"), ToolMessage("ok", tool_call_id="c1")])[2]
    {'role': 'user', 'content': 'Tool result (c1): ok'}
    """
    out: list[dict[str, str]] = []
    for message in messages:
        text = _text(message)
        if isinstance(message, SystemMessage):
            role = "system"
        elif isinstance(message, HumanMessage):
            role = "user"
        elif isinstance(message, AIMessage):
            role = "assistant"
            calls = _tool_calls_text(message)
            text = f"{text}\n{calls}" if text and calls else text or calls
        elif isinstance(message, ToolMessage | FunctionMessage):
            role = "user"
            label = getattr(message, "name", None) or getattr(message, "tool_call_id", None) or "tool"
            text = f"Tool result ({label}): {text}"
        elif isinstance(message, ChatMessage) and message.role.lower() in _ROLE_ALIASES:
            role = _ROLE_ALIASES[message.role.lower()]
        else:
            kind = message.role if isinstance(message, ChatMessage) else message.type
            raise ValueError(f"cannot send a {kind!r} message to a chat model (roles: system, user, assistant)")
        out.append({"role": role, "content": text})
    return out


class FragRelChatModel(BaseChatModel):
    """A :class:`~fragrel_integrations.models.chat.ChatModel` (``invoke(messages) -> str``) as a LangChain chat model.

    ``temperature``, ``max_tokens`` and ``stop`` are the defaults of every call (``None``: the wrapped model's
    own); ``invoke(..., stop=[...], temperature=..., max_tokens=...)`` overrides them per call. Other call
    keyword arguments are ignored, except tools (``NotImplementedError``: no tool calling) and a ``model`` name
    (``ValueError``: this wraps one model object). Async calls use the model's ``ainvoke`` when it has one, else
    LangChain runs the sync call in an executor.

    >>> from fragrel_integrations.testing import ScriptedChatModel
    >>> chat = FragRelChatModel(model=ScriptedChatModel(["Hello there"]))
    >>> reply = chat.invoke("Hi")
    >>> reply.content, reply.usage_metadata["output_tokens"]
    ('Hello there', 4)
    """

    model: Any
    """The wrapped chat model: any object with ``invoke(messages, *, temperature, max_tokens, stop) -> str``."""
    temperature: float | None = None
    max_tokens: int | None = None
    stop: list[str] | None = None

    @field_validator("model")
    @classmethod
    def _check_model(cls, model: Any) -> Any:
        if isinstance(model, BaseLanguageModel):
            raise TypeError(
                f"{type(model).__name__} is already a LangChain model: use it directly instead of wrapping it"
            )
        if not callable(getattr(model, "invoke", None)):
            raise TypeError(
                f"model must be a fragrel ChatModel with invoke(messages) -> str, got {type(model).__name__}; "
                "convert LlamaIndex LLMs with fragrel_integrations.models.chat.as_chat_model, or pass e.g. "
                "LlamaCppChatModel() / OpenAIChatModel(...)"
            )
        return model

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_list(cls, stop: Any) -> Any:
        return [stop] if isinstance(stop, str) else stop

    @model_validator(mode="after")
    def _check_params(self) -> FragRelChatModel:
        self.temperature, self.max_tokens, self.stop = check_params(self.temperature, self.max_tokens, self.stop)
        return self

    # -- identity ------------------------------------------------------------------------------------------------
    @property
    def model_name(self) -> str:
        """The wrapped model's name (``model_name`` attribute, else its class)."""
        return model_id(self.model)

    @property
    def _llm_type(self) -> str:
        return "fragrel-chat"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {
            "model_name": self.model_name,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "stop": self.stop,
        }

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> Any:
        params = super()._get_ls_params(stop=stop, **kwargs)
        params["ls_provider"] = "fragrel"
        override = kwargs.get("model")
        params["ls_model_name"] = override if isinstance(override, str) else self.model_name
        if stop is None and self.stop:
            params["ls_stop"] = self.stop
        return params

    # -- token counting (offline; LangChain's default downloads a GPT-2 tokenizer) -------------------------------
    def get_num_tokens(self, text: str) -> int:
        """Tokens in ``text``: the wrapped model's ``count_tokens`` if it has one, else the offline estimate."""
        return count_tokens(self.model, text)

    def get_num_tokens_from_messages(self, messages: list[BaseMessage], tools: Any = None) -> int:
        """Prompt tokens of ``messages`` (chat template included when the model can apply it); tools unsupported."""
        if tools:
            raise NotImplementedError("FragRelChatModel has no tool calling, so tools cannot be counted")
        return count_message_tokens(self.model, to_role_messages(messages))

    # -- generation ----------------------------------------------------------------------------------------------
    def _prepare(
        self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any]
    ) -> tuple[list[dict[str, str]], dict[str, Any]]:
        for key in _TOOL_KWARGS:
            if kwargs.get(key):
                raise NotImplementedError(
                    f"FragRelChatModel got {key!r}: the wrapped text model has no tool calling; "
                    "use a tool-calling LangChain chat model for agents with tools"
                )
        override = kwargs.get("model")
        if isinstance(override, str) and override != self.model_name:
            raise ValueError(
                f"FragRelChatModel wraps {self.model_name!r} and cannot switch to model={override!r}; "
                "build another FragRelChatModel for that model"
            )
        t, n, s = check_params(
            kwargs.get("temperature", self.temperature),
            kwargs.get("max_tokens", self.max_tokens),
            self.stop if stop is None else stop,
        )
        return to_role_messages(messages), {"temperature": t, "max_tokens": n, "stop": s}

    def _message_fields(self, sent: list[dict[str, str]], reply: Any) -> dict[str, Any]:
        if not isinstance(reply, str):
            raise TypeError(f"{type(self.model).__name__}.invoke returned {type(reply).__name__}, not str")
        prompt_tokens = count_message_tokens(self.model, sent)
        reply_tokens = count_tokens(self.model, reply)
        usage = UsageMetadata(
            input_tokens=prompt_tokens, output_tokens=reply_tokens, total_tokens=prompt_tokens + reply_tokens
        )
        return {"content": reply, "usage_metadata": usage, "response_metadata": {"model_name": self.model_name}}

    def _result(self, sent: list[dict[str, str]], reply: Any) -> ChatResult:
        message = AIMessage(**self._message_fields(sent, reply))
        return ChatResult(generations=[ChatGeneration(message=message)], llm_output={"model_name": self.model_name})

    def _chunk(self, sent: list[dict[str, str]], reply: Any) -> ChatGenerationChunk:
        return ChatGenerationChunk(message=AIMessageChunk(**self._message_fields(sent, reply), chunk_position="last"))

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        sent, params = self._prepare(messages, stop, kwargs)
        return self._result(sent, self.model.invoke(sent, **params))

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if not callable(getattr(self.model, "ainvoke", None)):
            return await super()._agenerate(messages, stop, run_manager, **kwargs)  # sync call in an executor
        sent, params = self._prepare(messages, stop, kwargs)
        return self._result(sent, await self.model.ainvoke(sent, **params))

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        """One chunk with the whole reply (the wrapped model returns finished text)."""
        sent, params = self._prepare(messages, stop, kwargs)
        chunk = self._chunk(sent, self.model.invoke(sent, **params))
        if run_manager is not None:
            run_manager.on_llm_new_token(chunk.text, chunk=chunk)
        yield chunk

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        if not callable(getattr(self.model, "ainvoke", None)):
            async for chunk in super()._astream(messages, stop, run_manager, **kwargs):  # _stream in an executor
                yield chunk
            return
        sent, params = self._prepare(messages, stop, kwargs)
        chunk = self._chunk(sent, await self.model.ainvoke(sent, **params))
        if run_manager is not None:
            await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
        yield chunk
