"""A :class:`~.protocol.ChatModel` served through a framework's chat interface: the logic the LangChain
``FragRelChatModel`` and the LlamaIndex ``FragRelLLM`` share, without either framework.

An adapter converts its framework's messages to :class:`BridgeMessage` objects and calls a :class:`ChatBridge`,
which owns the default generation parameters and their per-call overrides, the conversion to
``{"role", "content"}`` dicts (tool calls written as text, tool results as user turns), plain, streamed and async
calls with their reply checks, and one turn of tool calling.

>>> from fragrel_integrations.testing import ScriptedChatModel
>>> bridge = ChatBridge(ScriptedChatModel(["Paris."]), max_tokens=8, wrapper="FragRelChatModel")
>>> sent = role_messages([BridgeMessage("user", "Capital of France?")])
>>> bridge.invoke(sent, bridge.params({}))
'Paris.'
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..tokens import count_message_tokens, count_tokens
from .aio import aiter_in_thread
from .params import check_params
from .protocol import context_window, model_id
from .tools import ToolReply, format_tool_call, tool_turn

__all__ = [
    "LEGACY_TOOL_KWARGS",
    "BridgeMessage",
    "ChatBridge",
    "aaccumulate",
    "accumulate",
    "called_since_user",
    "content_text",
    "new_call_id",
    "role_messages",
]

#: How earlier tool calls are shown to the model: ``"text"`` (``[tool call name({...})]``), ``"functions"`` (the
#: format the tool-calling prompt of ``LlamaCppChatModel`` asks for) or ``"drop"`` (left out).
TOOL_STYLES = ("text", "functions", "drop")


@dataclass(frozen=True, slots=True)
class BridgeMessage:
    """One framework message reduced to what a text chat model sees.

    ``role`` is ``system``, ``user``, ``assistant`` or ``tool`` (a tool or function result, labelled ``label``);
    ``calls`` are the ``(name, args)`` tool calls of an assistant turn.

    >>> BridgeMessage("tool", "sunny", label="weather").role
    'tool'
    """

    role: str
    text: str
    calls: tuple[tuple[str, Any], ...] = ()
    label: str = "tool"


#: Call keywords of the legacy OpenAI functions API, refused by :meth:`ChatBridge.call_params`.
LEGACY_TOOL_KWARGS = ("functions", "function_call")

#: Content blocks a text model cannot read (OpenAI-style content parts and LangChain's standard blocks).
MEDIA_BLOCKS = frozenset({"image", "image_url", "audio", "input_audio", "video", "file", "document", "media"})


def content_text(content: str | Sequence[Any], owner: str) -> str:
    """The text of a message ``content`` (a str, or a list of str and ``{"type": ...}`` blocks): text blocks
    joined, media blocks a ValueError naming the ``owner`` message (a text model cannot see them), others dropped.

    >>> content_text(["a", {"type": "text", "text": "b"}, {"type": "thinking", "thinking": "..."}], "human")
    'ab'
    """
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, Mapping):
            kind = block.get("type")
            if kind in MEDIA_BLOCKS:
                raise ValueError(
                    f"a {owner} message has a {kind!r} content block: the wrapped chat model reads text only"
                )
            if kind == "text" and isinstance(block.get("text"), str):
                parts.append(block["text"])
    return "".join(parts)


def accumulate(pieces: Iterable[str]) -> Iterator[tuple[str, str]]:
    """``(text so far, piece)`` for each piece of a streamed reply.

    >>> list(accumulate(["Hel", "lo"]))
    [('Hel', 'Hel'), ('Hello', 'lo')]
    """
    text = ""
    for piece in pieces:
        text += piece
        yield text, piece


async def aaccumulate(pieces: AsyncIterable[str]) -> AsyncIterator[tuple[str, str]]:
    """Async :func:`accumulate`."""
    text = ""
    async for piece in pieces:
        text += piece
        yield text, piece


def _calls_text(calls: Sequence[tuple[str, Any]], style: str) -> str:
    if style == "drop":
        return ""
    if style == "functions":
        return "\n".join(format_tool_call(name, args) for name, args in calls)
    return "\n".join(
        f"[tool call {name}({json.dumps(args, ensure_ascii=False, sort_keys=True, default=str)})]"
        for name, args in calls
    )


def role_messages(messages: Iterable[BridgeMessage], tool_style: str = "text") -> list[dict[str, str]]:
    """``{"role", "content"}`` dicts for a chat model: tool calls of assistant turns written out in ``tool_style``
    (an assistant turn left empty by ``"drop"`` is skipped), tool results as user turns ``Tool result (label):``.

    >>> role_messages([BridgeMessage("assistant", "", (("f", {"a": 1}),)), BridgeMessage("tool", "ok", label="f")])
    [{'role': 'assistant', 'content': '[tool call f({"a": 1})]'}, {'role': 'user', 'content': 'Tool result (f): ok'}]
    """
    if tool_style not in TOOL_STYLES:
        raise ValueError(f"tool_style must be one of {TOOL_STYLES}, got {tool_style!r}")
    out: list[dict[str, str]] = []
    for message in messages:
        if message.role == "tool":
            out.append({"role": "user", "content": f"Tool result ({message.label}): {message.text}"})
            continue
        text = "\n".join(p for p in (message.text, _calls_text(message.calls, tool_style)) if p)
        if message.role == "assistant" and not text and tool_style == "drop":
            continue
        out.append({"role": message.role, "content": text})
    return out


def called_since_user(messages: Sequence[BridgeMessage]) -> set[str]:
    """Names of the tools the model called after the last user message.

    >>> called_since_user([BridgeMessage("user", "hi"), BridgeMessage("assistant", "", (("f", {}),))])
    {'f'}
    """
    called: set[str] = set()
    for message in reversed(messages):
        if message.role == "user":
            break
        called.update(name for name, _ in message.calls)
    return called


def new_call_id() -> str:
    """A fresh tool-call id (``call_`` and 24 hex digits), as OpenAI writes them."""
    return f"call_{uuid.uuid4().hex[:24]}"


class ChatBridge:
    """A chat model with default generation parameters, as a framework wrapper calls it.

    ``temperature``, ``max_tokens`` and ``stop`` are the defaults (None: the model's own); :meth:`params` applies
    a call's overrides and checks them. ``wrapper`` names the framework class in error messages.
    """

    __slots__ = ("max_tokens", "model", "stop", "temperature", "wrapper")

    def __init__(
        self,
        model: Any,
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        stop: str | Sequence[str] | None = None,
        wrapper: str = "the wrapper",
    ) -> None:
        self.model = model
        self.temperature, self.max_tokens, self.stop = check_params(temperature, max_tokens, stop)
        self.wrapper = wrapper

    @classmethod
    def of(cls, wrapper: Any, name: str) -> ChatBridge:
        """The bridge of a framework wrapper (named ``name`` in errors) with the fields ``model``, ``temperature``,
        ``max_tokens`` and ``stop``."""
        params = {key: getattr(wrapper, key) for key in ("temperature", "max_tokens", "stop")}
        return cls(wrapper.model, **params, wrapper=name)

    # -- parameters and checks -----------------------------------------------------------------------------------
    def params(self, overrides: Mapping[str, Any]) -> dict[str, Any]:
        """The generation keywords of one call: ``overrides`` (``temperature``/``max_tokens``/``stop``) over the
        defaults, checked."""
        t, n, s = check_params(
            overrides.get("temperature", self.temperature),
            overrides.get("max_tokens", self.max_tokens),
            overrides.get("stop", self.stop),
        )
        return {"temperature": t, "max_tokens": n, "stop": s}

    def call_params(self, kwargs: Mapping[str, Any], stop: Sequence[str] | None, alternative: str) -> dict[str, Any]:
        """:meth:`params` of a call that passes the framework's call keywords: the legacy ``functions`` API is
        refused (bind tools instead), ``tools`` need a tool-calling model (:meth:`require_tools`), a ``model`` name
        other than this model's is a ValueError; ``temperature``, ``max_tokens`` and ``stop`` override the defaults,
        other keywords are ignored.

        >>> from fragrel_integrations.testing import ScriptedChatModel
        >>> ChatBridge(ScriptedChatModel(["x"]), stop=".").call_params({"temperature": 0, "seed": 1}, None, "")
        {'temperature': 0.0, 'max_tokens': None, 'stop': ['.']}
        """
        for key in LEGACY_TOOL_KWARGS:
            if kwargs.get(key):
                raise NotImplementedError(
                    f"{self.wrapper} got {key!r}, the legacy OpenAI functions API: bind tools with bind_tools"
                )
        if kwargs.get("tools"):
            self.require_tools(alternative)
        override, name = kwargs.get("model"), model_id(self.model)
        if isinstance(override, str) and override != name:
            raise ValueError(
                f"{self.wrapper} wraps {name!r} and cannot switch to model={override!r}; "
                f"build another {self.wrapper} for that model"
            )
        overrides = {k: kwargs[k] for k in ("temperature", "max_tokens") if k in kwargs}
        if stop is not None:
            overrides["stop"] = stop
        return self.params(overrides)

    def limits(self, window: int | None, default_window: int, default_output: int) -> tuple[int, int]:
        """``(context window, reply tokens)`` a framework reports: ``window`` if given, else the model's own, else
        ``default_window``; ``max_tokens``, else the model's ``default_max_tokens``, else ``default_output``."""
        output = getattr(self.model, "default_max_tokens", None)
        if not isinstance(output, int) or isinstance(output, bool) or output < 1:
            output = default_output
        return window or context_window(self.model, default_window), self.max_tokens or output

    def text(self, reply: Any, method: str = "invoke") -> str:
        """``reply`` if the model returned text, else a TypeError naming the model and ``method``."""
        if not isinstance(reply, str):
            verb = "yielded" if method in ("stream", "astream") else "returned"
            raise TypeError(f"{type(self.model).__name__}.{method} {verb} {type(reply).__name__}, not str")
        return reply

    def has(self, method: str) -> bool:
        """Whether the model has ``method`` (``ainvoke``, ``stream``, ``astream``, ``invoke_with_tools``)."""
        return callable(getattr(self.model, method, None))

    def require_tools(self, alternative: str) -> None:
        """NotImplementedError, naming what to use instead, unless the model can call tools."""
        if not self.has("invoke_with_tools"):
            raise NotImplementedError(
                f"{self.wrapper} wraps {type(self.model).__name__}, which has no tool calling. For agents with tools "
                "wrap LlamaCppChatModel (grammar-constrained tool calls with the embedded SmolLM2 or any chat GGUF), "
                f"or use {alternative} against an OpenAI-compatible server (llama-cpp-python's server, vLLM, Ollama)"
            )

    def usage(self, sent: list[dict[str, str]], reply: str) -> tuple[int, int]:
        """Prompt and reply tokens (exact when the model counts tokens itself, else the offline estimate)."""
        return count_message_tokens(self.model, sent), count_tokens(self.model, reply)

    # -- calls ---------------------------------------------------------------------------------------------------
    def invoke(self, sent: list[dict[str, str]], params: Mapping[str, Any]) -> str:
        """The model's reply text."""
        return self.text(self.model.invoke(sent, **params))

    async def ainvoke(self, sent: list[dict[str, str]], params: Mapping[str, Any]) -> str:
        """Async :meth:`invoke`: the model's ``ainvoke`` when it has one, else ``invoke`` in a worker thread."""
        if self.has("ainvoke"):
            return self.text(await self.model.ainvoke(sent, **params))
        return self.text(await asyncio.to_thread(self.model.invoke, sent, **params))

    def pieces(self, sent: list[dict[str, str]], params: Mapping[str, Any]) -> Iterator[str]:
        """The reply in pieces: the model's ``stream`` when it has one (tokens), else the whole reply once."""
        if not self.has("stream"):
            yield self.invoke(sent, params)
            return
        for piece in self.model.stream(sent, **params):
            yield self.text(piece, "stream")

    async def apieces(self, sent: list[dict[str, str]], params: Mapping[str, Any]) -> AsyncIterator[str]:
        """Async :meth:`pieces`: ``astream``, else ``stream`` in a worker thread, else one async reply."""
        if self.has("astream"):
            async for piece in self.model.astream(sent, **params):
                yield self.text(piece, "astream")
        elif self.has("stream"):
            async for piece in aiter_in_thread(self.model.stream(sent, **params)):
                yield self.text(piece, "stream")
        else:
            yield await self.ainvoke(sent, params)

    def tool_turn(
        self,
        messages: Sequence[BridgeMessage],
        tools: Sequence[Mapping[str, Any]],
        params: Mapping[str, Any],
        *,
        tool_choice: Any = "auto",
        repeat_tool_calls: bool = False,
    ) -> ToolReply:
        """One turn of the model's ``invoke_with_tools`` (see :func:`~.tools.tool_turn`): earlier calls shown in
        the ``functions`` format; unless ``repeat_tool_calls``, tools called since the user's last message are not
        offered again."""
        return tool_turn(
            self.model,
            role_messages(messages, "functions"),
            role_messages(messages, "drop"),
            tools,
            tool_choice=tool_choice or "auto",
            called=None if repeat_tool_calls else called_since_user(messages),
            **params,
        )
