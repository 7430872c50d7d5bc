"""What the OpenAI-compatible chat model and embedder share: where the server is, which key to send, one total
deadline per request, replies read as JSON and checked, and error messages that name the server and the fix.

``base_url`` and ``api_key`` come from the arguments or from ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``. The key
in ``OPENAI_API_KEY`` is sent only to the server it belongs to: OpenAI (``https://api.openai.com``) or the server
``OPENAI_BASE_URL`` names beside it; any other server (a ``base_url`` argument, ``--base-url``,
``--embed-base-url``) gets it only when it is passed explicitly (``api_key=``, ``--api-key``, ``--embed-api-key``).
A local server usually needs no key: with a ``base_url`` and no key a placeholder is sent.

>>> resolve_endpoint("http://127.0.0.1:8080/v1/", "sk-local")
('http://127.0.0.1:8080/v1', 'sk-local')

``timeout`` is a deadline for the whole request, retries included: :class:`Deadline` shuts the request's
sockets down when it passes, so a server that sends one byte at a time cannot hold a caller past it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import json
import os
import socket
import threading
import time
import urllib.parse
import urllib.request
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from .retry import RetryPolicy, acall_with_retries, call_with_retries

__all__ = [
    "DEFAULT_URL",
    "PLACEHOLDER_KEY",
    "Deadline",
    "ServerCalls",
    "client_kwargs",
    "explain_status",
    "read_json",
    "resolve_endpoint",
    "resolve_within",
    "short_repr",
    "sync_http_client",
    "timeout_error",
    "translate_error",
]

T = TypeVar("T")

DEFAULT_URL = "https://api.openai.com/v1"
PLACEHOLDER_KEY = "sk-no-key-required"

#: The fixes for a missing or refused key, in the library's and the CLI's words.
_KEY_FIX = (
    "pass api_key=... (CLI: --api-key / --embed-api-key); OPENAI_API_KEY is sent only to api.openai.com or to "
    "the server OPENAI_BASE_URL names"
)


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    return scheme, (parts.hostname or "").lower(), port or {"http": 80, "https": 443}.get(scheme)


def resolve_endpoint(base_url: str | None, api_key: str | None) -> tuple[str, str]:
    """``(base_url, api_key)`` from the arguments, else the environment; ValueError when OpenAI itself would be
    called without a key. ``OPENAI_API_KEY`` is used only for OpenAI's own host or the host of
    ``OPENAI_BASE_URL``; another server gets the placeholder key unless ``api_key`` is given.

    >>> resolve_endpoint("http://127.0.0.1:8080/v1", None)[1]     # whatever OPENAI_API_KEY holds
    'sk-no-key-required'
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


def client_kwargs(
    base_url: str | None, api_key: str | None, timeout: float, default_headers: dict[str, str] | None = None
) -> dict[str, Any]:
    """The ``openai.OpenAI`` / ``AsyncOpenAI`` arguments: the server and key of :func:`resolve_endpoint`,
    ``timeout`` (positive seconds; each read is bounded by it, the whole request by :class:`Deadline`) and the
    client's own retries off (``RetryPolicy`` retries).

    >>> client_kwargs("http://127.0.0.1:8080/v1", "sk-local", 30)["timeout"]
    30.0
    """
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < float("inf"):
        raise ValueError(f"timeout must be positive seconds (--timeout in the CLI), got {timeout!r}")
    url, key = resolve_endpoint(base_url, api_key)
    return {
        "base_url": url,
        "api_key": key,
        "timeout": float(timeout),
        "max_retries": 0,
        "default_headers": default_headers,
    }


# ------------------------------------------------------------------------------------------------ deadlines
_ACTIVE: ContextVar[Deadline | None] = ContextVar("fragrel_request_deadline", default=None)


def _shutdown(sock: Any) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)  # wakes a read blocked on it at once (close() alone does not)


class Deadline:
    """A wall-clock deadline for one request and its retries.

    Requests sent through a :func:`sync_http_client` while the deadline is :meth:`active` register the sockets
    they open; when the deadline passes (a timer thread) those sockets are shut down, which ends a blocked or
    slowly fed read at once. ``expired`` then says why the request failed. Use it as a context manager (the
    timer stops on exit).

    >>> with Deadline(5.0) as deadline:
    ...     0 < deadline.remaining() <= 5.0
    True
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = float(seconds)
        self.end = time.monotonic() + self.seconds
        self.expired = False
        self._lock = threading.Lock()
        self._sockets: list[Any] = []
        self._timer = threading.Timer(min(self.seconds, threading.TIMEOUT_MAX), self._expire)
        self._timer.daemon = True
        self._timer.start()

    def remaining(self) -> float:
        """Seconds left (negative once passed)."""
        return self.end - time.monotonic()

    def passed(self) -> bool:
        return self.expired or self.remaining() <= 0

    @contextmanager
    def active(self) -> Any:
        """Requests sent inside register their sockets with this deadline."""
        token = _ACTIVE.set(self)
        try:
            yield self
        finally:
            _ACTIVE.reset(token)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            _shutdown(sock)

    def _watch(self, sock: Any) -> None:
        with self._lock:
            if not self.expired:
                self._sockets.append(sock)
                return
        _shutdown(sock)

    def _trace(self, inner: Any) -> Any:
        """An httpcore ``trace`` extension that registers every new connection's socket."""

        def trace(event: str, info: dict[str, Any]) -> None:
            stream = info.get("return_value") if event.endswith(".complete") else None
            get_info = getattr(stream, "get_extra_info", None)
            if get_info is not None:
                sock = get_info("socket")
                if sock is not None:
                    self._watch(sock)
            if inner is not None:
                inner(event, info)

        return trace

    def close(self) -> None:
        self._timer.cancel()
        with self._lock:
            self._sockets = []

    def __enter__(self) -> Deadline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@functools.cache
def _deadline_client_class(base: type) -> type:
    class DeadlineHttpClient(base):  # type: ignore[misc, valid-type]
        """The openai client's HTTP client, with the sockets of each request registered with its Deadline."""

        def send(self, request: Any, **kwargs: Any) -> Any:
            deadline = _ACTIVE.get()
            if deadline is not None:
                extensions = dict(request.extensions)
                extensions["trace"] = deadline._trace(extensions.get("trace"))
                request.extensions = extensions
            return super().send(request, **kwargs)

    return DeadlineHttpClient


def sync_http_client(openai: Any) -> Any:
    """The HTTP client for ``openai.OpenAI(http_client=...)``: openai's defaults (proxies from the environment
    included), every request on a fresh connection so that its socket is known to its :class:`Deadline`."""
    default = openai.DEFAULT_CONNECTION_LIMITS
    limits = type(default)(max_connections=default.max_connections, max_keepalive_connections=0)
    return _deadline_client_class(openai.DefaultHttpxClient)(limits=limits)


def resolve_within(base_url: str, seconds: float) -> None:
    """Look up the host of ``base_url`` in a worker thread, waiting at most ``seconds``: a slow name lookup
    (which no socket timeout bounds) is a TimeoutError saying so, inside the request's deadline. The answer
    lands in the system's resolver cache for the request itself; a failed lookup is left to the request to
    report. Skipped for an IP address, ``localhost`` and when a proxy is configured (the proxy resolves it)."""
    _, host, port = _origin(base_url)
    if not host or host == "localhost" or urllib.request.getproxies():
        return
    with contextlib.suppress(ValueError):
        ipaddress.ip_address(host)
        return
    done = threading.Event()

    def lookup() -> None:
        with contextlib.suppress(OSError, UnicodeError):
            socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        done.set()

    threading.Thread(target=lookup, name="fragrel-resolve", daemon=True).start()
    if not done.wait(max(0.0, seconds)):
        raise TimeoutError(
            f"name resolution of {host!r} (the OpenAI-compatible server at {base_url}) timed out: no answer "
            f"within the request's {seconds:.3g}s; check the host name and your DNS, or raise timeout=... "
            "(--timeout in the CLI)"
        )


# ------------------------------------------------------------------------------------------------ errors
def timeout_error(base_url: str, timeout: float, attempts: int) -> TimeoutError:
    """The error for a request that did not finish within its deadline."""
    tries = "1 attempt" if attempts == 1 else f"{attempts} attempts"
    return TimeoutError(
        f"the OpenAI-compatible server at {base_url} did not answer within {timeout:g}s ({tries}, retries "
        "included); raise timeout=... (--timeout in the CLI) or check the server"
    )


def translate_error(openai: Any, exc: Exception, base_url: str, timeout: float, retries: int) -> Exception:
    """A timeout or an unreachable server as ``TimeoutError`` / ``ConnectionError`` naming ``base_url`` and the
    fix; an HTTP error status with its message rewritten the same way (:func:`explain_status`); any other
    exception unchanged."""
    if isinstance(exc, openai.APITimeoutError):
        return timeout_error(base_url, timeout, retries + 1)
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc
        if "RemoteProtocolError" in type(cause).__name__ or "ReadError" in type(cause).__name__:
            return ConnectionError(
                f"the OpenAI-compatible server at {base_url} broke off its reply: {cause}. Check the server "
                "(a crash, or a proxy cutting the connection)"
            )
        return ConnectionError(
            f"cannot reach the OpenAI-compatible server at {base_url} "
            f"(after {_retries(retries)}): {cause}. "
            "Is it running? Check base_url / --base-url / --embed-base-url / OPENAI_BASE_URL."
        )
    if isinstance(exc, openai.APIStatusError):
        return explain_status(exc, base_url, retries)
    return exc


def explain_status(exc: Exception, base_url: str, retries: int) -> Exception:
    """``exc`` (an HTTP error status: openai's ``APIStatusError``) with a message that names the server, the
    status and the fix; its type and ``status_code`` are kept."""
    code = getattr(exc, "status_code", None)
    said = " ".join(str(getattr(exc, "message", None) or exc).split())
    where = f"the OpenAI-compatible server at {base_url} answered HTTP {code}"
    if code in (401, 403):
        text = f"{where} (the API key was refused: {said}); {_KEY_FIX}"
    elif code == 404:
        text = f"{where} ({said}); check the model name and base_url (usually ending in /v1)"
    elif code is not None and (code >= 500 or code in (408, 409, 425, 429)):
        text = f"{where} after {_retries(retries)} ({said}); check the server's log or try again later"
    else:
        text = f"{where}: the request was rejected ({said})"
    exc.args = (text,)
    if hasattr(exc, "message"):
        exc.message = text
    return exc


def _retries(n: int) -> str:
    return "1 retry" if n == 1 else f"{n} retries"


def short_repr(value: Any, limit: int = 200) -> str:
    """``repr(value)`` cut to ``limit`` characters, for error messages.

    >>> short_repr("x" * 300, 5)
    "'xxxx..."
    """
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def read_json(raw: Any, source: str) -> dict[str, Any]:
    """The JSON object of a raw openai response (``with_raw_response``); ValueError naming ``source`` when the
    body is not a JSON object."""
    content = raw.http_response.content
    try:
        data = json.loads(content)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{source} sent a reply that is not JSON ({exc}): {short_repr(content)}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{source} sent JSON that is not an object: {short_repr(data)}")
    return data


class ServerCalls:
    """Requests to one server under a total deadline, retries included, with errors that name it: the part of
    ``OpenAIChatModel`` and ``OpenAIEmbedder`` that talks to the server. Needs ``base_url``, ``timeout``,
    ``retry`` and ``_openai`` (the openai module)."""

    base_url: str
    timeout: float
    retry: RetryPolicy
    _openai: Any

    def _call(self, fn: Any, *, deadline: Deadline | None = None, policy: RetryPolicy | None = None) -> Any:
        """``fn()`` (a request on a :func:`sync_http_client`) with retries, all within ``timeout`` seconds (or
        ``deadline``, which the caller then closes); failures translated (:meth:`_failure`)."""
        own = deadline is None
        deadline = Deadline(self.timeout) if deadline is None else deadline
        attempts = 0
        try:
            resolve_within(self.base_url, deadline.remaining())
        except TimeoutError:
            if own:
                deadline.close()
            raise

        def attempt() -> Any:
            nonlocal attempts
            attempts += 1
            with deadline.active():
                return fn()

        try:
            return call_with_retries(attempt, policy or self.retry, deadline=deadline.end)
        except Exception as exc:
            err = self._failure(exc, deadline.passed(), attempts)
            if err is exc:
                raise
            raise err from exc
        finally:
            if own:
                deadline.close()

    async def _acall(self, fn: Any, *, policy: RetryPolicy | None = None, end: float | None = None) -> Any:
        """Async :meth:`_call`: each attempt runs under ``asyncio.timeout`` with the time left before ``end`` (a
        ``time.monotonic()`` value; default ``timeout`` seconds from now)."""
        end = time.monotonic() + self.timeout if end is None else end
        attempts = 0

        async def attempt() -> Any:
            nonlocal attempts
            attempts += 1
            async with asyncio.timeout(max(0.0, end - time.monotonic())):
                return await fn()

        try:
            return await acall_with_retries(attempt, policy or self.retry, deadline=end)
        except Exception as exc:
            err = self._failure(exc, time.monotonic() >= end, attempts)
            if err is exc:
                raise
            raise err from exc

    def _failure(self, exc: Exception, expired: bool, attempts: int = 1) -> Exception:
        """``exc`` as the caller should see it: a :func:`timeout_error` once the deadline passed, else
        :func:`translate_error`."""
        if expired:
            return timeout_error(self.base_url, self.timeout, attempts)
        return translate_error(self._openai, exc, self.base_url, self.timeout, attempts - 1)
