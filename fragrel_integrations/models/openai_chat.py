"""ChatModel for any OpenAI-compatible chat-completions server on the ``openai`` SDK. ``OPENAI_API_KEY`` goes only
to OpenAI or to the server ``OPENAI_BASE_URL`` names; ``timeout`` is one deadline per call, retries and name lookup
included (blocking calls run on one background event loop); errors name the server and the fix."""

import asyncio
import contextlib
import ipaddress
import logging
import os
import socket
import threading
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, ClassVar

from .._optional import require
from .._validation import check_min_int
from .chat import ChatModelBase, Messages, check_context_window, given_params, to_messages
from .structured import ReplyFormat
from .yes_no import LogprobsYesNo

__all__ = ["DEFAULT_URL", "PLACEHOLDER_KEY", "OpenAIChatModel", "OpenAIServer", "resolve_endpoint"]

logger = logging.getLogger(__name__)

DEFAULT_URL = "https://api.openai.com/v1"
PLACEHOLDER_KEY = "sk-no-key-required"
_TIMEOUT_FIX = "raise timeout=... (--timeout in the CLI)"
_TOOL_FIX = "OpenAIChatModel sends no tools and reads text only: check the server's chat template or tool settings"


def _origin(url: str) -> tuple[str, str, int | None]:
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    except ValueError as exc:
        raise ValueError(f"{url!r} is not a URL ({exc}); check base_url / OPENAI_BASE_URL") from None
    return parts.scheme.lower(), (parts.hostname or "").lower(), port


def resolve_endpoint(base_url: str | None, api_key: str | None) -> tuple[str, str]:
    """``(base_url, api_key)`` from the arguments, else the environment; ValueError when OpenAI would get no key.

    >>> resolve_endpoint("http://127.0.0.1:8080/v1/", "sk-local")
    ('http://127.0.0.1:8080/v1', 'sk-local')
    """
    env_url = os.environ.get("OPENAI_BASE_URL") or None
    base_url = base_url or env_url
    url = (base_url or DEFAULT_URL).rstrip("/")
    if not api_key and _origin(url) in {_origin(u) for u in (DEFAULT_URL, env_url) if u}:
        api_key = os.environ.get("OPENAI_API_KEY")
    if not api_key and base_url is None:
        raise ValueError(
            "no API key: pass api_key=... or set OPENAI_API_KEY; for a local server pass base_url=... "
            "(or set OPENAI_BASE_URL)"
        )
    return url, api_key or PLACEHOLDER_KEY


def short_repr(value: Any, limit: int = 200) -> str:
    """``repr(value)`` cut to ``limit`` characters, for error messages."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


class OpenAIServer:
    """The server, its async clients (one per event loop) and requests under one deadline, errors naming it."""

    _loop: ClassVar[asyncio.AbstractEventLoop | None] = None  # runs the blocking calls, in a daemon thread
    _loop_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, base_url: str | None, api_key: str | None, timeout: float, retries: int, headers: Any) -> None:
        self._openai = require("openai", "openai")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < float("inf"):
            raise ValueError(f"timeout must be positive seconds (--timeout in the CLI), got {timeout!r}")
        self.max_retries = check_min_int(retries, "max_retries", 0, hint=" (--max-retries in the CLI)")
        self.base_url, key = resolve_endpoint(base_url, api_key)
        _, self._host, self._port = _origin(self.base_url)
        self.timeout = float(timeout)
        self._kwargs = {"base_url": self.base_url, "api_key": key, "timeout": self.timeout,
                        "max_retries": retries, "default_headers": headers}  # fmt: skip
        self._clients: dict[asyncio.AbstractEventLoop, Any] = {}

    def _client(self, probe: bool = False) -> Any:
        """The running loop's client; without retries for a ``probe``."""
        loop = asyncio.get_running_loop()
        if loop not in self._clients:
            for old in [k for k in self._clients if k.is_closed()]:
                del self._clients[old]
            self._clients[loop] = self._openai.AsyncOpenAI(**self._kwargs)
        return self._clients[loop].with_options(max_retries=0) if probe else self._clients[loop]

    def _sync(self, coro: Awaitable[Any]) -> Any:
        """``coro`` run on the background event loop, waited for."""
        with OpenAIServer._loop_lock:
            if OpenAIServer._loop is None:
                OpenAIServer._loop = asyncio.new_event_loop()
                threading.Thread(target=OpenAIServer._loop.run_forever, name="fragrel-openai", daemon=True).start()
        return asyncio.run_coroutine_threadsafe(coro, OpenAIServer._loop).result()  # type: ignore[arg-type]

    async def _request(self, make: Callable[[], Awaitable[Any]], end: float | None = None, lookup: bool = True) -> Any:
        """``await make()`` before the loop time ``end`` (default: ``timeout`` from now)."""
        end = asyncio.get_running_loop().time() + self.timeout if end is None else end
        if lookup:
            await self._resolve(end)
        try:
            async with asyncio.timeout_at(end):
                return await make()
        except Exception as exc:
            self._fail(exc, end)
            raise

    async def _resolve(self, end: float) -> None:
        """The name lookup on its own, so that a slow one is named."""
        if self._host in ("", "localhost") or urllib.request.getproxies():
            return
        with contextlib.suppress(ValueError):
            ipaddress.ip_address(self._host)
            return
        try:
            async with asyncio.timeout_at(end):
                with contextlib.suppress(OSError, UnicodeError):
                    await asyncio.get_running_loop().getaddrinfo(self._host, self._port, type=socket.SOCK_STREAM)
        except TimeoutError:
            raise TimeoutError(
                f"name resolution of {self._host!r} (the OpenAI-compatible server at {self.base_url}) timed out: no "
                f"answer within the request's {self.timeout:g}s; check the host name and your DNS, or {_TIMEOUT_FIX}"
            ) from None

    def _fail(self, exc: Exception, end: float) -> None:
        """Raise ``exc`` naming the server and the fix (HTTP errors keep their type)."""
        openai, where = self._openai, f"the OpenAI-compatible server at {self.base_url}"
        cause = (exc.__cause__ or exc) if isinstance(exc, openai.APIConnectionError) else exc
        if isinstance(exc, TimeoutError | openai.APITimeoutError) or asyncio.get_running_loop().time() >= end:
            raise TimeoutError(
                f"{where} did not answer within {self.timeout:g}s (retries included); check it or {_TIMEOUT_FIX}"
            ) from exc
        raw = type(exc).__module__.startswith(("httpx", "httpcore"))
        if raw or type(cause).__name__ in ("RemoteProtocolError", "ReadError"):
            raise ConnectionError(
                f"{where} broke off its reply: {cause}. Check the server (a crash, or a proxy cutting the connection)"
            ) from exc
        if isinstance(exc, openai.APIConnectionError):
            raise ConnectionError(
                f"cannot reach {where} (after up to {self.max_retries} retries): {cause}. Is it running? Check "
                "base_url / --base-url / --embed-base-url / OPENAI_BASE_URL."
            ) from exc
        if isinstance(exc, ValueError):
            raise ValueError(f"the server at {self.base_url} sent a reply that is not JSON ({exc})") from exc
        if isinstance(exc, openai.APIStatusError):
            code, said = exc.status_code, " ".join(str(exc.message or exc).split())
            if code in (401, 403):
                said = (
                    f" (the API key was refused: {said}); pass api_key=... (CLI: --api-key / --embed-api-key); "
                    "OPENAI_API_KEY is sent only to api.openai.com or to the server OPENAI_BASE_URL names"
                )
            elif code == 404:
                said = f" ({said}); check the model name and base_url (usually ending in /v1)"
            elif code >= 500 or code in (408, 409, 429):
                said = f" after up to {self.max_retries} retries ({said}); check the server's log or try again"
            else:
                said = f": the request was rejected ({said})"
            exc.message = f"{where} answered HTTP {code}{said}"
            exc.args = (exc.message,)

    def close(self) -> None:
        """Forget the clients."""
        self._clients.clear()


class OpenAIChatModel(OpenAIServer, LogprobsYesNo, ChatModelBase):
    """A model behind an OpenAI-compatible ``/chat/completions`` endpoint. ``response_format`` / ``logprobs``: whether
    the server takes them; None asks once (a failed first request goes again without)."""

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
        self.context_window = check_context_window(context_window)
        super().__init__(base_url, api_key, timeout, max_retries, default_headers)
        self.model_name = model
        self.seed = seed
        self.extra_body = dict(extra_body or {})
        self.format_refused: bool | None = None if response_format is None else not response_format
        self.logprobs_supported: bool | None = logprobs
        self._source = f"the chat server at {self.base_url} (model {model!r})"

    async def _create(self, messages, temperature, max_tokens, stop, probe=False, **extra) -> Any:  # type: ignore[no-untyped-def]
        """A completion; a ``probe`` goes without retries."""
        req = {"model": self.model_name, "messages": messages, **given_params(temperature, max_tokens, stop), **extra}
        if self.seed is not None:
            req["seed"] = self.seed
        client = self._client(probe)
        return await self._request(lambda: client.chat.completions.create(**req, extra_body=self.extra_body))

    def _text(self, response: Any) -> str:
        """The reply text; ValueError naming the server for a malformed one."""
        if not hasattr(response, "choices"):
            raise ValueError(f"{self._source} sent JSON that is not an object: {short_repr(response)}")
        if not isinstance(response.choices, list) or not response.choices:
            raise ValueError(f"{self._source} sent a reply without choices: {short_repr(response)}")
        message = response.choices[0].message
        if message is None:
            raise ValueError(f"{self._source} sent a choice without a message; check the server")
        content = message.content
        if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
            content = "".join(str(p.get("text", "")) for p in content)
        if content is not None and not isinstance(content, str):
            raise ValueError(f"{self._source} sent content of type {type(content).__name__}: {short_repr(content)}")
        if not content and (message.tool_calls or message.function_call):
            calls = [getattr(c, "function", None) for c in message.tool_calls or []] or [message.function_call]
            names = ", ".join(str(getattr(c, "name", "?")) for c in calls)
            raise ValueError(f"{self._source} answered with a tool call ({names}) instead of text; {_TOOL_FIX}")
        if not content and message.refusal:
            raise ValueError(f"{self._source} refused to answer: {short_repr(message.refusal)}")
        return content or ""

    def _generate(self, messages, temperature, max_tokens, stop) -> str:  # type: ignore[no-untyped-def]
        return self._sync(self._agenerate(messages, temperature, max_tokens, stop))

    async def _agenerate(self, messages, temperature, max_tokens, stop) -> str:  # type: ignore[no-untyped-def]
        return self._text(await self._create(messages, temperature, max_tokens, stop))

    def supports_format(self, reply_format: ReplyFormat) -> bool:
        """Formats go as ``response_format`` json_schema, unless this server refused it."""
        return not self.format_refused and reply_format.response_schema() is not None

    def _generate_format(self, messages, temperature, max_tokens, stop, reply_format) -> str:  # type: ignore[no-untyped-def]
        return self._sync(self._agenerate_format(messages, temperature, max_tokens, stop, reply_format))

    async def _agenerate_format(self, messages, temperature, max_tokens, stop, reply_format) -> str:  # type: ignore[no-untyped-def]
        spec = {"name": reply_format.name, "schema": reply_format.response_schema(), "strict": True}
        fmt = {"type": "json_schema", "json_schema": spec}
        probe = self.format_refused is None
        try:
            text = self._text(await self._create(messages, temperature, max_tokens, stop, probe, response_format=fmt))
        except self._openai.APIStatusError as exc:
            text = await self._agenerate(messages, temperature, max_tokens, stop)  # the same request, no format
            self.format_refused = True
            logger.warning("%s refused response_format json_schema (%s); sending plain requests", self._source, exc)
            return text
        self.format_refused = False
        return reply_format.unwrap(text)

    def _stream(self, messages, temperature, max_tokens, stop) -> Iterator[str]:  # type: ignore[no-untyped-def]
        pieces = self._astream(messages, temperature, max_tokens, stop)
        try:
            with contextlib.suppress(StopAsyncIteration):
                while True:
                    yield self._sync(anext(pieces))
        finally:
            self._sync(pieces.aclose())

    async def _astream(self, messages, temperature, max_tokens, stop) -> AsyncIterator[str]:  # type: ignore[no-untyped-def]
        end = asyncio.get_running_loop().time() + self.timeout  # for the whole stream
        finished = False
        async with await self._create(messages, temperature, max_tokens, stop, stream=True) as stream:
            chunks = aiter(stream)
            while (chunk := await self._request(lambda: anext(chunks, None), end, lookup=False)) is not None:
                choices = getattr(chunk, "choices", None)
                if not isinstance(choices, list):
                    raise ValueError(f"{self._source} sent a stream chunk without choices: {short_repr(chunk)}")
                if not choices:  # e.g. a final usage-only chunk
                    continue
                content = getattr(choices[0].delta, "content", None)
                if content is not None and not isinstance(content, str):
                    raise ValueError(f"{self._source} streamed content of type {type(content).__name__}, not text")
                if not content and getattr(choices[0].delta, "tool_calls", None):
                    raise ValueError(f"{self._source} streamed a tool call instead of text; {_TOOL_FIX}")
                finished = finished or choices[0].finish_reason is not None
                if content:
                    yield content
        if not finished:
            raise ValueError(
                f"{self._source} ended its stream before the reply was finished (no finish_reason): the connection "
                "was cut or the server failed; check the server"
            )

    def _asks_logprobs(self) -> bool:
        return True

    def _logprobs_reply(self, messages: Messages) -> Any:
        return self._sync(self._alogprobs_reply(messages))

    async def _alogprobs_reply(self, messages: Messages) -> Any:
        probe = self.logprobs_supported is None
        return await self._create(to_messages(messages), 0.0, 1, None, probe, logprobs=True, top_logprobs=20)

    def _first_token_logprobs(self, reply: Any) -> list[tuple[str, float]] | None:
        """The first token's ``top_logprobs`` and the sampled token; None when missing."""
        try:
            first = reply.choices[0].logprobs.content[0]
            pairs = {str(t.token): float(t.logprob) for t in first.top_logprobs or []}
            pairs.setdefault(str(first.token), float(first.logprob))
        except (AttributeError, LookupError, TypeError, ValueError):
            return None
        return list(pairs.items())

    def __repr__(self) -> str:
        return f"OpenAIChatModel(model={self.model_name!r}, base_url={self.base_url!r})"
