"""Tool calls: what a model asked for (:class:`ToolCall`, :class:`ToolReply`), earlier calls written as text
(:func:`format_tool_call`) and one turn of a tool-calling conversation (:func:`tool_turn`).

>>> ToolReply("", (ToolCall("weather", {"city": "Oslo"}, '{"city": "Oslo"}'),)).tool_calls[0].name
'weather'
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ToolCall", "ToolReply", "format_tool_call", "tool_turn"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call a model asked for. ``args`` is None and ``error`` says why when the arguments the model
    wrote are not a JSON object (e.g. cut off by ``max_tokens``); ``raw`` is the text it wrote."""

    name: str
    args: dict[str, Any] | None
    raw: str
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ToolReply:
    """A reply to a request with tools: text (``content``) or function calls (``tool_calls``)."""

    content: str
    tool_calls: tuple[ToolCall, ...] = ()


def format_tool_call(name: str, args: Any) -> str:
    """An earlier tool call written the way the tool-calling prompt of ``LlamaCppChatModel`` asks for it.

    >>> print(format_tool_call("weather", {"city": "Oslo"}))
    functions.weather:
    {"city": "Oslo"}
    """
    text = args if isinstance(args, str) else json.dumps(args or {}, ensure_ascii=False, default=str)
    return f"functions.{name}:\n{text}"


def tool_turn(
    model: Any,
    messages: list[dict[str, str]],
    answer_messages: list[dict[str, str]],
    tools: Sequence[Mapping[str, Any]],
    *,
    tool_choice: Any = "auto",
    called: Collection[str] | None = None,
    **params: Any,
) -> ToolReply:
    """One turn of a tool-calling conversation on a model with ``invoke_with_tools`` (the framework wrappers'
    shared core).

    ``messages`` shows earlier calls as :func:`format_tool_call` text; ``called`` names the tools already called
    since the user's last message (``None``: offer every tool again). Those are not offered again, and once every
    tool has answered the model gets a plain call on ``answer_messages`` (the conversation without the call
    text, tool results as user turns): a small model shown its own call format keeps writing calls instead of
    an answer.
    """
    allowed = None
    if called is not None:
        names = [(t.get("function", t) if isinstance(t, Mapping) else {}).get("name") for t in tools]
        allowed = [name for name in names if name not in called]
    if allowed == []:
        reply = model.invoke(answer_messages, **params)
        if not isinstance(reply, str):
            raise TypeError(f"{type(model).__name__}.invoke returned {type(reply).__name__}, not str")
        return ToolReply(reply)
    reply = model.invoke_with_tools(messages, tools, tool_choice=tool_choice, allowed=allowed, **params)
    if not isinstance(reply, ToolReply):
        raise TypeError(f"{type(model).__name__}.invoke_with_tools returned {type(reply).__name__}, not ToolReply")
    return reply
