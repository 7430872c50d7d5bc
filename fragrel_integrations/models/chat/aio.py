"""Bridging blocking code to async code: :func:`aiter_in_thread` streams a blocking iterator (a model's tokens)
to an event loop without blocking it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

__all__ = ["aiter_in_thread"]


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
