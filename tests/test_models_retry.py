"""Retries, backoff, timeouts and bounded concurrency against a real local HTTP server (stdlib, 127.0.0.1)."""

from __future__ import annotations

import asyncio
import time

import pytest
from _llm_fixtures import FakeOpenAIServer

from fragrel_integrations.models import retry as retry_mod
from fragrel_integrations.models.chat import abatch
from fragrel_integrations.models.openai_chat import OpenAIChatModel
from fragrel_integrations.models.retry import (
    RetryingChatModel,
    RetryPolicy,
    TransientError,
    call_with_retries,
    is_transient,
    status_code,
)
from fragrel_integrations.testing import ScriptedChatModel

FAST = RetryPolicy(max_retries=3, initial_delay=0.01, max_delay=0.05)


def model_for(server, **kw):
    return OpenAIChatModel("test-model", base_url=server.base_url, **({"retry": FAST} | kw))


def test_all_is_pinned():
    assert sorted(retry_mod.__all__) == sorted(
        [
            "RetryPolicy",
            "RetryingChatModel",
            "TransientError",
            "acall_with_retries",
            "call_with_retries",
            "is_transient",
            "status_code",
        ]
    )


def test_503_then_success_is_retried():
    with FakeOpenAIServer(plan=[503, 503]) as server:
        assert model_for(server).invoke("hi") == "echo: hi"
        assert len(server.requests) == 3


async def test_async_500_then_success_is_retried():
    with FakeOpenAIServer(plan=[500, 502]) as server:
        assert await model_for(server).ainvoke("hi") == "echo: hi"
        assert len(server.requests) == 3


def test_400_is_not_retried():
    import openai

    with FakeOpenAIServer(plan=[400]) as server:
        with pytest.raises(openai.BadRequestError):
            model_for(server).invoke("hi")
        assert len(server.requests) == 1


def test_gives_up_after_max_retries():
    import openai

    with FakeOpenAIServer(plan=[503] * 10) as server:
        with pytest.raises(openai.InternalServerError):
            model_for(server, retry=RetryPolicy(max_retries=2, initial_delay=0.01)).invoke("hi")
        assert len(server.requests) == 3


def test_429_honours_retry_after():
    with FakeOpenAIServer(plan=[429], retry_after=0.3) as server:
        start = time.perf_counter()
        assert model_for(server, retry=RetryPolicy(initial_delay=0.01, max_delay=5)).invoke("hi") == "echo: hi"
        assert time.perf_counter() - start >= 0.3
        assert len(server.requests) == 2


def test_request_carries_parameters():
    with FakeOpenAIServer() as server:
        model_for(server, seed=7).invoke(
            [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
            temperature=0.3,
            max_tokens=5,
            stop=["\n"],
        )
        body = server.requests[0]
    assert body["messages"] == [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    assert (body["temperature"], body["max_tokens"], body["stop"], body["seed"]) == (0.3, 5, ["\n"], 7)
    assert body["model"] == "test-model"


def test_timeout_is_one_deadline_for_the_call_retries_included():
    with FakeOpenAIServer(delay=1.0) as server:
        model = model_for(server, timeout=0.2, retry=RetryPolicy(max_retries=1, initial_delay=0.01))
        start = time.perf_counter()
        with pytest.raises(TimeoutError, match=r"did not answer within 0\.2s \(1 attempt, retries included\)"):
            model.invoke("hi")
        assert time.perf_counter() - start < 0.6  # was 0.2 s per attempt, two attempts
        time.sleep(0.05)
        assert len(server.requests) == 1  # no retry starts once the budget is spent


def test_retries_stop_when_the_budget_is_spent():
    import openai

    with FakeOpenAIServer(plan=[503] * 50) as server:
        policy = RetryPolicy(max_retries=40, initial_delay=0.2, multiplier=1.0, jitter=0)
        start = time.perf_counter()
        with pytest.raises(openai.InternalServerError, match=f"server at {server.base_url} answered HTTP 503 after"):
            model_for(server, timeout=1.0, retry=policy).invoke("hi")
        assert time.perf_counter() - start < 1.5
        assert 2 <= len(server.requests) <= 6


async def test_abatch_really_runs_in_parallel_and_is_bounded():
    with FakeOpenAIServer(delay=0.3) as server:
        model = model_for(server)
        start = time.perf_counter()
        out = await abatch(model, [f"q{i}" for i in range(9)], max_concurrency=3)
        elapsed = time.perf_counter() - start
    assert out == [f"echo: q{i}" for i in range(9)]
    assert server.max_in_flight == 3
    assert elapsed < 9 * 0.3 * 0.6  # serial: 2.7 s; three at a time: about 0.9 s


def test_constructor_validation(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        OpenAIChatModel("gpt-4o-mini")
    with pytest.raises(ValueError, match="model must be"):
        OpenAIChatModel("", base_url="http://127.0.0.1:1/v1")
    local = OpenAIChatModel("m", base_url="http://127.0.0.1:1/v1/")  # a local server needs no key
    assert local.base_url == "http://127.0.0.1:1/v1"


# ----------------------------------------------------------------------------------------------- policy units
def test_policy_delays_grow_and_cap():
    p = RetryPolicy(initial_delay=1, multiplier=3, max_delay=5, jitter=0)
    assert [p.delay(i) for i in range(4)] == [1, 3, 5, 5]
    import random

    jittered = [RetryPolicy(jitter=0.5, seed=1).delay(0, rng=random.Random(1)) for _ in range(2)]
    assert jittered[0] == jittered[1] and 0.5 <= jittered[0] <= 0.75


@pytest.mark.parametrize("kwargs", [{"max_retries": -1}, {"initial_delay": -1}, {"multiplier": 0.5}])
def test_policy_validation(kwargs):
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)


class Status(Exception):
    def __init__(self, code):
        super().__init__(code)
        self.status_code = code


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (TimeoutError(), True),
        (ConnectionRefusedError(), True),
        (TransientError(), True),
        (Status(429), True),
        (Status(408), True),
        (Status(500), True),
        (Status(503), True),
        (Status(400), False),
        (Status(401), False),
        (Status(404), False),
        (Status(422), False),
        (ValueError("x"), False),
    ],
)
def test_is_transient(exc, transient):
    assert is_transient(exc) is transient


def test_status_code_reads_urllib_errors():
    import urllib.error

    err = urllib.error.HTTPError("http://x", 503, "unavailable", {}, None)
    assert status_code(err) == 503 and is_transient(err)


def test_call_with_retries_does_not_retry_permanent_errors():
    calls = []

    def bad():
        calls.append(1)
        raise ValueError("bad input")

    with pytest.raises(ValueError):
        call_with_retries(bad, FAST, sleep=lambda s: None)
    assert len(calls) == 1


def test_call_with_retries_never_starts_a_retry_past_the_deadline():
    calls = []

    def down():
        calls.append(time.monotonic())
        raise ConnectionError("refused")

    start = time.monotonic()
    policy = RetryPolicy(max_retries=100, initial_delay=0.05, multiplier=1.0, jitter=0)
    with pytest.raises(ConnectionError):
        call_with_retries(down, policy, deadline=start + 0.22)
    assert 3 <= len(calls) <= 5 and calls[-1] < start + 0.22
    assert time.monotonic() - start < 0.3


def test_retrying_wrapper_around_any_model(caplog):
    flaky = ScriptedChatModel([ConnectionError("reset"), Status(503), "ok"])
    model = RetryingChatModel(flaky, RetryPolicy(initial_delay=0.01, jitter=0))
    with caplog.at_level("WARNING", logger="fragrel_integrations.models.retry"):
        assert model.invoke("x") == "ok"
    assert len(flaky.calls) == 3
    assert ["in 0.01s" in caplog.messages[0], "in 0.02s" in caplog.messages[1]] == [True, True]
    permanent = RetryingChatModel(ScriptedChatModel([Status(401), "never"]), FAST)
    with pytest.raises(Status):
        permanent.invoke("x")


async def test_retrying_wrapper_async():
    flaky = ScriptedChatModel([TimeoutError("slow"), "ok"])
    assert await RetryingChatModel(flaky, FAST).ainvoke("x") == "ok"
    assert len(flaky.calls) == 2


def test_retrying_wrapper_inside_sync_code_called_from_loop():
    # the sync path must never need an event loop
    async def main():
        return RetryingChatModel(ScriptedChatModel([TransientError(), "ok"]), FAST).invoke("x")

    assert asyncio.run(main()) == "ok"
