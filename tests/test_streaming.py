"""Token streaming (llama.cpp tokens, OpenAI-compatible server-sent events, through both framework wrappers)."""

from __future__ import annotations

import asyncio
import threading

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

from _llm_fixtures import SERVER_MODEL, get_embedded, get_llama_cpp, get_server
from langchain_core.tools import tool
from llama_index.core.base.llms.types import ChatMessage as LIChatMessage

from fragrel_integrations.langchain import FragRelChatModel
from fragrel_integrations.llama_index import FragRelLLM
from fragrel_integrations.models.chat import aiter_in_thread
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
