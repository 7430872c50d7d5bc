"""The ChatModel protocol (messages -> text, sync and async) and the helpers every backend shares.

``messages`` is a string (one user message) or a list of ``{"role", "content"}`` dicts / :class:`ChatMessage`;
None for a parameter means the backend's default.

>>> from fragrel_integrations.testing import ScriptedChatModel
>>> complete(ScriptedChatModel(["Paris."]), "Capital of France?", system="Answer briefly.", max_tokens=8)
'Paris.'
"""

from __future__ import annotations

import asyncio
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict, Unpack, runtime_checkable

from .._validation import check_positive_int, check_type
from .structured import ReplyFormat

__all__ = [
    "ROLES",
    "ChatMessage",
    "ChatModel",
    "ChatModelBase",
    "GenerationParams",
    "Messages",
    "abatch",
    "aiter_in_thread",
    "batch",
    "check_chat_model",
    "check_context_window",
    "check_params",
    "complete",
    "context_window",
    "given_params",
    "is_instance_of",
    "model_id",
    "to_messages",
]

ROLES = frozenset({"system", "user", "assistant"})
_PARAMS = ("temperature", "max_tokens", "stop")


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One chat turn; plain ``{"role": ..., "content": ...}`` dicts work everywhere this does."""

    role: str
    content: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {sorted(ROLES)}, got {self.role!r}")
        check_type(self.content, str, "message content must be str")

    def to_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


Messages = str | Sequence[Mapping[str, str] | ChatMessage]


def to_messages(messages: Messages) -> list[dict[str, str]]:
    """``messages`` as a new list of checked dicts.

    >>> to_messages("Hello")
    [{'role': 'user', 'content': 'Hello'}]
    """
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    if isinstance(messages, ChatMessage | Mapping) or not isinstance(messages, Sequence):
        raise TypeError(
            f"messages must be a str or a list of {{'role', 'content'}} dicts, got {type(messages).__name__}"
        )
    out: list[dict[str, str]] = []
    for i, m in enumerate(messages):
        if isinstance(m, ChatMessage):
            out.append(m.to_dict())
            continue
        check_type(m, Mapping, f"messages[{i}] must be a dict with 'role' and 'content'")
        if "role" not in m or "content" not in m:
            raise ValueError(f"messages[{i}] needs both 'role' and 'content' keys, got keys {sorted(m)}")
        out.append(ChatMessage(str(m["role"]), m["content"]).to_dict())
    if not out:
        raise ValueError("messages is empty: give at least one user message")
    return out


class GenerationParams(TypedDict, total=False):
    """The keywords of every chat model's ``invoke`` / ``ainvoke`` / ``stream`` (None: the backend's default)."""

    temperature: float | None
    max_tokens: int | None
    stop: str | Sequence[str] | None


def check_params(
    temperature: float | None, max_tokens: int | None, stop: str | Sequence[str] | None
) -> tuple[float | None, int | None, list[str] | None]:
    """The generation parameters checked; ``stop`` may be one string or a list.

    >>> check_params(0, 16, "\\n")
    (0.0, 16, ['\\n'])
    """
    if temperature is not None:
        if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not 0 <= temperature <= 2:
            raise ValueError(f"temperature must be a number in [0, 2] or None, got {temperature!r}")
        temperature = float(temperature)
    if max_tokens is not None:
        check_positive_int(max_tokens, "max_tokens", hint=" or None")
    if stop is not None:
        stop = [stop] if isinstance(stop, str) else list(stop)
        if not all(isinstance(s, str) and s for s in stop):
            raise ValueError(f"stop must be a non-empty string or a list of them, got {stop!r}")
        stop = stop or None
    return temperature, max_tokens, stop


def check_context_window(value: int | None) -> int | None:
    """A context-window override: a positive int or None."""
    return None if value is None else check_positive_int(value, "context_window", hint=" or None")


def given_params(temperature: float | None, max_tokens: int | None, stop: list[str] | None) -> dict[str, Any]:
    """The parameters that are set, as keywords for a backend.

    >>> given_params(0.0, None, ["\\n"])
    {'temperature': 0.0, 'stop': ['\\n']}
    """
    return {k: v for k, v in zip(_PARAMS, (temperature, max_tokens, stop or None), strict=True) if v is not None}


def _prepare(messages: Messages, params: Mapping[str, Any]) -> tuple[Any, ...]:
    unknown = sorted(set(params) - GenerationParams.__optional_keys__)
    if unknown:
        raise TypeError(
            f"unexpected keyword argument(s) {unknown}: a chat model takes temperature, max_tokens and stop"
            " (invoke and ainvoke also reply_format)"
        )
    return to_messages(messages), *_checked(params)


def _checked(params: Mapping[str, Any]) -> tuple[float | None, int | None, list[str] | None]:
    return check_params(*map(params.get, _PARAMS))


@runtime_checkable
class ChatModel(Protocol):
    """Messages in, text out; sync and async (keywords: :class:`GenerationParams`)."""

    def invoke(self, messages: Messages, **params: Unpack[GenerationParams]) -> str: ...

    async def ainvoke(self, messages: Messages, **params: Unpack[GenerationParams]) -> str: ...


def check_chat_model(model: object) -> ChatModel:
    """``model`` if it is a :class:`ChatModel`, else a TypeError naming the conversion."""
    return check_type(
        model,
        ChatModel,
        "expected a ChatModel (invoke + ainvoke)",
        hint="; wrap LangChain or LlamaIndex models with fragrel_integrations.models.as_chat_model",
    )


def model_id(model: object) -> str:
    """A stable name for ``model`` (cache keys): ``model_name``/``model``/``model_id``, else its class.

    >>> from fragrel_integrations.testing import ScriptedChatModel
    >>> model_id(ScriptedChatModel(["x"]))
    'scripted'
    """
    for obj, attrs in (
        (model, ("model_name", "model", "model_id")),
        (getattr(model, "metadata", None), ("model_name",)),
    ):
        for attr in attrs:
            value = getattr(obj, attr, None)
            if isinstance(value, str) and value:
                return value
    return f"{type(model).__module__}.{type(model).__qualname__}"


def context_window(model: object, default: int | None = None) -> int | None:
    """The model's context window (attribute or LlamaIndex metadata), else ``default``."""
    for obj in (model, getattr(model, "metadata", None)):
        value = getattr(obj, "context_window", None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return default


def is_instance_of(obj: object, module: str, attr: str) -> bool:
    """``isinstance(obj, module.attr)`` without importing ``module`` unless it is already imported."""
    if module.split(".")[0] not in sys.modules:
        return False
    try:
        cls = getattr(__import__(module, fromlist=[attr]), attr, None)
    except ImportError:  # pragma: no cover - a half-installed framework
        return False
    return isinstance(cls, type) and isinstance(obj, cls)


class ChatModelBase(ABC):
    """Base of this package's chat models: inputs checked once, then ``_generate`` (``_agenerate``: in a thread)."""

    model_name: str = "chat-model"

    def invoke(
        self, messages: Messages, *, reply_format: ReplyFormat | None = None, **params: Unpack[GenerationParams]
    ) -> str:
        """The reply text; ``reply_format`` is enforced where ``supports_format`` says so, else ignored."""
        args = _prepare(messages, params)
        if _enforce(self, reply_format):
            return self._generate_format(*args, reply_format)
        return self._generate(*args)

    async def ainvoke(
        self, messages: Messages, *, reply_format: ReplyFormat | None = None, **params: Unpack[GenerationParams]
    ) -> str:
        """Async :meth:`invoke`."""
        args = _prepare(messages, params)
        if _enforce(self, reply_format):
            return await self._agenerate_format(*args, reply_format)
        return await self._agenerate(*args)

    def supports_format(self, reply_format: ReplyFormat) -> bool:
        """Whether this backend enforces ``reply_format``; the base class enforces none."""
        return False

    def _generate_format(self, messages, temperature, max_tokens, stop, reply_format) -> str:  # type: ignore[no-untyped-def]
        raise NotImplementedError(
            f"{type(self).__name__} supports {reply_format.kind} formats but has no _generate_format"
        )

    async def _agenerate_format(self, messages, temperature, max_tokens, stop, reply_format) -> str:  # type: ignore[no-untyped-def]
        return await asyncio.to_thread(self._generate_format, messages, temperature, max_tokens, stop, reply_format)

    def stream(self, messages: Messages, **params: Unpack[GenerationParams]) -> Iterator[str]:
        """The reply in pieces (one when the backend cannot stream); joined, what :meth:`invoke` returns."""
        return self._stream(*_prepare(messages, params))

    def astream(self, messages: Messages, **params: Unpack[GenerationParams]) -> AsyncIterator[str]:
        """Async :meth:`stream` (a blocking backend streams from a worker thread)."""
        return self._astream(*_prepare(messages, params))

    @abstractmethod
    def _generate(
        self, messages: list[dict[str, str]], temperature: float | None, max_tokens: int | None, stop: list[str] | None
    ) -> str: ...

    async def _agenerate(self, messages, temperature, max_tokens, stop) -> str:  # type: ignore[no-untyped-def]
        return await asyncio.to_thread(self._generate, messages, temperature, max_tokens, stop)

    def _stream(self, messages, temperature, max_tokens, stop) -> Iterator[str]:  # type: ignore[no-untyped-def]
        yield self._generate(messages, temperature, max_tokens, stop)

    async def _astream(self, messages, temperature, max_tokens, stop) -> AsyncIterator[str]:  # type: ignore[no-untyped-def]
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
    return model.supports_format(check_type(reply_format, ReplyFormat, "reply_format must be a ReplyFormat or None"))


async def aiter_in_thread(iterator: Iterator[Any], *, max_buffer: int = 256) -> AsyncIterator[Any]:
    """A blocking ``iterator`` run in a worker thread, its items (and errors) passed to async code; stopping early
    makes the worker stop and close the iterator."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
    stop = threading.Event()
    room = threading.Semaphore(max_buffer)  # back-pressure: the worker waits while the consumer lags

    def work() -> None:
        try:
            for item in iterator:
                while not room.acquire(timeout=0.1):
                    if stop.is_set():
                        return
                if stop.is_set():
                    return
                loop.call_soon_threadsafe(queue.put_nowait, ("item", item))
            loop.call_soon_threadsafe(queue.put_nowait, ("end", None))
        except BaseException as exc:  # handed to the consumer
            loop.call_soon_threadsafe(queue.put_nowait, ("error", exc))
        finally:
            close = getattr(iterator, "close", None)
            if callable(close):
                close()

    worker = loop.run_in_executor(None, work)
    try:
        while True:
            kind, value = await queue.get()
            if kind == "error":
                raise value
            if kind == "end":
                break
            room.release()
            yield value
    finally:
        stop.set()
        if not worker.done():  # let the worker close the iterator (and release the model) before returning
            await asyncio.shield(worker)


async def abatch(
    model: ChatModel,
    inputs: Sequence[Messages],
    *,
    max_concurrency: int = 4,
    timeout: float | None = None,
    return_exceptions: bool = False,
    **params: Unpack[GenerationParams],
) -> list[str | BaseException]:
    """``model.ainvoke`` on every input, ``max_concurrency`` at a time, in order; ``timeout`` bounds each call."""
    model = check_chat_model(model)
    sem = asyncio.Semaphore(check_positive_int(max_concurrency, "max_concurrency"))
    if timeout is not None and timeout <= 0:
        raise ValueError(f"timeout must be positive seconds or None, got {timeout!r}")
    prepared = [to_messages(x) for x in inputs]
    kw = dict(zip(_PARAMS, _checked(params), strict=True))

    async def one(msgs: list[dict[str, str]]) -> str:
        async with sem:
            return await asyncio.wait_for(model.ainvoke(msgs, **kw), timeout)

    return list(await asyncio.gather(*(one(m) for m in prepared), return_exceptions=return_exceptions))


def batch(
    model: ChatModel, inputs: Sequence[Messages], *, max_concurrency: int = 4, **params: Unpack[GenerationParams]
) -> list[str]:
    """``model.invoke`` on every input in a pool of ``max_concurrency`` threads (safe inside an event loop).

    >>> from fragrel_integrations.testing import ScriptedChatModel
    >>> batch(ScriptedChatModel(lambda m: str(len(m[-1]["content"]))), ["ab", "abc"])
    ['2', '3']
    """
    model = check_chat_model(model)
    n = check_positive_int(max_concurrency, "max_concurrency")
    prepared = [to_messages(x) for x in inputs]
    t, k, s = _checked(params)
    if not prepared:
        return []
    with ThreadPoolExecutor(max_workers=min(n, len(prepared)), thread_name_prefix="fragrel-chat") as pool:
        futures = [pool.submit(model.invoke, m, temperature=t, max_tokens=k, stop=s) for m in prepared]
        return [f.result() for f in futures]


def complete(model: ChatModel, prompt: str, *, system: str | None = None, **params: Unpack[GenerationParams]) -> str:
    """One user prompt (after an optional system prompt) -> the reply text, stripped."""
    check_type(prompt, str, "prompt must be str")
    msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    return check_chat_model(model).invoke(msgs, **params).strip()
