"""Any of our chat models (the embedded SmolLM2, ``OpenAIChatModel``, ``CachedChatModel``, ...) as a LlamaIndex
``LLM`` for chat engines and query engines: the reverse of :mod:`fragrel_integrations.models.llama_index_chat`. It
converts messages and delegates to :class:`~fragrel_integrations.models.chat.bridge.ChatBridge`.

>>> from llama_index.core.chat_engine import SimpleChatEngine
>>> from fragrel_integrations.testing import ScriptedChatModel
>>> engine = SimpleChatEngine.from_defaults(llm=FragRelLLM(model=ScriptedChatModel(["Hi! How can I help?"])))
>>> engine.chat("Hello").response
'Hi! How can I help?'
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

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
    TextBlock,
    ToolCallBlock,
)
from llama_index.core.constants import DEFAULT_CONTEXT_WINDOW, DEFAULT_NUM_OUTPUTS
from llama_index.core.llms import LLM
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import ToolSelection
from pydantic import Field, field_validator, model_validator

from ..adapters.arguments import check_wrapped_chat_model
from ..models.chat import check_params, is_instance_of, model_id
from ..models.chat.bridge import BridgeMessage, ChatBridge, aaccumulate, accumulate, new_call_id, role_messages
from ..models.chat.params import check_context_window

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
_TOOLS_ELSEWHERE = (
    "a function-calling LlamaIndex LLM, e.g. OpenAILike(model=..., api_base=..., is_function_calling_model=True) "
    "from llama-index-llms-openai-like"
)


def _bridge_messages(messages: Sequence[ChatMessage]) -> list[BridgeMessage]:
    out: list[BridgeMessage] = []
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
            label = extra.get("name") or tool_names.get(call_id) or call_id or "tool"
            out.append(BridgeMessage("tool", "".join(texts), label=label))
        elif message.role in _ROLES:
            out.append(BridgeMessage(_ROLES[message.role], "".join(texts), tuple(calls)))
        else:  # pragma: no cover - a role added by a future LlamaIndex
            raise ValueError(f"cannot send a {message.role!r} message to a chat model (roles: system, user, assistant)")
    return out


def to_role_messages(messages: Sequence[ChatMessage], *, _tool_style: str = "text") -> list[dict[str, str]]:
    """LlamaIndex ``ChatMessage`` objects -> ``{"role", "content"}`` dicts for a
    :class:`~fragrel_integrations.models.chat.ChatModel` (see
    :func:`~fragrel_integrations.models.chat.bridge.role_messages`); media blocks raise ``ValueError``.

    >>> to_role_messages([ChatMessage(role="system", content="Be brief."), ChatMessage(role="user", content="Hi")])
    [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'Hi'}]
    """
    return role_messages(_bridge_messages(messages), _tool_style)


class FragRelLLM(FunctionCallingLLM):
    """A :class:`~fragrel_integrations.models.chat.ChatModel` (``invoke(messages) -> str``) as a LlamaIndex chat LLM.

    ``temperature``, ``max_tokens`` and ``stop`` are the defaults of every call; ``chat(..., temperature=...,
    max_tokens=..., stop=...)`` overrides them (other keywords are ignored). ``metadata`` reports the limits of
    :meth:`ChatBridge.limits <fragrel_integrations.models.chat.bridge.ChatBridge.limits>`. Streaming methods yield
    tokens when the model streams. Tools (``chat_with_tools``, ``predict_and_call``, ``FunctionAgent``) need a
    model with ``invoke_with_tools`` (``LlamaCppChatModel``); others report ``is_function_calling_model=False``.

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
    repeat_tool_calls: bool = Field(
        default=False,
        description="Offer a tool again after it was called since the user's last message (False: small models "
        "otherwise call the same tool over and over instead of answering with its result).",
    )

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
    def _bridge(self) -> ChatBridge:
        return ChatBridge.of(self, "FragRelLLM")

    @property
    def metadata(self) -> LLMMetadata:
        """Context window, reply length and name of the wrapped model; a function-calling chat model when the
        wrapped model has ``invoke_with_tools``."""
        window, num_output = self._bridge.limits(self.context_window, DEFAULT_CONTEXT_WINDOW, DEFAULT_NUM_OUTPUTS)
        return LLMMetadata(
            context_window=window,
            num_output=num_output,
            is_chat_model=True,
            is_function_calling_model=self._bridge.has("invoke_with_tools"),
            model_name=model_id(self.model),
        )

    @staticmethod
    def _prompt(prompt: str) -> list[dict[str, str]]:
        if not isinstance(prompt, str):
            raise TypeError(f"prompt must be str, got {type(prompt).__name__}")
        return [{"role": "user", "content": prompt}]

    @staticmethod
    def _chat_response(text: str, delta: str | None = None) -> ChatResponse:
        message = ChatMessage(role=MessageRole.ASSISTANT, content=text)
        return ChatResponse(message=message, delta=text if delta is None else delta)

    # -- chat ----------------------------------------------------------------------------------------------------
    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """Send the conversation to the wrapped model; the reply is the assistant message (with ``ToolCallBlock``
        blocks when ``tools=`` are given and the model calls one)."""
        if kwargs.get("tools"):
            return self._tool_chat(messages, kwargs)
        bridge = self._bridge
        return self._chat_response(bridge.invoke(to_role_messages(messages), bridge.params(kwargs)))

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """Async :meth:`chat` (the model's ``ainvoke`` when it has one)."""
        if kwargs.get("tools"):
            return await asyncio.to_thread(self._tool_chat, messages, kwargs)
        bridge = self._bridge
        return self._chat_response(await bridge.ainvoke(to_role_messages(messages), bridge.params(kwargs)))

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        """:meth:`chat` as a stream: token by token when the wrapped model streams (llama.cpp, OpenAI-compatible
        servers), else one chunk. Each response holds the text so far and the new ``delta``. With ``tools=``:
        one response holding the whole decision."""
        tool_response = self._tool_chat(messages, kwargs) if kwargs.get("tools") else None
        sent = [] if tool_response is not None else to_role_messages(messages)

        def gen() -> ChatResponseGen:
            if tool_response is not None:
                yield tool_response
                return
            for text, piece in accumulate(self._bridge.pieces(sent, self._bridge.params(kwargs))):
                yield self._chat_response(text, piece)

        return gen()

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseAsyncGen:
        """Async :meth:`stream_chat`."""
        tool_response = await asyncio.to_thread(self._tool_chat, messages, kwargs) if kwargs.get("tools") else None
        sent = [] if tool_response is not None else to_role_messages(messages)

        async def gen() -> ChatResponseAsyncGen:
            if tool_response is not None:
                yield tool_response
                return
            async for text, piece in aaccumulate(self._bridge.apieces(sent, self._bridge.params(kwargs))):
                yield self._chat_response(text, piece)

        return gen()

    # -- completion ----------------------------------------------------------------------------------------------
    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        """Send ``prompt`` as one user message (``formatted`` is accepted and ignored)."""
        text = self._bridge.invoke(self._prompt(prompt), self._bridge.params(kwargs))
        return CompletionResponse(text=text, delta=text)

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        """Async :meth:`complete`."""
        text = await self._bridge.ainvoke(self._prompt(prompt), self._bridge.params(kwargs))
        return CompletionResponse(text=text, delta=text)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        """:meth:`complete` as a stream (token by token when the wrapped model streams)."""
        sent = self._prompt(prompt)

        def gen() -> CompletionResponseGen:
            for text, piece in accumulate(self._bridge.pieces(sent, self._bridge.params(kwargs))):
                yield CompletionResponse(text=text, delta=piece)

        return gen()

    @llm_completion_callback()
    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseAsyncGen:
        """Async :meth:`stream_complete`."""
        sent = self._prompt(prompt)

        async def gen() -> CompletionResponseAsyncGen:
            async for text, piece in aaccumulate(self._bridge.apieces(sent, self._bridge.params(kwargs))):
                yield CompletionResponse(text=text, delta=piece)

        return gen()

    # -- function calling ----------------------------------------------------------------------------------------
    def _prepare_chat_with_tools(
        self,
        tools: Sequence[Any],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        tool_choice: str | dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """The ``chat`` arguments for a turn with ``tools`` (LlamaIndex ``BaseTool`` objects). One call per turn
        (``allow_parallel_tool_calls`` is accepted; the model never makes two); ``tool_required`` forces a call."""
        self._bridge.require_tools(_TOOLS_ELSEWHERE)
        specs = []
        for tool in tools:
            metadata = getattr(tool, "metadata", None)
            if not callable(getattr(metadata, "to_openai_tool", None)):
                raise TypeError(f"tools must be LlamaIndex tools (e.g. FunctionTool.from_defaults(fn)), got {tool!r}")
            specs.append(metadata.to_openai_tool(skip_length_check=True))
        messages = list(chat_history or [])
        if isinstance(user_msg, str):
            user_msg = ChatMessage(role=MessageRole.USER, content=user_msg)
        if user_msg is not None:
            messages.append(user_msg)
        choice = "required" if tool_required else (tool_choice or "auto")
        return {"messages": messages, "tools": specs, "tool_choice": choice, **kwargs}

    def _tool_chat(self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]) -> ChatResponse:
        """One turn of the wrapped model's ``invoke_with_tools`` as a ``ChatResponse`` with ``ToolCallBlock``s."""
        bridge = self._bridge
        bridge.require_tools(_TOOLS_ELSEWHERE)
        reply = bridge.tool_turn(
            _bridge_messages(messages),
            kwargs["tools"],
            bridge.params(kwargs),
            tool_choice=kwargs.get("tool_choice"),
            repeat_tool_calls=self.repeat_tool_calls,
        )
        blocks: list[Any] = [TextBlock(text=reply.content)] if reply.content else []
        for call in reply.tool_calls:
            args: dict[str, Any] | str = call.args if call.args is not None else call.raw
            blocks.append(ToolCallBlock(tool_call_id=new_call_id(), tool_name=call.name, tool_kwargs=args))
        message = ChatMessage(role=MessageRole.ASSISTANT, blocks=blocks)
        errors = {c.name: c.error for c in reply.tool_calls if c.error}
        extra = {"tool_call_errors": errors} if errors else {}
        return ChatResponse(message=message, delta=reply.content, additional_kwargs=extra)

    def get_tool_calls_from_response(
        self, response: ChatResponse, error_on_no_tool_call: bool = True, **kwargs: Any
    ) -> list[ToolSelection]:
        """The tool calls in a :meth:`chat` reply. Arguments the model did not write as a JSON object (e.g. cut
        off by ``max_tokens``) become ``{}``, so the tool reports the missing arguments to the agent."""
        calls = [b for b in response.message.blocks if getattr(b, "block_type", None) == "tool_call"]
        if not calls and error_on_no_tool_call:
            raise ValueError(
                f"expected at least one tool call, got none; the model answered: {response.message.content!r}"
            )
        return [
            ToolSelection(
                tool_id=c.tool_call_id or c.tool_name,
                tool_name=c.tool_name,
                tool_kwargs=c.tool_kwargs if isinstance(c.tool_kwargs, dict) else {},
            )
            for c in calls
        ]
