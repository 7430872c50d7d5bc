"""ChatModel for ANY OpenAI-compatible chat-completions server (OpenAI, llama.cpp's server, vLLM, Ollama's ``/v1``,
LM Studio, LiteLLM, ...) through the ``openai`` SDK: its parsed responses, streaming and retries (``max_retries``).

>>> model = OpenAIChatModel("smollm2", base_url="http://127.0.0.1:8000/v1")     # doctest: +SKIP
>>> model.invoke([{"role": "user", "content": "Say hi"}], max_tokens=8)         # doctest: +SKIP
'Hi!'

``base_url`` and ``api_key`` come from the arguments or from ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``; the key in
``OPENAI_API_KEY`` is sent only to OpenAI or to the server ``OPENAI_BASE_URL`` names (another server gets it only
as ``api_key=``; a local server with no key gets a placeholder). ``timeout`` is one deadline for the whole
request, retries and name lookup included: every request runs on the SDK's async client under
``asyncio.timeout`` (a blocking call on a private event loop thread), so a server that sends one byte at a time
cannot hold a caller past it, and connections are kept alive. Errors name the server and the fix.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import socket
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

from .._optional import require
from .chat import ChatModelBase, Messages, given_params, to_messages
from .structured import ReplyFormat
from .tokens import estimate_tokens
from .yes_no import yes_no_from_logprobs

__all__ = [
    "DEFAULT_URL",
    "PLACEHOLDER_KEY",
    "YES_NO_TOP_LOGPROBS",
    "OpenAIChatModel",
    "OpenAIServer",
    "resolve_endpoint",
]

logger = logging.getLogger(__name__)

DEFAULT_URL = "https://api.openai.com/v1"
PLACEHOLDER_KEY = "sk-no-key-required"
#: ``top_logprobs`` asked for a yes/no question (OpenAI allows at most 20).
YES_NO_TOP_LOGPROBS = 20
_KEY_FIX = (
    "pass api_key=... (CLI: --api-key / --embed-api-key); OPENAI_API_KEY is sent only to api.openai.com or to "
    "the server OPENAI_BASE_URL names"
)
_TOOL_FIX = "OpenAIChatModel sends no tools and reads text only: check the server's chat template or tool settings"


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    return scheme, (parts.hostname or "").lower(), port or {"http": 80, "https": 443}.get(scheme)


def resolve_endpoint(base_url: str | None, api_key: str | None) -> tuple[str, str]:
    """``(base_url, api_key)`` from the arguments, else the environment (see the module doc); ValueError when
    OpenAI itself would be called without a key.

    >>> resolve_endpoint("http://127.0.0.1:8080/v1/", "sk-local")
    ('http://127.0.0.1:8080/v1', 'sk-local')
    """
    env_url = os.environ.get("OPENAI_BASE_URL") or None
    base_url = base_url or env_url
    url = (base_url or DEFAULT_URL).rstrip("/")
    if not api_key:
        env_key = os.environ.get("OPENAI_API_KEY") or None
        owners = {_origin(DEFAULT_URL)} | ({_origin(env_url)} if env_url else set())
        api_key = env_key if env_key and _origin(url) in owners else None
    if not api_key:
        if base_url is None:
            raise ValueError(
                "no API key: pass api_key=... or set OPENAI_API_KEY; for a local server pass base_url=... "
                "(or set OPENAI_BASE_URL)"
            )
        api_key = PLACEHOLDER_KEY
    return url, api_key


def short_repr(value: Any, limit: int = 200) -> str:
    """``repr(value)`` cut to ``limit`` characters, for error messages."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_LOCK = threading.Lock()


def _background_loop() -> asyncio.AbstractEventLoop:
    """The event loop (in a daemon thread, started on first use) that runs the blocking calls' requests."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            _LOOP = asyncio.new_event_loop()
            threading.Thread(target=_LOOP.run_forever, name="fragrel-openai", daemon=True).start()
        return _LOOP


class OpenAIServer:
    """What the OpenAI-compatible chat model and embedder share: the server, the key, the SDK's async client
    (one per event loop), and requests under one total deadline with errors that name the server."""

    def __init__(
        self,
        base_url: str | None,
        api_key: str | None,
        timeout: float,
        max_retries: int,
        default_headers: dict[str, str] | None,
    ) -> None:
        self._openai = require("openai", "openai")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < float("inf"):
            raise ValueError(f"timeout must be positive seconds (--timeout in the CLI), got {timeout!r}")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries must be an int >= 0 (--max-retries in the CLI), got {max_retries!r}")
        self.base_url, key = resolve_endpoint(base_url, api_key)
        self.timeout, self.max_retries = float(timeout), max_retries
        self._kwargs = {"base_url": self.base_url, "api_key": key, "timeout": self.timeout,
                        "max_retries": max_retries, "default_headers": default_headers}  # fmt: skip
        self._clients: dict[asyncio.AbstractEventLoop, Any] = {}

    def _client(self) -> Any:
        loop = asyncio.get_running_loop()  # an httpx async client belongs to the loop it first ran on
        if loop not in self._clients:
            for old in [k for k in self._clients if k.is_closed()]:
                del self._clients[old]
            self._clients[loop] = self._openai.AsyncOpenAI(**self._kwargs)
        return self._clients[loop]

    def _sync(self, coro: Awaitable[Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, _background_loop()).result()  # type: ignore[arg-type]

    async def _request(self, make: Callable[[Any], Awaitable[Any]], end: float | None = None) -> Any:
        """``make(client)`` within the deadline ``end`` (a ``time.monotonic()`` value; default ``timeout`` from now),
        the SDK's retries included; failures as :meth:`_failure` words them."""
        end = time.monotonic() + self.timeout if end is None else end
        try:
            await self._resolve(end)  # its own timeout, so that a slow lookup is named as such
            async with asyncio.timeout(max(0.0, end - time.monotonic())):
                return await make(self._client())
        except Exception as exc:
            err = self._failure(exc, time.monotonic() >= end)
            if err is exc:
                raise
            raise err from exc

    async def _resolve(self, end: float) -> None:
        """The server's name looked up first, so that a slow lookup is reported as such (skipped for an IP
        address, ``localhost`` and behind a proxy)."""
        _, host, port = _origin(self.base_url)
        if not host or host == "localhost" or urllib.request.getproxies():
            return
        with contextlib.suppress(ValueError):
            ipaddress.ip_address(host)
            return
        try:
            async with asyncio.timeout(max(0.0, end - time.monotonic())):
                with contextlib.suppress(OSError, UnicodeError):
                    await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except TimeoutError:
            raise _Named(
                f"name resolution of {host!r} (the OpenAI-compatible server at {self.base_url}) timed out: no "
                f"answer within the request's {self.timeout:g}s; check the host name and your DNS, or raise "
                "timeout=... (--timeout in the CLI)"
            ) from None

    def _failure(self, exc: Exception, expired: bool) -> Exception:
        """``exc`` as the caller should see it: a TimeoutError once the deadline passed, ConnectionError for an
        unreachable server, an HTTP error status with a message naming the server (type kept)."""
        openai, url = self._openai, self.base_url
        if isinstance(exc, _Named):
            return TimeoutError(str(exc))
        if expired or isinstance(exc, openai.APITimeoutError):
            return TimeoutError(
                f"the OpenAI-compatible server at {url} did not answer within {self.timeout:g}s (retries included); "
                "raise timeout=... (--timeout in the CLI) or check the server"
            )
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc
            if "RemoteProtocolError" in type(cause).__name__ or "ReadError" in type(cause).__name__:
                return ConnectionError(
                    f"the OpenAI-compatible server at {url} broke off its reply: {cause}. Check the server "
                    "(a crash, or a proxy cutting the connection)"
                )
            return ConnectionError(
                f"cannot reach the OpenAI-compatible server at {url} (after up to {self.max_retries} retries): "
                f"{cause}. Is it running? Check base_url / --base-url / --embed-base-url / OPENAI_BASE_URL."
            )
        if isinstance(exc, openai.APIStatusError):
            code, said = exc.status_code, " ".join(str(exc.message or exc).split())
            where = f"the OpenAI-compatible server at {url} answered HTTP {code}"
            if code in (401, 403):
                text = f"{where} (the API key was refused: {said}); {_KEY_FIX}"
            elif code == 404:
                text = f"{where} ({said}); check the model name and base_url (usually ending in /v1)"
            elif code >= 500 or code in (408, 409, 429):
                text = f"{where} after up to {self.max_retries} retries ({said}); check the server's log or try again"
            else:
                text = f"{where}: the request was rejected ({said})"
            exc.args, exc.message = (text,), text
            return exc
        if isinstance(exc, ValueError) and not isinstance(exc, _Checked):  # the SDK could not decode the body
            return ValueError(f"the server at {url} sent a reply that is not JSON ({exc})")
        return exc

    def close(self) -> None:
        """Forget the clients (their connections close with them)."""
        self._clients.clear()


def _once(client: Any, probe: bool) -> Any:
    """``client`` without retries for a request that asks whether the server has a feature."""
    return client.with_options(max_retries=0) if probe else client


class _Named(Exception):
    """A timeout whose message is already written (a slow name lookup)."""


class _Checked(ValueError):
    """A reply that was read and found malformed (its message names the server)."""


class OpenAIChatModel(OpenAIServer, ChatModelBase):
    """A model served behind an OpenAI-compatible ``/chat/completions`` endpoint.

    ``model`` is the name the server knows. ``timeout`` is seconds per call, retries included; ``max_retries``
    the SDK's retries of transient errors; ``seed`` is sent with every request; ``context_window`` tells callers
    how many tokens the model takes (unknown = None); ``extra_body`` is merged into every request.
    ``response_format`` / ``logprobs``: whether the server takes ``response_format`` json_schema (constrained
    replies) and returns ``logprobs`` (yes/no probabilities); None asks once and remembers: a first request with
    the feature that fails is sent again without it, and the feature is not asked again.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        seed: int | None = None,
        context_window: int | None = None,
        extra_body: dict[str, Any] | None = None,
        default_headers: dict[str, str] | None = None,
        response_format: bool | None = None,
        logprobs: bool | None = None,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ValueError("model must be the model name the server serves, e.g. 'gpt-4o-mini' or 'smollm2'")
        if context_window is not None and (not isinstance(context_window, int) or context_window < 1):
            raise ValueError(f"context_window must be a positive int or None, got {context_window!r}")
        super().__init__(base_url, api_key, timeout, max_retries, default_headers)
        self.model_name = model
        self.seed = seed
        self.context_window = context_window
        self.extra_body = dict(extra_body or {})
        #: True once the server refused a ``response_format`` request (or ``response_format=False``); None: unknown.
        self.format_refused: bool | None = None if response_format is None else not response_format
        #: None: not known yet; True / False: the server does / does not return logprobs.
        self.logprobs_supported: bool | None = logprobs

    def count_tokens(self, text: str) -> int:
        """No tokenizer for a remote model offline: the word-based estimate."""
        return estimate_tokens(text)

    @property
    def _source(self) -> str:
        return f"the chat server at {self.base_url} (model {self.model_name!r})"

    def _req(self, messages: list[dict[str, str]], temperature: Any, max_tokens: Any, stop: Any) -> dict[str, Any]:
        req = {"model": self.model_name, "messages": messages, **given_params(temperature, max_tokens, stop)}
        if self.seed is not None:
            req["seed"] = self.seed
        if self.extra_body:
            req["extra_body"] = self.extra_body
        return req

    def _text(self, response: Any) -> str:
        """The reply text of a parsed completion, checked (a ValueError naming the server otherwise)."""
        source = self._source
        if not hasattr(response, "choices"):
            raise _Checked(f"{source} sent JSON that is not an object: {short_repr(response)}")
        if not isinstance(response.choices, list) or not response.choices:
            raise _Checked(f"{source} sent a reply without choices: {short_repr(response)}")
        message = response.choices[0].message
        if message is None:
            raise _Checked(f"{source} sent a choice without a message; check the server")
        content = message.content
        if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
            content = "".join(str(p.get("text", "")) for p in content)  # content parts
        if content is not None and not isinstance(content, str):
            raise _Checked(f"{source} sent content of type {type(content).__name__}, not text: {short_repr(content)}")
        if content:
            return content
        if message.tool_calls or message.function_call:
            calls = message.tool_calls or [message]
            names = ", ".join(str(getattr(getattr(c, "function", None) or c.function_call, "name", "?")) for c in calls)
            raise _Checked(f"{source} answered with a tool call ({names}) instead of text; {_TOOL_FIX}")
        if message.refusal:
            raise _Checked(f"{source} refused to answer: {short_repr(message.refusal)}")
        return ""

    async def _complete(self, req: dict[str, Any], probe: bool = False) -> str:
        return self._text(await self._request(lambda c: _once(c, probe).chat.completions.create(**req)))

    def _generate(self, messages, temperature, max_tokens, stop) -> str:  # type: ignore[no-untyped-def]
        return self._sync(self._agenerate(messages, temperature, max_tokens, stop))

    async def _agenerate(self, messages, temperature, max_tokens, stop) -> str:  # type: ignore[no-untyped-def]
        return await self._complete(self._req(messages, temperature, max_tokens, stop))

    # -- constrained replies ---------------------------------------------------------------------------------------
    def supports_format(self, reply_format: ReplyFormat) -> bool:
        """Choice, regex and JSON formats go out as ``response_format`` json_schema; GBNF grammars are not sent.
        False once this server refused it."""
        return not self.format_refused and reply_format.response_schema() is not None

    def _generate_format(self, messages, temperature, max_tokens, stop, reply_format) -> str:  # type: ignore[no-untyped-def]
        return self._sync(self._agenerate_format(messages, temperature, max_tokens, stop, reply_format))

    async def _agenerate_format(self, messages, temperature, max_tokens, stop, reply_format) -> str:  # type: ignore[no-untyped-def]
        req = self._req(messages, temperature, max_tokens, stop)
        spec = {"name": reply_format.name, "schema": reply_format.response_schema(), "strict": True}
        fmt = {"type": "json_schema", "json_schema": spec}
        try:
            text = await self._complete({**req, "response_format": fmt}, probe=self.format_refused is None)
            self.format_refused = False
            return reply_format.unwrap(text)
        except self._openai.APIStatusError as exc:
            text = await self._complete(req)  # asked once: the same request without the format
            self.format_refused = True
            logger.warning("%s refused response_format json_schema (%s); sending plain requests", self._source, exc)
            return text

    # -- streaming ---------------------------------------------------------------------------------------------------
    def _stream(self, messages, temperature, max_tokens, stop) -> Iterator[str]:  # type: ignore[no-untyped-def]
        """The SDK's stream read on the private loop: a blocking iterator of text deltas."""
        pieces = self._astream(messages, temperature, max_tokens, stop)
        try:
            while True:
                try:
                    yield self._sync(pieces.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            self._sync(pieces.aclose())

    async def _astream(self, messages, temperature, max_tokens, stop) -> AsyncIterator[str]:  # type: ignore[no-untyped-def]
        req = {**self._req(messages, temperature, max_tokens, stop), "stream": True}
        end = time.monotonic() + self.timeout  # the whole stream, not only its first bytes
        stream = await self._request(lambda c: c.chat.completions.create(**req), end)
        finished = False
        async with stream:
            chunks = stream.__aiter__()
            while True:
                try:
                    async with asyncio.timeout(max(0.0, end - time.monotonic())):
                        chunk = await chunks.__anext__()
                except StopAsyncIteration:
                    break
                except Exception as exc:
                    err = self._failure(exc, time.monotonic() >= end)
                    if type(exc).__module__.split(".")[0] in ("httpx", "httpcore") and err is exc:
                        err = ConnectionError(f"{self._source} broke off its streamed reply: {exc}; check the server")
                    raise err from exc
                piece, done = self._delta(chunk)
                finished = finished or done
                if piece:
                    yield piece
        if not finished:
            raise _Checked(
                f"{self._source} ended its stream before the reply was finished (no finish_reason): the "
                "connection was cut or the server failed; check the server"
            )

    def _delta(self, chunk: Any) -> tuple[str, bool]:
        """``(text, finished)`` of one streamed chunk; ValueError naming the server for a malformed one."""
        choices = getattr(chunk, "choices", None)
        if not isinstance(choices, list):
            raise _Checked(f"{self._source} sent a stream chunk without choices: {short_repr(chunk)}")
        if not choices:  # e.g. a final usage-only chunk
            return "", False
        delta = choices[0].delta
        content = getattr(delta, "content", None)
        if content is not None and not isinstance(content, str):
            raise _Checked(f"{self._source} streamed content of type {type(content).__name__}, not text")
        if not content and getattr(delta, "tool_calls", None):
            raise _Checked(f"{self._source} streamed a tool call instead of text; {_TOOL_FIX}")
        return content or "", choices[0].finish_reason is not None

    # -- yes/no by probability -----------------------------------------------------------------------------------
    def yes_no_probability(self, messages: Messages) -> float | None:
        """``P(yes) / (P(yes) + P(no))`` of the reply's first token, from ``logprobs``/``top_logprobs`` of a
        one-token completion; None (the caller parses a text reply) when the server gives none: a server whose
        first such request fails or returns no logprobs is not asked again."""
        return self._sync(self.ayes_no_probability(messages))

    async def ayes_no_probability(self, messages: Messages) -> float | None:
        """Async :meth:`yes_no_probability`."""
        if self.logprobs_supported is False:
            return None
        req = {**self._req(to_messages(messages), 0.0, 1, None), "logprobs": True, "top_logprobs": YES_NO_TOP_LOGPROBS}
        try:
            probe = self.logprobs_supported is None  # asked once, with no retries
            response = await self._request(lambda c: _once(c, probe).chat.completions.create(**req))
        except self._openai.APIStatusError as exc:
            if self.logprobs_supported:
                raise
            return self._no_logprobs(f"the server refused logprobs: {exc}")
        choices = getattr(response, "choices", None)
        content = getattr(getattr(choices[0], "logprobs", None), "content", None) if choices else None
        if not content:
            return self._no_logprobs("the server returned no logprobs")
        try:
            first = content[0]
            pairs = {t.token: t.logprob for t in (first.top_logprobs or [])}
            pairs.setdefault(first.token, first.logprob)  # the sampled token, when the top list lacks it
            p = yes_no_from_logprobs(pairs.items())
        except (AttributeError, TypeError, ValueError) as exc:
            return self._no_logprobs(f"the server returned malformed logprobs ({exc})")
        self.logprobs_supported = True
        return p

    def _no_logprobs(self, why: str) -> None:
        if self.logprobs_supported is not False:
            logger.warning("%s: yes/no questions fall back to parsing the reply text (%s)", self._source, why)
        self.logprobs_supported = False

    def __repr__(self) -> str:
        return f"OpenAIChatModel(model={self.model_name!r}, base_url={self.base_url!r})"
