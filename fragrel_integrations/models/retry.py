"""Retries with exponential backoff on transient errors, and none on the others.

Transient: timeouts, connection errors, HTTP 408/409/425/429 and every 5xx (``openai``, ``httpx``, ``urllib`` and
LangChain/LlamaIndex provider errors are recognised by their status code or type). Any other 4xx is a mistake
in the request and is raised at once.

>>> policy = RetryPolicy(max_retries=3, initial_delay=0.5, jitter=0.0)
>>> [policy.delay(attempt) for attempt in range(4)]
[0.5, 1.0, 2.0, 4.0]
"""

from __future__ import annotations

import asyncio
import logging
import random
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from .._validation import check_min_int
from .chat import ChatModel, ChatModelBase, check_chat_model, model_id
from .structured import ReplyFormat, supports_format

__all__ = [
    "RetryPolicy",
    "RetryingChatModel",
    "TransientError",
    "acall_with_retries",
    "call_with_retries",
    "is_transient",
    "status_code",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_TRANSIENT_4XX = frozenset({408, 409, 425, 429})


class TransientError(RuntimeError):
    """Raise this from a custom backend to say "try again" (it is always retried)."""


def status_code(exc: BaseException) -> int | None:
    """The HTTP status an exception carries (``status_code``, ``status``, ``code`` or ``response.status_code``)."""
    for obj in (exc, getattr(exc, "response", None)):
        for attr in ("status_code", "status", "code"):
            value = getattr(obj, attr, None)
            if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
                return value
    return None


def _transient_types() -> tuple[type[BaseException], ...]:
    types: list[type[BaseException]] = [TransientError, TimeoutError, ConnectionError]
    if "openai" in sys.modules:
        import openai

        types += [openai.APIConnectionError, openai.APITimeoutError]  # the timeout is a subclass; listed for clarity
    if "httpx" in sys.modules:
        import httpx

        types.append(httpx.TransportError)  # connect/read timeouts, refused connections, protocol errors
    return tuple(types)


def is_transient(exc: BaseException) -> bool:
    """True for errors worth retrying: timeouts, connection errors, 408/409/425/429 and 5xx.

    >>> is_transient(TimeoutError()), is_transient(ValueError("bad request"))
    (True, False)
    """
    code = status_code(exc)
    if code is not None:
        return code >= 500 or code in _TRANSIENT_4XX
    return isinstance(exc, _transient_types())


def _retry_after(exc: BaseException) -> float | None:
    headers = getattr(getattr(exc, "response", None), "headers", None) or getattr(exc, "headers", None)
    if headers is None:
        return None
    try:
        value = headers.get("retry-after")
        return max(0.0, float(value)) if value is not None else None
    except (TypeError, ValueError, AttributeError):
        return None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long to wait: ``delay(n) = min(max_delay, initial_delay * multiplier**n)`` times
    ``1 + jitter * u`` with ``u`` uniform in [0, 1) from ``random.Random(seed)``; a server's ``Retry-After`` header
    raises the wait (never beyond ``max_delay``). ``max_retries=0`` disables retries.
    """

    max_retries: int = 3
    initial_delay: float = 0.5
    multiplier: float = 2.0
    max_delay: float = 20.0
    jitter: float = 0.1
    seed: int | None = 0
    retry_on: Callable[[BaseException], bool] = is_transient

    def __post_init__(self) -> None:
        check_min_int(self.max_retries, "max_retries", 0)
        for name in ("initial_delay", "max_delay", "jitter"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        if self.multiplier < 1:
            raise ValueError(f"multiplier must be >= 1, got {self.multiplier!r}")

    def delay(self, attempt: int, exc: BaseException | None = None, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number ``attempt + 1``."""
        base = min(self.max_delay, self.initial_delay * self.multiplier**attempt)
        if self.jitter and rng is not None:
            base *= 1.0 + self.jitter * rng.random()
        hinted = _retry_after(exc) if exc is not None else None
        if hinted is not None:
            base = max(base, hinted)
        return min(base, self.max_delay)


def _give_up(policy: RetryPolicy, attempt: int, exc: BaseException, wait: float, deadline: float | None) -> bool:
    if deadline is not None and time.monotonic() + wait >= deadline:
        return True  # no time left for another attempt
    return attempt >= policy.max_retries or not policy.retry_on(exc)


def call_with_retries(
    fn: Callable[[], T],
    policy: RetryPolicy | None = None,
    *,
    sleep: Callable[[float], None] = time.sleep,
    deadline: float | None = None,
) -> T:
    """Call ``fn()``; on a transient error wait and try again, up to ``policy.max_retries`` more times, and
    never past ``deadline`` (a ``time.monotonic()`` value: no retry starts that could not begin before it; the
    last error is raised).

    >>> calls = []
    >>> def flaky():
    ...     calls.append(1)
    ...     if len(calls) < 3:
    ...         raise ConnectionError("refused")
    ...     return "ok"
    >>> call_with_retries(flaky, RetryPolicy(initial_delay=0.0)), len(calls)
    ('ok', 3)
    """
    policy = policy or RetryPolicy()
    rng = random.Random(policy.seed)
    attempt = 0
    while True:
        try:
            return fn()
        except Exception as exc:
            wait = policy.delay(attempt, exc, rng)
            if _give_up(policy, attempt, exc, wait, deadline):
                raise
            logger.warning("transient error (%s); retry %d/%d in %.2fs", exc, attempt + 1, policy.max_retries, wait)
            sleep(wait)
            attempt += 1


async def acall_with_retries(
    fn: Callable[[], Awaitable[T]],
    policy: RetryPolicy | None = None,
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    deadline: float | None = None,
) -> T:
    """Async :func:`call_with_retries`: ``fn`` returns a fresh awaitable on every call."""
    policy = policy or RetryPolicy()
    rng = random.Random(policy.seed)
    attempt = 0
    while True:
        try:
            return await fn()
        except Exception as exc:
            wait = policy.delay(attempt, exc, rng)
            if _give_up(policy, attempt, exc, wait, deadline):
                raise
            logger.warning("transient error (%s); retry %d/%d in %.2fs", exc, attempt + 1, policy.max_retries, wait)
            await sleep(wait)
            attempt += 1


class RetryingChatModel(ChatModelBase):
    """Wrap any :class:`ChatModel` so that transient errors are retried with backoff.

    >>> from fragrel_integrations.testing import ScriptedChatModel
    >>> flaky = ScriptedChatModel([TimeoutError("slow"), "done"])
    >>> RetryingChatModel(flaky, RetryPolicy(initial_delay=0.0)).invoke("hi")
    'done'
    """

    def __init__(self, model: ChatModel, policy: RetryPolicy | None = None) -> None:
        self.model = check_chat_model(model)
        self.policy = policy or RetryPolicy()
        self.model_name = model_id(model)

    @property
    def context_window(self) -> int | None:
        from .chat import context_window

        return context_window(self.model)

    def count_tokens(self, text: str) -> int:
        from .tokens import count_tokens

        return count_tokens(self.model, text)

    def _generate(
        self, messages: list[dict[str, str]], temperature: float | None, max_tokens: int | None, stop: list[str] | None
    ) -> str:
        return call_with_retries(
            lambda: self.model.invoke(messages, temperature=temperature, max_tokens=max_tokens, stop=stop), self.policy
        )

    async def _agenerate(
        self, messages: list[dict[str, str]], temperature: float | None, max_tokens: int | None, stop: list[str] | None
    ) -> str:
        return await acall_with_retries(
            lambda: self.model.ainvoke(messages, temperature=temperature, max_tokens=max_tokens, stop=stop),
            self.policy,
        )

    def supports_format(self, reply_format: ReplyFormat) -> bool:
        """The wrapped model's answer (constrained replies are retried like free ones)."""
        return supports_format(self.model, reply_format)

    def yes_no_probability(self, messages: Any) -> float | None:
        """The wrapped model's ``P(yes)``, retried like a reply (None when it gives no probabilities)."""
        from .yes_no import yes_no_probability

        return call_with_retries(lambda: yes_no_probability(self.model, messages), self.policy)

    async def ayes_no_probability(self, messages: Any) -> float | None:
        from .yes_no import ayes_no_probability

        return await acall_with_retries(lambda: ayes_no_probability(self.model, messages), self.policy)

    def _generate_format(self, messages, temperature, max_tokens, stop, reply_format) -> str:  # type: ignore[no-untyped-def]
        kw = {"temperature": temperature, "max_tokens": max_tokens, "stop": stop, "reply_format": reply_format}
        return call_with_retries(lambda: self.model.invoke(messages, **kw), self.policy)

    async def _agenerate_format(self, messages, temperature, max_tokens, stop, reply_format) -> str:  # type: ignore[no-untyped-def]
        kw = {"temperature": temperature, "max_tokens": max_tokens, "stop": stop, "reply_format": reply_format}
        return await acall_with_retries(lambda: self.model.ainvoke(messages, **kw), self.policy)
