"""Token streaming (llama.cpp tokens, OpenAI-compatible server-sent events, through both framework wrappers) and
grammar-constrained tool calling for LangChain agents (``create_agent(FragRelChatModel(...), tools)``)."""

from __future__ import annotations

import asyncio
import threading

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

from _llm_fixtures import SERVER_MODEL, ScriptedToolModel, get_embedded, get_llama_cpp, get_server
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from llama_index.core.base.llms.types import ChatMessage as LIChatMessage

from fragrel_integrations.langchain import FragRelChatModel
from fragrel_integrations.llama_index import FragRelLLM
from fragrel_integrations.models.chat import ToolCall, ToolReply, aiter_in_thread
from fragrel_integrations.testing import ScriptedChatModel


# ------------------------------------------------------------------------------------ aiter_in_thread
async def test_aiter_in_thread_yields_in_order_off_the_loop_thread():
    here, threads = threading.get_ident(), []

    def numbers():
        for i in range(5):
            threads.append(threading.get_ident())
            yield i

    assert [x async for x in aiter_in_thread(numbers())] == [0, 1, 2, 3, 4]
    assert here not in threads


async def test_aiter_in_thread_raises_the_iterators_error():
    def failing():
        yield 1
        raise ValueError("backend broke")

    got = []
    with pytest.raises(ValueError, match="backend broke"):
        async for x in aiter_in_thread(failing()):
            got.append(x)
    assert got == [1]


async def test_aiter_in_thread_closes_the_iterator_when_the_consumer_stops():
    closed = threading.Event()

    def endless():
        try:
            i = 0
            while True:
                yield i
                i += 1
        finally:
            closed.set()

    stream = aiter_in_thread(endless(), max_buffer=2)
    async for x in stream:
        if x == 3:
            break
    await stream.aclose()
    assert await asyncio.to_thread(closed.wait, 5)


# ------------------------------------------------------------------------------------ wrappers, scripted model
async def test_wrappers_stream_async_pieces():
    chat = FragRelChatModel(model=ScriptedChatModel(["one two three"], cycle=True))
    chunks = [c async for c in chat.astream("hi")]
    assert [c.content for c in chunks] == ["one ", "two ", "three", ""]
    assert chunks[-1].usage_metadata["output_tokens"] > 0
    llm = FragRelLLM(model=ScriptedChatModel(["one two three"], cycle=True))
    deltas = [r.delta async for r in await llm.astream_chat([LIChatMessage(role="user", content="hi")])]
    assert deltas == ["one ", "two ", "three"]
    texts = [r.text async for r in await llm.astream_complete("hi")]
    assert texts == ["one ", "one two ", "one two three"]


# ------------------------------------------------------------------------------------ real token streams
@pytest.mark.slow
@pytest.mark.parametrize("get_model", [get_embedded, get_llama_cpp], ids=["transformers", "llama_cpp"])
async def test_embedded_runtimes_stream_tokens_that_join_to_the_reply(get_model):
    model = get_model()
    messages = [{"role": "user", "content": "Name three colours."}]
    # llama.cpp's first evaluation of a prompt and its later ones (the prefix cached) can differ in the last bits of
    # the logits, so greedy replies can differ too: compare two calls that both find the prompt cached
    model.invoke(messages, max_tokens=16, temperature=0)
    pieces = list(model.stream(messages, max_tokens=16, temperature=0))
    assert len(pieces) > 3 and all(isinstance(p, str) and p for p in pieces)
    assert "".join(pieces) == model.invoke(messages, max_tokens=16, temperature=0)
    apieces = [p async for p in model.astream(messages, max_tokens=16, temperature=0)]
    assert apieces == pieces
    early = model.stream(messages, max_tokens=16, temperature=0)
    next(early)
    early.close()  # stops generating and frees the model for the next call
    assert model.invoke(messages, max_tokens=4, temperature=0)


@pytest.mark.slow
def test_framework_wrappers_stream_llama_cpp_tokens():
    chat = FragRelChatModel(model=get_llama_cpp(), max_tokens=16, temperature=0)
    chunks = list(chat.stream("Name three colours."))
    assert len(chunks) > 4 and chunks[-1].usage_metadata["output_tokens"] > 3
    assert "".join(c.content for c in chunks) == chat.invoke("Name three colours.").content
    llm = FragRelLLM(model=get_llama_cpp(), max_tokens=16, temperature=0)
    responses = list(llm.stream_chat([LIChatMessage(role="user", content="Name three colours.")]))
    assert len(responses) > 3 and responses[-1].message.content == "".join(r.delta for r in responses)


@pytest.mark.slow
async def test_openai_compatible_server_streams_server_sent_events():
    from fragrel_integrations.models.openai_chat import OpenAIChatModel

    model = OpenAIChatModel(SERVER_MODEL, base_url=get_server().base_url, timeout=120)
    messages = [{"role": "user", "content": "Name three colours."}]
    # llama.cpp's first evaluation of a prompt and its later ones (the prefix cached) can differ in the last bits of
    # the logits, so greedy replies can differ too: compare two calls that both find the prompt cached
    model.invoke(messages, max_tokens=16, temperature=0)
    pieces = list(model.stream(messages, max_tokens=16, temperature=0))
    assert len(pieces) > 3
    apieces = [p async for p in model.astream(messages, max_tokens=16, temperature=0)]
    assert len(apieces) > 3 and "".join(apieces).strip()


# ------------------------------------------------------------------------------------ tools, scripted
@tool
def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return f"It is sunny and 21 degrees in {city}."


def test_agent_calls_the_tool_then_answers_with_its_result():
    from langchain.agents import create_agent

    model = ScriptedToolModel(
        [ToolReply("", (ToolCall("get_weather", {"city": "Paris"}, '{"city": "Paris"}'),))],
        ["It is sunny in Paris."],
    )
    agent = create_agent(FragRelChatModel(model=model), tools=[get_weather])
    out = agent.invoke({"messages": [{"role": "user", "content": "Weather in Paris?"}]})
    kinds = [type(m).__name__ for m in out["messages"]]
    assert kinds == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]
    assert out["messages"][1].tool_calls[0]["args"] == {"city": "Paris"}
    assert out["messages"][2].content == "It is sunny and 21 degrees in Paris."
    assert out["messages"][-1].content == "It is sunny in Paris."
    request = model.tool_requests[0]
    assert request["tools"][0]["function"]["name"] == "get_weather" and request["allowed"] == ["get_weather"]
    # the answer turn: the tool already answered, so a plain reply with its result as a user turn
    assert model.calls[-1]["messages"] == [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "user", "content": "Tool result (get_weather): It is sunny and 21 degrees in Paris."},
    ]


async def test_async_agent_and_invalid_arguments_become_invalid_tool_calls():
    from langchain.agents import create_agent

    model = ScriptedToolModel(
        [ToolReply("", (ToolCall("get_weather", None, '{"city": "Par', "the arguments are not valid JSON"),))],
        [],
    )
    chat = FragRelChatModel(model=model).bind_tools([get_weather])
    message = await chat.ainvoke("Weather in Paris?")
    assert message.tool_calls == [] and message.invalid_tool_calls[0]["args"] == '{"city": "Par'
    assert create_agent(FragRelChatModel(model=ScriptedToolModel([], ["hi"])), tools=[get_weather])


def test_repeat_tool_calls_flag_offers_the_tool_again():
    model = ScriptedToolModel([ToolReply("done")], [])
    chat = FragRelChatModel(model=model, repeat_tool_calls=True).bind_tools([get_weather], tool_choice="any")
    history = [
        HumanMessage("Weather in Paris?"),
        AIMessage("", tool_calls=[{"name": "get_weather", "args": {"city": "Paris"}, "id": "c1"}]),
        ToolMessage("sunny", tool_call_id="c1", name="get_weather"),
    ]
    assert chat.invoke(history).content == "done"
    assert model.tool_requests[0]["allowed"] is None and model.tool_requests[0]["tool_choice"] == "any"
    assert model.tool_requests[0]["messages"][1] == {
        "role": "assistant",
        "content": 'functions.get_weather:\n{"city": "Paris"}',
    }


def test_streaming_a_tool_call_gives_tool_call_chunks():
    model = ScriptedToolModel([ToolReply("", (ToolCall("get_weather", {"city": "Oslo"}, '{"city": "Oslo"}'),))], [])
    chunks = list(FragRelChatModel(model=model).bind_tools([get_weather]).stream("Weather in Oslo?"))
    assert len(chunks) == 1 and chunks[0].tool_calls[0]["args"] == {"city": "Oslo"}


# ------------------------------------------------------------------------------------ tools, real SmolLM2-135M
@pytest.mark.slow
def test_embedded_model_calls_a_tool_in_create_agent():
    from langchain.agents import create_agent

    called = []

    @tool
    def weather(city: str) -> str:
        """Get the current weather in a city."""
        called.append(city)
        return f"It is sunny and 21 degrees in {city}."

    chat = FragRelChatModel(model=get_llama_cpp(), max_tokens=48, temperature=0)
    agent = create_agent(chat, tools=[weather])
    out = agent.invoke(
        {"messages": [{"role": "user", "content": "What's the weather in Paris?"}]}, {"recursion_limit": 8}
    )
    assert called == ["Paris"]
    assert isinstance(out["messages"][-1], AIMessage) and out["messages"][-1].content.strip()


@pytest.mark.slow
def test_invoke_with_tools_choices_and_bad_input():
    model = get_llama_cpp()
    tools = [get_weather.tool_call_schema.model_json_schema()]
    spec = [{"type": "function", "function": {"name": "get_weather", "parameters": tools[0]}}]
    forced = model.invoke_with_tools("Tell me about Rome.", spec, tool_choice="get_weather", max_tokens=32)
    assert forced.tool_calls[0].name == "get_weather" and isinstance(forced.tool_calls[0].args, dict)
    text = model.invoke_with_tools("Say hi.", spec, tool_choice="none", max_tokens=8)
    assert text.tool_calls == () and text.content
    with pytest.raises(ValueError, match="tool_choice"):
        model.invoke_with_tools("hi", spec, tool_choice="lookup")
    with pytest.raises(ValueError, match="tool name"):
        model.invoke_with_tools("hi", [{"type": "function", "function": {"name": 'bad" name'}}])
