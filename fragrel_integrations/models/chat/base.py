""":class:`ChatModelBase`, the base class of this package's chat models: inputs checked once, then the
backend's ``_generate`` (and its async, streaming and constrained-format siblings)."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterator
from typing import Unpack

from ..structured import ReplyFormat
from .aio import aiter_in_thread
from .messages import Messages
from .params import GenerationParams, prepare_call

__all__ = ["ChatModelBase"]


class ChatModelBase(ABC):
    """Base class for adapters: validates inputs once, then calls ``_generate`` / ``_agenerate``.

    Subclasses implement ``_generate(messages, temperature, max_tokens, stop) -> str`` with already-normalised
    arguments. ``_agenerate`` defaults to running ``_generate`` in a worker thread (``asyncio.to_thread``), which
    keeps the event loop free while a blocking backend works. ``model_name`` identifies the model in cache keys.
    """

    model_name: str = "chat-model"

    def invoke(
        self, messages: Messages, *, reply_format: ReplyFormat | None = None, **params: Unpack[GenerationParams]
    ) -> str:
        """The reply text. ``reply_format`` asks for a constrained reply; a backend that cannot enforce it
        (``supports_format`` is False) ignores it and the caller parses the free text."""
        msgs, t, n, s = prepare_call(messages, params)
        if _enforce(self, reply_format):
            return self._generate_format(msgs, t, n, s, reply_format)  # type: ignore[arg-type]
        return self._generate(msgs, t, n, s)

    async def ainvoke(
        self, messages: Messages, *, reply_format: ReplyFormat | None = None, **params: Unpack[GenerationParams]
    ) -> str:
        """Async :meth:`invoke`."""
        msgs, t, n, s = prepare_call(messages, params)
        if _enforce(self, reply_format):
            return await self._agenerate_format(msgs, t, n, s, reply_format)  # type: ignore[arg-type]
        return await self._agenerate(msgs, t, n, s)

    def supports_format(self, reply_format: ReplyFormat) -> bool:
        """Whether this backend enforces ``reply_format`` (constrained decoding); the base class enforces none."""
        return False

    def _generate_format(
        self,
        messages: list[dict[str, str]],
        temperature: float | None,
        max_tokens: int | None,
        stop: list[str] | None,
        reply_format: ReplyFormat,
    ) -> str:
        """Backends whose ``supports_format`` says True override this (called only for supported formats)."""
        raise NotImplementedError(
            f"{type(self).__name__} says it supports {reply_format.kind} formats but has no _generate_format"
        )

    async def _agenerate_format(self, messages, temperature, max_tokens, stop, reply_format) -> str:  # type: ignore[no-untyped-def]
        """Async :meth:`_generate_format` (in a worker thread unless a backend overrides it)."""
        return await asyncio.to_thread(self._generate_format, messages, temperature, max_tokens, stop, reply_format)

    def stream(self, messages: Messages, **params: Unpack[GenerationParams]) -> Iterator[str]:
        """Yield the reply in pieces as the backend makes them (tokens from llama.cpp, server-sent deltas from an
        OpenAI-compatible server); a backend that only returns finished text yields it as one piece. The pieces
        joined are what :meth:`invoke` returns. Arguments are checked at once, the model runs while iterating."""
        return self._stream(*prepare_call(messages, params))

    def astream(self, messages: Messages, **params: Unpack[GenerationParams]) -> AsyncIterator[str]:
        """Async :meth:`stream` (a blocking backend streams from a worker thread; the event loop stays free)."""
        return self._astream(*prepare_call(messages, params))

    @abstractmethod
    def _generate(
        self, messages: list[dict[str, str]], temperature: float | None, max_tokens: int | None, stop: list[str] | None
    ) -> str: ...

    async def _agenerate(
        self, messages: list[dict[str, str]], temperature: float | None, max_tokens: int | None, stop: list[str] | None
    ) -> str:
        return await asyncio.to_thread(self._generate, messages, temperature, max_tokens, stop)

    def _stream(
        self, messages: list[dict[str, str]], temperature: float | None, max_tokens: int | None, stop: list[str] | None
    ) -> Iterator[str]:
        """Backends that stream override this; the default yields the finished reply once."""
        yield self._generate(messages, temperature, max_tokens, stop)

    async def _astream(
        self, messages: list[dict[str, str]], temperature: float | None, max_tokens: int | None, stop: list[str] | None
    ) -> AsyncIterator[str]:
        if type(self)._stream is ChatModelBase._stream:  # no token stream: the finished async reply
            yield await self._agenerate(messages, temperature, max_tokens, stop)
            return
        async for piece in aiter_in_thread(self._stream(messages, temperature, max_tokens, stop)):
            yield piece

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model_name={self.model_name!r})"


def _enforce(model: ChatModelBase, reply_format: ReplyFormat | None) -> bool:
    if reply_format is None:
        return False
    if not isinstance(reply_format, ReplyFormat):
        raise TypeError(f"reply_format must be a ReplyFormat or None, got {type(reply_format).__name__}")
    return model.supports_format(reply_format)
