"""ChatModel for ANY OpenAI-compatible chat-completions server, through the official ``openai`` client.

Works with OpenAI itself, llama.cpp / llama-cpp-python servers, vLLM, Ollama (``/v1``), LM Studio, LiteLLM, ...
``base_url`` and ``api_key`` come from the arguments or from ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``. A local
server usually needs no key: with a ``base_url`` and no key a placeholder is sent.

>>> model = OpenAIChatModel("smollm2", base_url="http://127.0.0.1:8000/v1")     # doctest: +SKIP
>>> model.invoke([{"role": "user", "content": "Say hi"}], max_tokens=8)         # doctest: +SKIP
'Hi!'

The client's own retries are switched off (``max_retries=0``): retries follow :class:`RetryPolicy` (transient
errors only, exponential backoff), so they behave the same for every backend. ``timeout`` is a deadline for the
whole request, retries included (a server that sends one byte at a time cannot hold it): then ``TimeoutError``;
a server that cannot be reached raises ``ConnectionError``; an HTTP error status keeps openai's exception type
with a message naming the URL and the fix. Every reply is checked before use: one that is not JSON, has no
choices, a null message, content that is not text, or a tool call instead of text is a ``ValueError`` naming
the server.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from typing import Any, NoReturn

from .._optional import require
from .chat import ChatModelBase, Messages, given_params, to_messages
from .openai_endpoint import Deadline, ServerCalls, client_kwargs, read_json, short_repr, sync_http_client
from .retry import RetryPolicy
from .structured import ReplyFormat
from .tokens import estimate_tokens
from .yes_no import yes_no_from_logprobs

__all__ = ["YES_NO_TOP_LOGPROBS", "OpenAIChatModel"]

logger = logging.getLogger(__name__)

#: ``top_logprobs`` asked for a yes/no question (OpenAI allows at most 20).
YES_NO_TOP_LOGPROBS = 20


_TOOL_FIX = (
    "OpenAIChatModel sends no tools and reads text only: check the server's chat template or tool settings "
    "(a template that forces tool calls)"
)


def _content_text(message: dict[str, Any], source: str) -> str:
    """The text of a chat ``message``: a string, or text parts joined; ValueError naming ``source`` for a tool
    call, a refusal or content of another type."""
    content = message.get("content")
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content
    ):
        content = "".join(p["text"] for p in content)  # content parts: [{"type": "text", "text": ...}, ...]
    if content is not None and not isinstance(content, str):
        raise ValueError(f"{source} sent content of type {type(content).__name__}, not text: {short_repr(content)}")
    if content:
        return content
    calls = message.get("tool_calls") or ([message["function_call"]] if message.get("function_call") else [])
    if calls:
        names = [str((c.get("function") or c).get("name")) if isinstance(c, dict) else "?" for c in calls]
        raise ValueError(f"{source} answered with a tool call ({', '.join(names)}) instead of text; {_TOOL_FIX}")
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:
        raise ValueError(f"{source} refused to answer: {short_repr(refusal)}")
    return ""


class _FormatRefused(Exception):
    """The server refused ``response_format`` (raised inside the retry loop so that it is not retried)."""


class OpenAIChatModel(ServerCalls, ChatModelBase):
    """A model served behind an OpenAI-compatible ``/chat/completions`` endpoint.

    ``model`` is the name the server knows (required). ``timeout`` is seconds per call, retries included (one
    total deadline: connect and every read); ``retry`` the backoff policy; ``seed`` is sent with every request
    (servers that support it sample reproducibly); ``context_window`` tells callers such as ``fragrel ask`` how
    many tokens the model takes (unknown = None); ``extra_body`` is merged into every request for server-specific
    options. :meth:`yes_no_probability` reads yes/no answers from ``logprobs`` where the server returns them.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        seed: int | None = None,
        context_window: int | None = None,
        extra_body: dict[str, Any] | None = None,
        default_headers: dict[str, str] | None = None,
    ) -> None:
        openai = require("openai", "openai")
        if not isinstance(model, str) or not model:
            raise ValueError("model must be the model name the server serves, e.g. 'gpt-4o-mini' or 'smollm2'")
        if context_window is not None and (not isinstance(context_window, int) or context_window < 1):
            raise ValueError(f"context_window must be a positive int or None, got {context_window!r}")
        self._client_kwargs = client_kwargs(base_url, api_key, timeout, default_headers)
        self.base_url, self.timeout = self._client_kwargs["base_url"], self._client_kwargs["timeout"]
        self.model_name = model
        self.retry = retry or RetryPolicy()
        self.seed = seed
        self.context_window = context_window
        self.extra_body = dict(extra_body or {})
        self._openai = openai
        self._client = openai.OpenAI(**self._client_kwargs, http_client=sync_http_client(openai))
        _ = self._client.chat.completions  # openai imports its resources on first use: here, not inside a deadline
        self._async: tuple[asyncio.AbstractEventLoop, Any] | None = None
        #: None: not known yet; False: the server gave no logprobs, yes/no questions are answered as text.
        self.logprobs_supported: bool | None = None
        self.format_refused = False  # set once the server refuses a response_format request

    def count_tokens(self, text: str) -> int:
        """No tokenizer for a remote model offline: the word-based estimate."""
        return estimate_tokens(text)

    def _request(
        self, messages: list[dict[str, str]], temperature: float | None, max_tokens: int | None, stop: list[str] | None
    ) -> dict[str, Any]:
        req = {"model": self.model_name, "messages": messages, **given_params(temperature, max_tokens, stop)}
        if self.seed is not None:
            req["seed"] = self.seed
        if self.extra_body:
            req["extra_body"] = self.extra_body
        return req

    @property
    def _source(self) -> str:
        return f"the chat server at {self.base_url} (model {self.model_name!r})"

    def _text(self, raw: Any) -> str:
        """The reply text of a raw ``/chat/completions`` response, checked: a ValueError naming the server for a
        reply that is not JSON, has no choices or a null message, content that is not text, or a tool call."""
        source = self._source
        data = read_json(raw, source)
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise ValueError(f"{source} sent a reply without choices: {short_repr(data)}")
        message = choices[0].get("message")
        if not isinstance(message, dict):
            raise ValueError(f"{source} sent a choice without a message ({short_repr(message)}); check the server")
        return _content_text(message, source)

    def _generate(
        self, messages: list[dict[str, str]], temperature: float | None, max_tokens: int | None, stop: list[str] | None
    ) -> str:
        req = self._request(messages, temperature, max_tokens, stop)
        create = self._client.chat.completions.with_raw_response.create  # openai's lazy imports: before the deadline
        return self._text(self._call(lambda: create(**req)))

    # -- constrained replies ---------------------------------------------------------------------------------------
    def supports_format(self, reply_format: ReplyFormat) -> bool:
        """Choice, regex and JSON formats go out as ``response_format`` ``json_schema`` (llama.cpp's server, vLLM
        and OpenAI enforce it); GBNF grammars are not sent. False for every format once this server refused one
        (see :meth:`_refusal`; the instance then sends plain requests and the step parses the text)."""
        return not self.format_refused and reply_format.response_schema() is not None

    def _format_request(self, req: dict[str, Any], reply_format: ReplyFormat) -> dict[str, Any]:
        schema = reply_format.response_schema()
        spec = {"name": reply_format.name, "schema": schema, "strict": True}
        return {**req, "response_format": {"type": "json_schema", "json_schema": spec}}

    def _refusal(self, exc: Exception) -> bool:
        """Whether an error means "this server does not take ``response_format`` json_schema": 400/404/415/422,
        or a 500 whose message names ``response_format`` (llama-cpp-python's server validates it that way)."""
        if not isinstance(exc, self._openai.APIStatusError):
            return False
        if exc.status_code in (400, 404, 415, 422):
            return True
        return exc.status_code == 500 and "response_format" in str(exc)

    def _create_format(self, create: Any, req: dict[str, Any]) -> Any:
        """One request with ``response_format``; a refusal becomes :class:`_FormatRefused` (not retried)."""
        try:
            return create(**req)
        except self._openai.APIStatusError as exc:
            if self._refusal(exc):
                raise _FormatRefused(str(exc)) from exc
            raise

    async def _acreate_format(self, create: Any, req: dict[str, Any]) -> Any:
        try:
            return await create(**req)
        except self._openai.APIStatusError as exc:
            if self._refusal(exc):
                raise _FormatRefused(str(exc)) from exc
            raise

    def _refused(self, exc: Exception) -> None:
        """A server that refuses a ``response_format`` request (see :meth:`_refusal`) does not support it: remember that
        for this instance (later requests are plain) and let the caller retry once without it."""
        self.format_refused = True
        logger.warning(
            "%s at %s refused response_format json_schema (%s); sending plain requests and parsing the text",
            self.model_name,
            self.base_url,
            exc,
        )

    def _generate_format(self, messages, temperature, max_tokens, stop, reply_format) -> str:  # type: ignore[no-untyped-def]
        req = self._format_request(self._request(messages, temperature, max_tokens, stop), reply_format)
        create = self._client.chat.completions.with_raw_response.create
        try:
            response = self._call(lambda: self._create_format(create, req))
        except _FormatRefused as exc:
            self._refused(exc)
            return self._generate(messages, temperature, max_tokens, stop)
        return reply_format.unwrap(self._text(response))

    async def _agenerate_format(self, messages, temperature, max_tokens, stop, reply_format) -> str:  # type: ignore[no-untyped-def]
        req = self._format_request(self._request(messages, temperature, max_tokens, stop), reply_format)
        create = self._async_client().chat.completions.with_raw_response.create
        try:
            response = await self._acall(lambda: self._acreate_format(create, req))
        except _FormatRefused as exc:
            self._refused(exc)
            return await self._agenerate(messages, temperature, max_tokens, stop)
        return reply_format.unwrap(self._text(response))

    def _async_client(self) -> Any:
        # An httpx async client belongs to the event loop it first ran on: make one per loop.
        loop = asyncio.get_running_loop()
        if self._async is None or self._async[0] is not loop:
            self._async = (loop, self._openai.AsyncOpenAI(**self._client_kwargs))
        return self._async[1]

    async def _agenerate(
        self, messages: list[dict[str, str]], temperature: float | None, max_tokens: int | None, stop: list[str] | None
    ) -> str:
        req = self._request(messages, temperature, max_tokens, stop)
        create = self._async_client().chat.completions.with_raw_response.create
        return self._text(await self._acall(lambda: create(**req)))

    def _delta(self, chunk: Any) -> tuple[str, bool]:
        """``(text, finished)`` of one streamed chunk; ValueError naming the server for a malformed one."""
        choices = getattr(chunk, "choices", None)
        if choices is None or not isinstance(choices, list):
            raise ValueError(f"{self._source} sent a stream chunk without choices: {short_repr(chunk)}")
        if not choices:  # e.g. a final usage-only chunk
            return "", False
        choice = choices[0]
        delta = getattr(choice, "delta", None)
        content = getattr(delta, "content", None)
        if content is not None and not isinstance(content, str):
            raise ValueError(f"{self._source} streamed content of type {type(content).__name__}, not text")
        if not content and getattr(delta, "tool_calls", None):
            raise ValueError(f"{self._source} streamed a tool call instead of text; {_TOOL_FIX}")
        return content or "", getattr(choice, "finish_reason", None) is not None

    def _unfinished(self) -> ValueError:
        return ValueError(
            f"{self._source} ended its stream before the reply was finished (no finish_reason): the connection "
            "was cut or the server failed; check the server"
        )

    def _stream_failure(self, exc: Exception, expired: bool) -> NoReturn:
        """Raise an error met while reading a stream as the caller should see it."""
        if expired:
            err = self._failure(exc, True)
        elif isinstance(exc, json.JSONDecodeError):
            err = ValueError(f"{self._source} streamed an event that is not JSON: {exc}")
        elif type(exc).__module__.split(".")[0] in ("httpx", "httpx2", "httpcore", "httpcore2"):
            err = ConnectionError(f"{self._source} broke off its streamed reply: {exc}; check the server")
        else:
            err = self._failure(exc, False)
        if err is exc:
            raise exc
        raise err from exc

    def _stream(
        self, messages: list[dict[str, str]], temperature: float | None, max_tokens: int | None, stop: list[str] | None
    ) -> Iterator[str]:
        """The server's server-sent events (``stream=True``), one text delta at a time."""
        req = {**self._request(messages, temperature, max_tokens, stop), "stream": True}
        create = self._client.chat.completions.create
        with Deadline(self.timeout) as deadline:  # the whole stream, not only its first bytes
            stream = self._call(lambda: create(**req), deadline=deadline)
            finished = False
            with stream:
                chunks = iter(stream)
                while True:
                    try:
                        chunk = next(chunks)
                    except StopIteration:
                        break
                    except Exception as exc:
                        self._stream_failure(exc, deadline.passed())
                    piece, done = self._delta(chunk)
                    finished = finished or done
                    if piece:
                        yield piece
            if not finished:
                raise self._failure(self._unfinished(), deadline.passed())

    async def _astream(
        self, messages: list[dict[str, str]], temperature: float | None, max_tokens: int | None, stop: list[str] | None
    ) -> AsyncIterator[str]:
        req = {**self._request(messages, temperature, max_tokens, stop), "stream": True}
        create = self._async_client().chat.completions.create
        end = time.monotonic() + self.timeout  # the whole stream, not only its first bytes
        stream = await self._acall(lambda: create(**req), end=end)
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
                    self._stream_failure(exc, time.monotonic() >= end)
                piece, done = self._delta(chunk)
                finished = finished or done
                if piece:
                    yield piece
        if not finished:
            raise self._failure(self._unfinished(), time.monotonic() >= end)

    # -- yes/no by probability -----------------------------------------------------------------------------------
    def _yes_no_request(self, messages: Messages) -> dict[str, Any]:
        req = self._request(to_messages(messages), 0.0, 1, None)
        return {**req, "logprobs": True, "top_logprobs": YES_NO_TOP_LOGPROBS}

    def _refuses_logprobs(self, exc: BaseException) -> bool:
        """A server's "logprobs are not supported" answer (a 4xx/5xx naming logprobs, or a 400/422/501)."""
        if not isinstance(exc, self._openai.APIStatusError):
            return False
        return "logprob" in str(exc).lower() or exc.status_code in (400, 422, 501)

    def _retry_without_refusals(self) -> RetryPolicy:
        policy = self.retry
        return replace(policy, retry_on=lambda exc: not self._refuses_logprobs(exc) and policy.retry_on(exc))

    def _yes_no_from_response(self, response: Any) -> float | None:
        choices = getattr(response, "choices", None)
        content = getattr(getattr(choices[0], "logprobs", None), "content", None) if choices else None
        if not content:
            self._note_no_logprobs("the server returned no logprobs")
            return None
        try:
            first = content[0]
            pairs = {t.token: t.logprob for t in (getattr(first, "top_logprobs", None) or [])}
            pairs.setdefault(first.token, first.logprob)  # the sampled token, when the top list lacks it
            return yes_no_from_logprobs(pairs.items())
        except (AttributeError, TypeError, ValueError, IndexError, KeyError) as exc:
            self._note_no_logprobs(f"the server returned malformed logprobs ({exc})")
            return None

    def _note_no_logprobs(self, why: str) -> None:
        if self.logprobs_supported is not False:
            logger.warning("%s at %s: yes/no questions fall back to parsing the reply text (%s)", self.model_name,
                           self.base_url, why)  # fmt: skip
        self.logprobs_supported = False

    def _yes_no_failed(self, exc: Exception) -> None:
        """None for a server that refuses logprobs (noted, not asked again); any other error is raised."""
        if not self._refuses_logprobs(exc):
            raise exc
        self._note_no_logprobs(f"the server refused logprobs: {exc}")
        return None

    def yes_no_probability(self, messages: Messages) -> float | None:
        """``P(yes) / (P(yes) + P(no))`` of the reply's first token from a one-token completion with ``logprobs``
        and ``top_logprobs`` (see :mod:`~fragrel_integrations.models.yes_no`).

        None (the caller parses a text reply instead) when the server returns no logprobs, refuses them (then it
        is not asked again: ``logprobs_supported`` becomes False), or lists neither yes nor no among its top
        tokens. Connection errors and timeouts raise as for :meth:`invoke`.
        """
        if self.logprobs_supported is False:
            return None
        req = self._yes_no_request(messages)
        create = self._client.chat.completions.create
        try:
            response = self._call(lambda: create(**req), policy=self._retry_without_refusals())
        except self._openai.APIStatusError as exc:
            return self._yes_no_failed(exc)
        return self._yes_no_from_response(response)

    async def ayes_no_probability(self, messages: Messages) -> float | None:
        """Async :meth:`yes_no_probability`."""
        if self.logprobs_supported is False:
            return None
        req = self._yes_no_request(messages)
        create = self._async_client().chat.completions.create
        try:
            response = await self._acall(lambda: create(**req), policy=self._retry_without_refusals())
        except self._openai.APIStatusError as exc:
            return self._yes_no_failed(exc)
        return self._yes_no_from_response(response)

    def close(self) -> None:
        """Close the HTTP connection pool of the synchronous client."""
        self._client.close()

    def __repr__(self) -> str:
        return f"OpenAIChatModel(model={self.model_name!r}, base_url={self.base_url!r})"
