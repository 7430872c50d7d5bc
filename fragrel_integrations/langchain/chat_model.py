"""Any of our chat models (the embedded SmolLM2 above all) as a LangChain ``BaseChatModel``, for chains and agents
that need no tools. For a server or a llama.cpp model with tool calling, use LangChain's own ``ChatOpenAI``
(langchain-openai) or ``ChatLlamaCpp`` (langchain-community).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
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

from ..adapters.arguments import check_wrapped_chat_model
from ..adapters.wrapped_chat import astream_pieces, content_text, reply_text, role_messages, stream_pieces
from ..models.chat import check_params, model_id
from ..models.tokens import count_message_tokens, count_tokens

__all__ = ["FragRelChatModel", "to_role_messages"]

_ROLE_ALIASES = {"system": "system", "developer": "system", "user": "user", "human": "user", "assistant": "assistant"}
_ROLE_ALIASES["ai"] = "assistant"
_NO_TOOLS = (
    "FragRelChatModel has no tool calling: for agents with tools use LangChain's ChatLlamaCpp (langchain-community, "
    "a GGUF model such as the embedded SmolLM2) or ChatOpenAI(base_url=..., model=...) from langchain-openai "
    "against an OpenAI-compatible server"
)


def _turn(message: BaseMessage) -> tuple[str, str, list[tuple[str, Any]], str]:
    text = content_text(message.content, message.type)
    if isinstance(message, SystemMessage | HumanMessage):
        return ("system" if isinstance(message, SystemMessage) else "user"), text, [], ""
    if isinstance(message, AIMessage):
        return "assistant", text, [(c["name"], c.get("args", {})) for c in message.tool_calls], ""
    if isinstance(message, ToolMessage | FunctionMessage):
        label = getattr(message, "name", None) or getattr(message, "tool_call_id", None) or "tool"
        return "tool", text, [], label
    if isinstance(message, ChatMessage) and message.role.lower() in _ROLE_ALIASES:
        return _ROLE_ALIASES[message.role.lower()], text, [], ""
    kind = message.role if isinstance(message, ChatMessage) else message.type
    raise ValueError(f"cannot send a {kind!r} message to a chat model (roles: system, user, assistant)")


def to_role_messages(messages: list[BaseMessage]) -> list[dict[str, str]]:
    """LangChain messages -> ``{"role", "content"}`` dicts (see ``models.chat.role_messages``).

    >>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    >>> to_role_messages([HumanMessage("2+2?"), AIMessage("4"), ToolMessage("ok", tool_call_id="c1")])[2]
    {'role': 'user', 'content': 'Tool result (c1): ok'}
    """
    return role_messages([_turn(m) for m in messages])


class FragRelChatModel(BaseChatModel):
    """A :class:`~fragrel_integrations.models.chat.ChatModel` as a LangChain chat model (no tools).

    ``temperature``, ``max_tokens`` and ``stop`` are the defaults of every call, overridden per call. ``stream``
    yields the model's pieces; the last chunk carries ``usage_metadata`` (exact when the model counts tokens).

    >>> from fragrel_integrations.testing import ScriptedChatModel
    >>> reply = FragRelChatModel(model=ScriptedChatModel(["Hello there"])).invoke("Hi")
    >>> reply.content, reply.usage_metadata["output_tokens"]
    ('Hello there', 4)
    """

    model: Any
    """The wrapped chat model: any object with ``invoke(messages, *, temperature, max_tokens, stop) -> str``."""
    temperature: float | None = None
    max_tokens: int | None = None
    stop: str | list[str] | None = None

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
    def model_name(self) -> str:
        """The wrapped model's name."""
        return model_id(self.model)

    @property
    def _llm_type(self) -> str:
        return "fragrel-chat"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name, "temperature": self.temperature, "max_tokens": self.max_tokens,
                "stop": self.stop}  # fmt: skip

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> Any:
        params = super()._get_ls_params(stop=stop, **kwargs)
        params["ls_provider"] = "fragrel"
        override = kwargs.get("model")
        params["ls_model_name"] = override if isinstance(override, str) else self.model_name
        if stop is None and self.stop:
            params["ls_stop"] = self.stop
        return params

    def get_num_tokens(self, text: str) -> int:
        """The wrapped model's ``count_tokens``, else the offline estimate (LangChain's default downloads)."""
        return count_tokens(self.model, text)

    def get_num_tokens_from_messages(self, messages: list[BaseMessage], tools: Any = None) -> int:
        """Prompt tokens of ``messages`` (chat template included when the model applies it)."""
        if tools:
            raise NotImplementedError(_NO_TOOLS)
        return count_message_tokens(self.model, to_role_messages(messages))

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        """Not supported: see :data:`_NO_TOOLS` for the classes to use instead."""
        raise NotImplementedError(_NO_TOOLS)

    def _prepare(self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any]) -> tuple[Any, Any]:
        """The role messages and generation keywords of one call; call keywords other than temperature,
        max_tokens and stop are ignored, tools and the legacy functions API refused."""
        if kwargs.get("tools") or kwargs.get("functions") or kwargs.get("function_call"):
            raise NotImplementedError(_NO_TOOLS + " (bind_tools is not supported either)")
        override, name = kwargs.get("model"), self.model_name
        if isinstance(override, str) and override != name:
            raise ValueError(f"FragRelChatModel wraps {name!r} and cannot switch to model={override!r}; build another")
        t, n, s = check_params(kwargs.get("temperature", self.temperature), kwargs.get("max_tokens", self.max_tokens),
                               self.stop if stop is None else stop)  # fmt: skip
        return to_role_messages(messages), {"temperature": t, "max_tokens": n, "stop": s}

    def _message(self, sent: list[dict[str, str]], reply: Any, content: str | None = None) -> dict[str, Any]:
        text = reply_text(self.model, reply)
        prompt, out = count_message_tokens(self.model, sent), count_tokens(self.model, text)
        usage = UsageMetadata(input_tokens=prompt, output_tokens=out, total_tokens=prompt + out)
        meta = {"model_name": self.model_name}
        return {"content": text if content is None else content, "usage_metadata": usage, "response_metadata": meta}

    def _result(self, sent: list[dict[str, str]], reply: Any) -> ChatResult:
        message = AIMessage(**self._message(sent, reply))
        return ChatResult(generations=[ChatGeneration(message=message)], llm_output={"model_name": self.model_name})

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

    def _last(self, sent: list[dict[str, str]], text: str, streamed: bool) -> ChatGenerationChunk:
        fields = self._message(sent, text, "" if streamed else None)
        return ChatGenerationChunk(message=AIMessageChunk(**fields, chunk_position="last"))

    def _chunk(self, sent: list[dict[str, str]], piece: str, streams: bool) -> ChatGenerationChunk:
        """A streamed piece, or the whole reply with its usage from a model that cannot stream."""
        return ChatGenerationChunk(message=AIMessageChunk(content=piece)) if streams else self._last(sent, piece, False)

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        """The model's pieces (one chunk when it cannot stream); the last chunk carries the usage."""
        sent, params = self._prepare(messages, stop, kwargs)
        streams = callable(getattr(self.model, "stream", None))
        parts: list[str] = []
        for piece in stream_pieces(self.model, sent, params):
            parts.append(piece)
            chunk = self._chunk(sent, piece, streams)
            if run_manager is not None:
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk
        if streams:
            yield self._last(sent, "".join(parts), True)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        sent, params = self._prepare(messages, stop, kwargs)
        streams = callable(getattr(self.model, "astream", None)) or callable(getattr(self.model, "stream", None))
        parts: list[str] = []
        async for piece in astream_pieces(self.model, sent, params):
            parts.append(piece)
            chunk = self._chunk(sent, piece, streams)
            if run_manager is not None:
                await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk
        if streams:
            yield self._last(sent, "".join(parts), True)
