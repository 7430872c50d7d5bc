"""What LangChain's ``FragRelChatModel`` and LlamaIndex's ``FragRelLLM`` share: a framework message's text,
earlier turns as ``{"role", "content"}`` dicts, and the wrapped model's reply in pieces."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

from ..models.chat import aiter_in_thread

__all__ = ["astream_pieces", "content_text", "reply_text", "role_messages", "stream_pieces"]


#: Content blocks a text model cannot read (OpenAI-style content parts and LangChain's standard blocks).
MEDIA_BLOCKS = frozenset({"image", "image_url", "audio", "input_audio", "video", "file", "document", "media"})


def content_text(content: str | Sequence[Any], owner: str) -> str:
    """The text of a framework message's ``content``: text blocks joined, a media block a ValueError.

    >>> content_text(["a", {"type": "text", "text": "b"}, {"type": "thinking", "thinking": "..."}], "human")
    'ab'
    """
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind in MEDIA_BLOCKS:
            raise ValueError(f"a {owner} message has a {kind!r} content block: the wrapped chat model reads text only")
        if isinstance(block, str):
            parts.append(block)
        elif kind == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
    return "".join(parts)


def role_messages(turns: Sequence[tuple[str, str, Sequence[tuple[str, Any]], str]]) -> list[dict[str, str]]:
    """``(role, text, tool calls, label)`` turns from a framework as ``{"role", "content"}`` dicts: earlier tool
    calls written as ``[tool call name({...})]``, tool results (role ``tool``) as user turns.

    >>> role_messages([("assistant", "", [("f", {"a": 1})], ""), ("tool", "ok", [], "f")])
    [{'role': 'assistant', 'content': '[tool call f({"a": 1})]'}, {'role': 'user', 'content': 'Tool result (f): ok'}]
    """
    out = []
    for role, text, calls, label in turns:
        if role == "tool":
            out.append({"role": "user", "content": f"Tool result ({label}): {text}"})
            continue
        shown = [f"[tool call {n}({json.dumps(a, ensure_ascii=False, sort_keys=True, default=str)})]" for n, a in calls]
        out.append({"role": role, "content": "\n".join(p for p in (text, *shown) if p)})
    return out


def reply_text(model: object, reply: Any, method: str = "invoke") -> str:
    """``reply`` if the model returned text, else a TypeError naming the model and ``method``."""
    if not isinstance(reply, str):
        verb = "yielded" if method in ("stream", "astream") else "returned"
        raise TypeError(f"{type(model).__name__}.{method} {verb} {type(reply).__name__}, not str")
    return reply


def stream_pieces(model: Any, sent: list[dict[str, str]], params: Mapping[str, Any]) -> Iterator[str]:
    """The reply in pieces: the model's ``stream`` when it has one, else its whole reply once."""
    if not callable(getattr(model, "stream", None)):
        yield reply_text(model, model.invoke(sent, **params))
        return
    for piece in model.stream(sent, **params):
        yield reply_text(model, piece, "stream")


async def astream_pieces(model: Any, sent: list[dict[str, str]], params: Mapping[str, Any]) -> AsyncIterator[str]:
    """Async :func:`stream_pieces`: ``astream``, else ``stream`` in a worker thread, else one reply."""
    if callable(getattr(model, "astream", None)):
        async for piece in model.astream(sent, **params):
            yield reply_text(model, piece, "astream")
    elif callable(getattr(model, "stream", None)):
        async for piece in aiter_in_thread(model.stream(sent, **params)):
            yield reply_text(model, piece, "stream")
    elif callable(getattr(model, "ainvoke", None)):
        yield reply_text(model, await model.ainvoke(sent, **params))
    else:
        yield reply_text(model, await asyncio.to_thread(model.invoke, sent, **params))
