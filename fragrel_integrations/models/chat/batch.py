"""Many prompts at once: :func:`abatch` (concurrent ``ainvoke``), :func:`batch` (a thread pool) and
:func:`complete` (one prompt -> stripped text)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from ..._validation import check_positive_int
from .messages import Messages, to_messages
from .params import check_params
from .protocol import ChatModel, check_chat_model

__all__ = ["abatch", "batch", "complete"]


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
    model = check_chat_model(model)
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
    model = check_chat_model(model)
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
    return check_chat_model(model).invoke(msgs, temperature=temperature, max_tokens=max_tokens, stop=stop).strip()
