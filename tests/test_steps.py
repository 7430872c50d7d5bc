"""The step drivers of core/steps.py: one workflow generator, run sync or async, with the same results and the same
error handling (a step's exception, a cancellation included, is raised inside the workflow)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from fragrel_integrations.core.steps import CallStep, ChatStep, Steps, adrive, drive
from fragrel_integrations.testing import ScriptedChatModel


def _workflow(model: ScriptedChatModel, seen: list[str]) -> Steps[tuple[str, int, str]]:
    reply = yield ChatStep(model, [{"role": "user", "content": "Hi"}], {"max_tokens": 8})
    length = yield CallStep(len, (reply,))
    try:
        yield CallStep(int, ("not a number",))
    except ValueError as exc:  # the step's own exception, raised at the yield
        seen.append(type(exc).__name__)
    thread = yield CallStep(lambda: threading.current_thread().name)
    return reply, length, thread


def test_sync_and_async_drivers_give_the_same_result():
    seen_sync: list[str] = []
    seen_async: list[str] = []
    sync = drive(_workflow(ScriptedChatModel(["Hello there"]), seen_sync))
    run_async = asyncio.run(adrive(_workflow(ScriptedChatModel(["Hello there"]), seen_async)))
    assert sync[:2] == run_async[:2] == ("Hello there", 11)
    assert seen_sync == seen_async == ["ValueError"]
    assert sync[2] == threading.current_thread().name  # sync: the calling thread
    assert run_async[2] != threading.current_thread().name  # async: a worker thread, the loop stays free


def test_an_unhandled_step_error_propagates_and_the_model_saw_the_options():
    model = ScriptedChatModel([RuntimeError("model down")])

    def workflow() -> Steps[str]:
        return (yield ChatStep(model, [{"role": "user", "content": "Hi"}], {"temperature": 0.0}))

    with pytest.raises(RuntimeError, match="model down"):
        drive(workflow())
    assert model.calls[0]["temperature"] == 0.0


def test_a_cancellation_is_raised_inside_the_workflow():
    events: list[str] = []

    def workflow() -> Steps[None]:
        try:
            yield CallStep(lambda: None)
            yield ChatStep(ScriptedChatModel(["late"], delay=30.0), [{"role": "user", "content": "Hi"}])
        except asyncio.CancelledError:
            events.append("cancelled inside")
            raise

    async def main() -> None:
        task = asyncio.create_task(adrive(workflow()))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert events == ["cancelled inside"]
