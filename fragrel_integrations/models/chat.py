"""The ChatModel protocol the core calls (messages -> text, sync and async) and the helpers every backend shares.

A chat model is any object with

* ``invoke(messages, *, temperature=None, max_tokens=None, stop=None) -> str`` and
* ``async ainvoke(messages, *, temperature=None, max_tokens=None, stop=None) -> str``.

``messages`` is a list of ``{"role": "system" | "user" | "assistant", "content": str}`` dicts (or
:class:`ChatMessage` objects, or a single string meaning one user message). ``None`` for a parameter means
"the backend's default". Adapters for the embedded model, OpenAI-compatible servers, LangChain and LlamaIndex
models live next to this module; :func:`~fragrel_integrations.models.convert.as_chat_model` picks the right one
(this module knows none of them). No framework is imported here.

Optionally a model also has ``supports_format(reply_format) -> bool`` and then takes ``reply_format=...`` in
``invoke``/``ainvoke`` to constrain its reply (a choice of labels, a regex, a GBNF grammar or a JSON schema; see
:mod:`fragrel_integrations.models.structured`). Steps pass it only to models that declare support
(:func:`~fragrel_integrations.models.structured.format_kwargs`) and always parse the reply, with a lenient
parser as the fallback, so a model without the method works as before.

>>> from fragrel_integrations.testing import ScriptedChatModel
>>> model = ScriptedChatModel(["Paris."])
>>> complete(model, "Capital of France?", system="Answer briefly.", max_tokens=8)
'Paris.'
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Collection, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict, Unpack, runtime_checkable

from .._validation import check_positive_int
from .structured import ReplyFormat

__all__ = [
    "ROLES",
    "ChatMessage",
    "ChatModel",
    "ChatModelBase",
    "GenerationParams",
    "Messages",
    "ToolCall",
    "ToolReply",
    "abatch",
    "aiter_in_thread",
    "batch",
    "check_params",
    "complete",
    "context_window",
    "format_tool_call",
    "given_params",
    "model_id",
    "to_messages",
    "tool_turn",
]

logger = logging.getLogger(__name__)

ROLES = frozenset({"system", "user", "assistant"})


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One chat turn. Plain ``{"role": ..., "content": ...}`` dicts work everywhere this does.

    >>> ChatMessage("user", "Hi").to_dict()
    {'role': 'user', 'content': 'Hi'}
    """

    role: str
    content: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {sorted(ROLES)}, got {self.role!r}")
        if not isinstance(self.content, str):
            raise TypeError(f"message content must be str, got {type(self.content).__name__}")

    def to_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


Messages = str | Sequence[Mapping[str, str] | ChatMessage]


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


def to_messages(messages: Messages) -> list[dict[str, str]]:
    """Normalise ``messages`` to a new list of ``{"role", "content"}`` dicts, validating roles and contents.

    >>> to_messages("Hello")
    [{'role': 'user', 'content': 'Hello'}]
    >>> to_messages([ChatMessage("system", "Be brief."), {"role": "user", "content": "Hi"}])[0]["role"]
    'system'
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
        if not isinstance(m, Mapping):
            raise TypeError(f"messages[{i}] must be a dict with 'role' and 'content', got {type(m).__name__}")
        if "role" not in m or "content" not in m:
            raise ValueError(f"messages[{i}] needs both 'role' and 'content' keys, got keys {sorted(m)}")
        out.append(ChatMessage(str(m["role"]), m["content"]).to_dict())
    if not out:
        raise ValueError("messages is empty: give at least one user message")
    return out


def check_params(
    temperature: float | None, max_tokens: int | None, stop: str | Sequence[str] | None
) -> tuple[float | None, int | None, list[str] | None]:
    """Validate the shared generation parameters; ``stop`` may be one string or a list.

    >>> check_params(0, 16, "\\n")
    (0.0, 16, ['\\n'])
    """
    if temperature is not None:
        if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not 0 <= temperature <= 2:
            raise ValueError(f"temperature must be a number in [0, 2] or None, got {temperature!r}")
        temperature = float(temperature)
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise ValueError(f"max_tokens must be a positive int or None, got {max_tokens!r}")
    if stop is not None:
        stop = [stop] if isinstance(stop, str) else list(stop)
        if not all(isinstance(s, str) and s for s in stop):
            raise ValueError(f"stop must be a non-empty string or a list of them, got {stop!r}")
        stop = stop or None
    return temperature, max_tokens, stop


def given_params(temperature: float | None, max_tokens: int | None, stop: list[str] | None) -> dict[str, Any]:
    """The generation parameters that are set, as keywords for a backend (None and an empty ``stop`` left out).

    >>> given_params(0.0, None, ["\\n"])
    {'temperature': 0.0, 'stop': ['\\n']}
    """
    params: dict[str, Any] = {}
    if temperature is not None:
        params["temperature"] = temperature
    if max_tokens is not None:
        params["max_tokens"] = max_tokens
    if stop:
        params["stop"] = stop
    return params


class GenerationParams(TypedDict, total=False):
    """The keywords of every chat model's ``invoke`` / ``ainvoke`` / ``stream`` (None: the backend's default)."""

    temperature: float | None
    max_tokens: int | None
    stop: str | Sequence[str] | None


def _prepare(
    messages: Messages, params: Mapping[str, Any]
) -> tuple[list[dict[str, str]], float | None, int | None, list[str] | None]:
    """``messages`` normalised and ``params`` checked: the arguments of ``_generate`` and its siblings."""
    unknown = sorted(set(params) - GenerationParams.__optional_keys__)
    if unknown:
        raise TypeError(
            f"unexpected keyword argument(s) {unknown}: a chat model takes temperature, max_tokens and stop"
            " (invoke and ainvoke also reply_format)"
        )
    return (
        to_messages(messages),
        *check_params(params.get("temperature"), params.get("max_tokens"), params.get("stop")),
    )


@runtime_checkable
class ChatModel(Protocol):
    """Messages in, text out; sync and async. See the module docstring for the contract; the keywords are
    :class:`GenerationParams` (an implementation spells them out: ``*, temperature=None, max_tokens=None,
    stop=None``)."""

    def invoke(self, messages: Messages, **params: Unpack[GenerationParams]) -> str: ...

    async def ainvoke(self, messages: Messages, **params: Unpack[GenerationParams]) -> str: ...


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
        msgs, t, n, s = _prepare(messages, params)
        if _enforce(self, reply_format):
            return self._generate_format(msgs, t, n, s, reply_format)  # type: ignore[arg-type]
        return self._generate(msgs, t, n, s)

    async def ainvoke(
        self, messages: Messages, *, reply_format: ReplyFormat | None = None, **params: Unpack[GenerationParams]
    ) -> str:
        """Async :meth:`invoke`."""
        msgs, t, n, s = _prepare(messages, params)
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
        return self._stream(*_prepare(messages, params))

    def astream(self, messages: Messages, **params: Unpack[GenerationParams]) -> AsyncIterator[str]:
        """Async :meth:`stream` (a blocking backend streams from a worker thread; the event loop stays free)."""
        return self._astream(*_prepare(messages, params))

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


async def aiter_in_thread(iterator: Iterator[Any], *, max_buffer: int = 256) -> AsyncIterator[Any]:
    """Iterate a blocking ``iterator`` in a worker thread and yield its items to async code as they come.

    Exceptions raised by the iterator are raised here. If the consumer stops early (``break``, cancellation),
    the worker stops before its next item and closes the iterator (so a model stops generating).
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
    stop = threading.Event()
    room = threading.Semaphore(max_buffer)  # back-pressure: the worker waits while the consumer lags

    def put(kind: str, value: Any) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, (kind, value))

    def work() -> None:
        try:
            for item in iterator:
                while not room.acquire(timeout=0.1):
                    if stop.is_set():
                        return
                if stop.is_set():
                    return
                put("item", item)
            put("end", None)
        except BaseException as exc:  # handed to the consumer
            put("error", exc)
        finally:
            close = getattr(iterator, "close", None)
            if callable(close):
                close()

    worker = loop.run_in_executor(None, work)
    try:
        while True:
            kind, value = await queue.get()
            if kind == "item":
                room.release()
                yield value
            elif kind == "error":
                raise value
            else:
                break
    finally:
        stop.set()
        if not worker.done():  # let the worker close the iterator (and release the model) before returning
            await asyncio.shield(worker)


def _check_chat_model(model: object) -> ChatModel:
    if not isinstance(model, ChatModel):
        raise TypeError(
            f"expected a ChatModel (invoke + ainvoke), got {type(model).__name__}; "
            "wrap LangChain or LlamaIndex models with fragrel_integrations.models.as_chat_model"
        )
    return model


def _check_concurrency(max_concurrency: int) -> int:
    return check_positive_int(max_concurrency, "max_concurrency")


async def abatch(
    model: ChatModel,
    inputs: Sequence[Messages],
    *,
    max_concurrency: int = 4,
    timeout: float | None = None,
    return_exceptions: bool = False,
    temperature: float | None = None,
    max_tokens: int | None = None,
    stop: str | Sequence[str] | None = None,
) -> list[str | BaseException]:
    """Run ``model.ainvoke`` on every input concurrently, at most ``max_concurrency`` at a time, in input order.

    ``timeout`` (seconds) bounds each call (``TimeoutError``). With ``return_exceptions=True`` a failed call puts
    its exception in the result list instead of cancelling the rest.

    In async code (a server, a notebook cell with top-level ``await``):

    >>> import asyncio
    >>> from fragrel_integrations.testing import ScriptedChatModel
    >>> async def main():
    ...     return await abatch(ScriptedChatModel(lambda m: m[-1]["content"].upper()), ["a", "b"], max_concurrency=2)
    >>> loop = asyncio.new_event_loop(); loop.run_until_complete(main())
    ['A', 'B']
    >>> loop.close()
    """
    model = _check_chat_model(model)
    sem = asyncio.Semaphore(_check_concurrency(max_concurrency))
    if timeout is not None and timeout <= 0:
        raise ValueError(f"timeout must be positive seconds or None, got {timeout!r}")
    prepared = [to_messages(x) for x in inputs]
    params = dict(zip(("temperature", "max_tokens", "stop"), check_params(temperature, max_tokens, stop), strict=True))

    async def one(msgs: list[dict[str, str]]) -> str:
        async with sem:
            coro = model.ainvoke(msgs, **params)
            return await (asyncio.wait_for(coro, timeout) if timeout is not None else coro)

    return list(await asyncio.gather(*(one(m) for m in prepared), return_exceptions=return_exceptions))


def batch(
    model: ChatModel,
    inputs: Sequence[Messages],
    *,
    max_concurrency: int = 4,
    temperature: float | None = None,
    max_tokens: int | None = None,
    stop: str | Sequence[str] | None = None,
) -> list[str]:
    """Synchronous counterpart of :func:`abatch`: ``model.invoke`` in a pool of ``max_concurrency`` threads.

    Safe to call from code that is itself running inside an event loop (no ``asyncio.run``).

    >>> from fragrel_integrations.testing import ScriptedChatModel
    >>> batch(ScriptedChatModel(lambda m: str(len(m[-1]["content"]))), ["ab", "abc"])
    ['2', '3']
    """
    model = _check_chat_model(model)
    n = _check_concurrency(max_concurrency)
    prepared = [to_messages(x) for x in inputs]
    t, k, s = check_params(temperature, max_tokens, stop)
    if not prepared:
        return []
    with ThreadPoolExecutor(max_workers=min(n, len(prepared)), thread_name_prefix="fragrel-chat") as pool:
        futures = [pool.submit(model.invoke, m, temperature=t, max_tokens=k, stop=s) for m in prepared]
        return [f.result() for f in futures]


def complete(
    model: ChatModel,
    prompt: str,
    *,
    system: str | None = None,
    temperature: float | None = None,
    max_tokens: int | None = None,
    stop: str | Sequence[str] | None = None,
) -> str:
    """One user prompt (after an optional system prompt) -> the reply text, stripped."""
    if not isinstance(prompt, str):
        raise TypeError(f"prompt must be str, got {type(prompt).__name__}")
    msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    return _check_chat_model(model).invoke(msgs, temperature=temperature, max_tokens=max_tokens, stop=stop).strip()


def model_id(model: object) -> str:
    """A stable name for ``model`` (used in cache keys): its ``model_name``/``model`` attribute, else its class.

    >>> from fragrel_integrations.testing import ScriptedChatModel
    >>> model_id(ScriptedChatModel(["x"]))
    'scripted'
    """
    for attr in ("model_name", "model", "model_id"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    metadata = getattr(model, "metadata", None)  # LlamaIndex LLMs
    value = getattr(metadata, "model_name", None)
    if isinstance(value, str) and value:
        return value
    return f"{type(model).__module__}.{type(model).__qualname__}"


def context_window(model: object, default: int | None = None) -> int | None:
    """The model's context window in tokens if it says (``context_window`` attribute or LlamaIndex metadata)."""
    for obj in (model, getattr(model, "metadata", None)):
        value = getattr(obj, "context_window", None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return default


def _is_instance_of(obj: object, module: str, attr: str) -> bool:
    """``isinstance(obj, module.attr)`` without importing ``module`` unless it is already imported."""
    if module.split(".")[0] not in sys.modules:
        return False
    try:
        mod = __import__(module, fromlist=[attr])
    except ImportError:  # pragma: no cover - a half-installed framework
        return False
    cls = getattr(mod, attr, None)
    return isinstance(cls, type) and isinstance(obj, cls)
