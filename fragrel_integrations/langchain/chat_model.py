"""Any of our chat models (the embedded SmolLM2, ``OpenAIChatModel``, ``CachedChatModel``, ...) as a LangChain
``BaseChatModel``, for agents and chains: the reverse of :mod:`fragrel_integrations.models.langchain_chat`. It
converts messages and delegates to :class:`~fragrel_integrations.models.chat.bridge.ChatBridge`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseLanguageModel, LanguageModelInput
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
from langchain_core.messages.tool import invalid_tool_call, tool_call, tool_call_chunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import field_validator, model_validator

from ..adapters.arguments import check_wrapped_chat_model
from ..models.chat import check_params, model_id
from ..models.chat.bridge import BridgeMessage, ChatBridge, content_text, new_call_id, role_messages
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
_TOOLS_ELSEWHERE = "a tool-calling LangChain chat model, e.g. ChatOpenAI(base_url=..., model=...) from langchain-openai"


def _bridge_message(message: BaseMessage) -> BridgeMessage:
    text = content_text(message.content, message.type)
    if isinstance(message, SystemMessage):
        return BridgeMessage("system", text)
    if isinstance(message, HumanMessage):
        return BridgeMessage("user", text)
    if isinstance(message, AIMessage):
        return BridgeMessage("assistant", text, tuple((c["name"], c.get("args", {})) for c in message.tool_calls))
    if isinstance(message, ToolMessage | FunctionMessage):
        label = getattr(message, "name", None) or getattr(message, "tool_call_id", None) or "tool"
        return BridgeMessage("tool", text, label=label)
    if isinstance(message, ChatMessage) and message.role.lower() in _ROLE_ALIASES:
        return BridgeMessage(_ROLE_ALIASES[message.role.lower()], text)
    kind = message.role if isinstance(message, ChatMessage) else message.type
    raise ValueError(f"cannot send a {kind!r} message to a chat model (roles: system, user, assistant)")


def to_role_messages(messages: list[BaseMessage], *, _tool_style: str = "text") -> list[dict[str, str]]:
    """LangChain messages -> ``{"role", "content"}`` dicts for a :class:`~fragrel_integrations.models.chat.ChatModel`
    (see :func:`~fragrel_integrations.models.chat.bridge.role_messages`); ``ChatMessage`` roles
    ``system``/``developer``/``user``/``human``/``assistant``/``ai`` are mapped, other roles raise ``ValueError``.

    >>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    >>> to_role_messages([HumanMessage("2+2?"), AIMessage("4"), ToolMessage("ok", tool_call_id="c1")])[2]
    {'role': 'user', 'content': 'Tool result (c1): ok'}
    """
    return role_messages([_bridge_message(m) for m in messages], _tool_style)


class FragRelChatModel(BaseChatModel):
    """A :class:`~fragrel_integrations.models.chat.ChatModel` (``invoke(messages) -> str``) as a LangChain chat model.

    ``temperature``, ``max_tokens`` and ``stop`` are the defaults of every call, overridden per call (see
    :meth:`ChatBridge.call_params <fragrel_integrations.models.chat.bridge.ChatBridge.call_params>`). ``stream``
    yields tokens when the wrapped model streams; ``usage_metadata`` counts are exact when the model counts
    tokens itself. Tools (``bind_tools``, ``create_agent(chat, tools)``) need a model with ``invoke_with_tools``
    (``LlamaCppChatModel``); there is no ``with_structured_output``.

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
    stop: str | list[str] | None = None
    """Stop strings (one string is a list of one)."""
    repeat_tool_calls: bool = False
    """Offer a tool again after it was called since the user's last message (False: small models otherwise call
    the same tool over and over instead of answering with its result)."""

    @field_validator("model")
    @classmethod
    def _check_model(cls, model: Any) -> Any:
        native = "a LangChain model" if isinstance(model, BaseLanguageModel) else None
        return check_wrapped_chat_model(model, native=native, convert="LlamaIndex LLMs")

    @model_validator(mode="after")
    def _check_params(self) -> FragRelChatModel:
        self.temperature, self.max_tokens, self.stop = check_params(self.temperature, self.max_tokens, self.stop)
        return self

    @property
    def _bridge(self) -> ChatBridge:
        return ChatBridge.of(self, "FragRelChatModel")

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
        """Prompt tokens of ``messages`` (chat template included when the model can apply it); tool schemas are
        not counted."""
        if tools:
            raise NotImplementedError("FragRelChatModel does not count the tokens of tool schemas: count without tools")
        return count_message_tokens(self.model, to_role_messages(messages))

    # -- generation ----------------------------------------------------------------------------------------------
    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | dict[str, Any] | bool | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools for agents: needs a wrapped model with ``invoke_with_tools`` (one grammar-constrained call
        per turn); ``tool_choice``: ``"auto"`` (default), ``"any"``/``"required"``, ``"none"`` or a tool name."""
        self._bridge.require_tools(_TOOLS_ELSEWHERE)
        formatted = [convert_to_openai_tool(t) for t in tools]
        return super().bind(tools=formatted, tool_choice=tool_choice, **kwargs)

    def _prepare(
        self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any]
    ) -> tuple[list[dict[str, str]], dict[str, Any]]:
        """The role messages and generation keywords of one call (see ``ChatBridge.call_params``)."""
        return to_role_messages(messages), self._bridge.call_params(kwargs, stop, _TOOLS_ELSEWHERE)

    def _tool_result(self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any]) -> AIMessage:
        """One call of the wrapped model's ``invoke_with_tools`` as an ``AIMessage`` with ``tool_calls``."""
        _, params = self._prepare(messages, stop, kwargs)
        bridged = [_bridge_message(m) for m in messages]
        reply = self._bridge.tool_turn(
            bridged,
            kwargs["tools"],
            params,
            tool_choice=kwargs.get("tool_choice"),
            repeat_tool_calls=self.repeat_tool_calls,
        )
        fields = self._message_fields(role_messages(bridged, "functions"), reply.content)
        calls, invalid = [], []
        for call in reply.tool_calls:
            if call.args is None:
                invalid.append(invalid_tool_call(name=call.name, args=call.raw, id=new_call_id(), error=call.error))
            else:
                calls.append(tool_call(name=call.name, args=call.args, id=new_call_id()))
        return AIMessage(**fields, tool_calls=calls, invalid_tool_calls=invalid)

    def _tool_chunk(self, message: AIMessage) -> ChatGenerationChunk:
        chunks = [
            tool_call_chunk(name=c["name"], args=json.dumps(c["args"]), id=c["id"], index=i)
            for i, c in enumerate(message.tool_calls)
        ] + [
            tool_call_chunk(name=c["name"], args=c["args"], id=c["id"], index=len(message.tool_calls) + i)
            for i, c in enumerate(message.invalid_tool_calls)
        ]
        return ChatGenerationChunk(
            message=AIMessageChunk(
                content=message.content,
                tool_call_chunks=chunks,
                usage_metadata=message.usage_metadata,
                response_metadata=message.response_metadata,
                chunk_position="last",
            )
        )

    def _message_fields(self, sent: list[dict[str, str]], reply: Any) -> dict[str, Any]:
        prompt_tokens, reply_tokens = self._bridge.usage(sent, self._bridge.text(reply))
        usage = UsageMetadata(
            input_tokens=prompt_tokens, output_tokens=reply_tokens, total_tokens=prompt_tokens + reply_tokens
        )
        return {"content": reply, "usage_metadata": usage, "response_metadata": {"model_name": self.model_name}}

    def _result(self, message: AIMessage) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=message)], llm_output={"model_name": self.model_name})

    def _last_chunk(self, sent: list[dict[str, str]], reply: str, streamed: bool = False) -> ChatGenerationChunk:
        """The closing chunk: usage and metadata, plus the text unless it was already streamed."""
        fields = self._message_fields(sent, reply)
        if streamed:
            fields["content"] = ""
        return ChatGenerationChunk(message=AIMessageChunk(**fields, chunk_position="last"))

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if kwargs.get("tools"):
            return self._result(self._tool_result(messages, stop, kwargs))
        sent, params = self._prepare(messages, stop, kwargs)
        return self._result(AIMessage(**self._message_fields(sent, self.model.invoke(sent, **params))))

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if kwargs.get("tools") or not self._bridge.has("ainvoke"):
            return await super()._agenerate(messages, stop, run_manager, **kwargs)  # sync call in an executor
        sent, params = self._prepare(messages, stop, kwargs)
        return self._result(AIMessage(**self._message_fields(sent, await self.model.ainvoke(sent, **params))))

    @staticmethod
    def _notify(run_manager: CallbackManagerForLLMRun | None, chunk: ChatGenerationChunk) -> ChatGenerationChunk:
        if run_manager is not None:
            run_manager.on_llm_new_token(chunk.text, chunk=chunk)
        return chunk

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        """Token by token when the wrapped model has ``stream`` (every fragrel chat model: llama.cpp tokens,
        server-sent deltas), else one chunk with the whole reply; the last chunk carries the usage."""
        if kwargs.get("tools"):  # one chunk with the whole decision
            yield self._notify(run_manager, self._tool_chunk(self._tool_result(messages, stop, kwargs)))
            return
        sent, params = self._prepare(messages, stop, kwargs)
        if not self._bridge.has("stream"):
            yield self._notify(run_manager, self._last_chunk(sent, self.model.invoke(sent, **params)))
            return
        parts: list[str] = []
        for piece in self._bridge.pieces(sent, params):
            parts.append(piece)
            yield self._notify(run_manager, ChatGenerationChunk(message=AIMessageChunk(content=piece)))
        yield self._last_chunk(sent, "".join(parts), streamed=True)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        async def notify(chunk: ChatGenerationChunk) -> ChatGenerationChunk:
            if run_manager is not None:
                await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            return chunk

        if kwargs.get("tools"):
            yield await notify(self._tool_chunk(await asyncio.to_thread(self._tool_result, messages, stop, kwargs)))
            return
        if self._bridge.has("astream"):
            sent, params = self._prepare(messages, stop, kwargs)
            parts: list[str] = []
            async for piece in self._bridge.apieces(sent, params):
                parts.append(piece)
                yield await notify(ChatGenerationChunk(message=AIMessageChunk(content=piece)))
            yield self._last_chunk(sent, "".join(parts), streamed=True)
            return
        if not self._bridge.has("ainvoke"):
            async for chunk in super()._astream(messages, stop, run_manager, **kwargs):  # _stream in an executor
                yield chunk
            return
        sent, params = self._prepare(messages, stop, kwargs)
        yield await notify(self._last_chunk(sent, await self.model.ainvoke(sent, **params)))
