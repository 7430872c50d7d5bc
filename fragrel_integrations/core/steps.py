"""One code path for sync and async: a workflow is a generator that yields steps, and a driver runs them.

A step is a request the workflow cannot make itself without choosing sync or async: a chat model's
``invoke`` / ``ainvoke`` (:class:`ChatStep`) or a blocking call such as a database or an embedder
(:class:`CallStep`: called directly, or in a worker thread). :func:`drive` runs a workflow synchronously and
:func:`adrive` asynchronously; each sends a step's result back into the generator, or raises the step's
exception inside it (so the workflow may handle it, e.g. keep a turn before an interruption propagates), and
returns the generator's return value. Used by the SCM memory and the triplet memory controller.

>>> def workflow():
...     total = yield CallStep(sum, ([1, 2, 3],))
...     return total * 2
>>> drive(workflow())
12
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from ..models.chat import ChatModel

__all__ = ["CallStep", "ChatStep", "Step", "Steps", "adrive", "drive"]

T = TypeVar("T")


class Step(Protocol):
    """What a driver runs: ``run`` for :func:`drive`, ``arun`` for :func:`adrive`."""

    def run(self) -> Any:
        """The step's result, computed in the calling thread."""

    async def arun(self) -> Any:
        """The step's result, without blocking the event loop."""


#: a workflow: yields steps, receives their results, returns ``T``
Steps = Generator[Step, Any, T]


@dataclass(frozen=True, slots=True)
class ChatStep:
    """Ask ``model`` for a reply to ``messages`` with the keyword ``options`` (``invoke`` / ``ainvoke``)."""

    model: ChatModel
    messages: list[dict[str, str]]
    options: Mapping[str, Any] = field(default_factory=dict)

    def run(self) -> Any:
        """``model.invoke(messages, **options)``."""
        return self.model.invoke(self.messages, **self.options)

    async def arun(self) -> Any:
        """``await model.ainvoke(messages, **options)``."""
        return await self.model.ainvoke(self.messages, **self.options)


@dataclass(frozen=True, slots=True)
class CallStep:
    """Call a blocking function: directly (sync) or in a worker thread (async)."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def run(self) -> Any:
        """``fn(*args, **kwargs)``."""
        return self.fn(*self.args, **self.kwargs)

    async def arun(self) -> Any:
        """``fn(*args, **kwargs)`` in a worker thread."""
        return await asyncio.to_thread(self.fn, *self.args, **self.kwargs)


def drive(steps: Steps[T]) -> T:
    """Run the workflow synchronously and return its value: each step's result is sent into the workflow (the
    first send starts it), a step's exception is raised inside it."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = steps.throw(error) if error is not None else steps.send(value)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        try:
            value, error = step.run(), None
        except BaseException as exc:  # raised inside the workflow, which decides
            value, error = None, exc


async def adrive(steps: Steps[T]) -> T:
    """Async :func:`drive`: chat steps by ``ainvoke``, calls in a worker thread; a cancellation is raised inside
    the workflow too."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = steps.throw(error) if error is not None else steps.send(value)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        try:
            value, error = await step.arun(), None
        except BaseException as exc:  # a cancellation included: raised inside the workflow, which decides
            value, error = None, exc
