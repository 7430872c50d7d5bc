"""Our ChatModels inside the frameworks: ``FragRelChatModel`` (LangChain ``BaseChatModel``) and ``FragRelLLM``
(LlamaIndex ``CustomLLM``). LangChain's standard unit suite runs on a scripted fake, its integration suite and a
LlamaIndex chat engine on the real embedded SmolLM2-135M (slow)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("langchain_tests")
pytest.importorskip("llama_index.core")

from _llm_fixtures import get_embedded, get_llama_cpp
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_tests.integration_tests import ChatModelIntegrationTests
from langchain_tests.unit_tests import ChatModelUnitTests
from llama_index.core.base.llms.types import ChatMessage as LIChatMessage
from llama_index.core.base.llms.types import ImageBlock, MessageRole, TextBlock, ToolCallBlock
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms import MockLLM

from fragrel_integrations.langchain.chat_model import FragRelChatModel, to_role_messages
from fragrel_integrations.llama_index.llm import FragRelLLM
from fragrel_integrations.llama_index.llm import to_role_messages as li_role_messages
from fragrel_integrations.models.response_cache import CachedChatModel
from fragrel_integrations.testing import ScriptedChatModel


def _echo(messages: list[dict[str, str]]) -> str:
    return f"You said: {messages[-1]['content']}"


class AsyncOnlyModel:
    """``invoke`` must not be used on the async path."""

    model_name = "async-only"

    def __init__(self) -> None:
        self.async_calls: list[dict[str, Any]] = []

    def invoke(self, messages: Any, **kwargs: Any) -> str:
        raise AssertionError("the sync method was called on the async path")

    async def ainvoke(self, messages: Any, **kwargs: Any) -> str:
        self.async_calls.append({"messages": messages, **kwargs})
        return "async reply"


class SyncOnlyModel:
    """No ``ainvoke``: async calls must run ``invoke`` off the event loop's thread."""

    model_name = "sync-only"

    def __init__(self) -> None:
        self.threads: list[int] = []

    def invoke(self, messages: Any, *, temperature: Any = None, max_tokens: Any = None, stop: Any = None) -> str:
        self.threads.append(threading.get_ident())
        return "sync reply"


# ------------------------------------------------------------------------------------ LangChain standard suites
class _TextOnly:
    """What a text-in, text-out model cannot do (the standard suites skip those tests)."""

    @property
    def has_tool_calling(self) -> bool:
        return False

    @property
    def has_tool_choice(self) -> bool:
        return False

    @property
    def has_structured_output(self) -> bool:
        return False

    @property
    def supports_model_override(self) -> bool:
        return False


class TestFragRelChatModelStandardUnit(_TextOnly, ChatModelUnitTests):
    @property
    def chat_model_class(self) -> type[BaseChatModel]:
        return FragRelChatModel

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"model": ScriptedChatModel(_echo)}


@pytest.mark.slow
class TestFragRelChatModelStandardIntegration(_TextOnly, ChatModelIntegrationTests):
    """The real SmolLM2-135M on llama.cpp (one process-wide instance), short replies; no tools, no structured
    output."""

    @property
    def chat_model_class(self) -> type[BaseChatModel]:
        return FragRelChatModel

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"model": get_llama_cpp(), "max_tokens": 48}


# ------------------------------------------------------------------------------------ LangChain behaviour
def test_messages_are_converted_to_role_dicts():
    fake = ScriptedChatModel(["fine"])
    chat = FragRelChatModel(model=fake)
    reply = chat.invoke(
        [
            SystemMessage("Be brief."),
            HumanMessage("hello", name="ann"),
            AIMessage("hi"),
            HumanMessage([{"type": "text", "text": "how "}, {"type": "text", "text": "are you"}]),
            AIMessage("", tool_calls=[{"name": "lookup", "args": {"q": "x"}, "id": "c1"}]),
            ToolMessage("42", tool_call_id="c1", name="lookup"),
            ChatMessage(role="developer", content="Reply in English."),
        ]
    )
    assert isinstance(reply, AIMessage) and reply.content == "fine"
    assert fake.calls[0]["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi"},
        {"role": "user", "content": "how are you"},
        {"role": "assistant", "content": '[tool call lookup({"q": "x"})]'},
        {"role": "user", "content": "Tool result (lookup): 42"},
        {"role": "system", "content": "Reply in English."},
    ]
    assert reply.response_metadata["model_name"] == "scripted"
    usage = reply.usage_metadata
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"] > usage["output_tokens"] > 0


def test_message_conversion_rejects_what_a_text_model_cannot_read():
    image = {"type": "image", "url": "https://example.com/cat.png"}
    with pytest.raises(ValueError, match="reads text only"):
        to_role_messages([HumanMessage([{"type": "text", "text": "what is this?"}, image])])
    with pytest.raises(ValueError, match="'critic'"):
        to_role_messages([ChatMessage(role="critic", content="x")])
    assert to_role_messages([FunctionMessage("3", name="add")]) == [{"role": "user", "content": "Tool result (add): 3"}]


def test_stop_temperature_and_max_tokens_pass_through():
    fake = ScriptedChatModel(["one two three. four"], cycle=True)
    chat = FragRelChatModel(model=fake, temperature=0.3, max_tokens=2, stop=".")
    assert chat.invoke("count").content == "one two"
    assert fake.calls[-1] | {"messages": None} == {
        "messages": None,
        "temperature": 0.3,
        "max_tokens": 2,
        "stop": ["."],
    }
    assert chat.invoke("count", stop=["three"], temperature=0, max_tokens=9).content == "one two "
    assert fake.calls[-1]["stop"] == ["three"] and fake.calls[-1]["max_tokens"] == 9
    assert fake.calls[-1]["temperature"] == 0.0
    bound = chat.bind(max_tokens=1)  # LangChain's way to set call arguments
    assert bound.invoke("count").content == "one"
    plain = FragRelChatModel(model=fake)
    plain.invoke("count")
    assert fake.calls[-1]["temperature"] is None and fake.calls[-1]["max_tokens"] is None
    assert fake.calls[-1]["stop"] is None
    ls = chat._get_ls_params()
    assert (ls["ls_provider"], ls["ls_model_name"], ls["ls_max_tokens"], ls["ls_stop"]) == (
        "fragrel",
        "scripted",
        2,
        ["."],
    )


def test_bad_parameters_raise():
    with pytest.raises(ValueError, match="max_tokens"):
        FragRelChatModel(model=ScriptedChatModel(["x"]), max_tokens=0)
    with pytest.raises(ValueError, match="temperature"):
        FragRelChatModel(model=ScriptedChatModel(["x"]), temperature=5)
    chat = FragRelChatModel(model=ScriptedChatModel(["x"], cycle=True))
    with pytest.raises(ValueError, match="max_tokens"):
        chat.invoke("hi", max_tokens=-1)
    with pytest.raises(ValueError, match="cannot switch"):
        chat.invoke("hi", model="gpt-4o")


def test_bad_model_raises_type_error():
    with pytest.raises(TypeError, match="as_chat_model"):
        FragRelChatModel(model=object())
    with pytest.raises(TypeError, match="as_chat_model"):
        FragRelChatModel(model=MockLLM())  # a LlamaIndex LLM: convert it first
    with pytest.raises(TypeError, match="already a LangChain model"):
        FragRelChatModel(model=FragRelChatModel(model=ScriptedChatModel(["x"])))
    with pytest.raises(TypeError, match="as_chat_model"):
        FragRelLLM(model="not a model")
    with pytest.raises(TypeError, match="already a LlamaIndex LLM"):
        FragRelLLM(model=MockLLM())
    with pytest.raises(TypeError, match="as_chat_model"):
        FragRelLLM(model=FragRelChatModel(model=ScriptedChatModel(["x"])))  # a LangChain model: convert it first


def test_model_returning_non_text_raises():
    class Wrong:
        def invoke(self, messages: Any, **kwargs: Any) -> Any:
            return {"text": "x"}

    with pytest.raises(TypeError, match="not str"):
        FragRelChatModel(model=Wrong()).invoke("hi")
    with pytest.raises(TypeError, match="not str"):
        FragRelLLM(model=Wrong()).complete("hi")


def test_no_tool_calling_names_what_to_use():
    chat = FragRelChatModel(model=ScriptedChatModel(["x"]))
    with pytest.raises(NotImplementedError, match=r"no tool calling.*ChatLlamaCpp.*ChatOpenAI"):
        chat.bind_tools([])
    with pytest.raises(NotImplementedError, match="no tool calling"):
        chat.invoke("hi", tools=[{"type": "function", "function": {"name": "f"}}])
    with pytest.raises(NotImplementedError, match="bind_tools"):
        chat.invoke("hi", functions=[{"name": "f"}])


def test_stream_yields_the_models_pieces_then_usage():
    chat = FragRelChatModel(model=ScriptedChatModel(["all at once"], cycle=True))
    chunks = list(chat.stream("hi"))
    assert [c.content for c in chunks] == ["all ", "at ", "once", ""]
    assert chunks[-1].chunk_position == "last" and chunks[-1].usage_metadata["output_tokens"] > 0
    assert all(c.usage_metadata is None for c in chunks[:-1])
    whole = chunks[0]
    for c in chunks[1:]:
        whole += c
    assert whole.content == "all at once" and whole.usage_metadata == chat.invoke("hi").usage_metadata


def test_stream_of_a_model_without_stream_is_one_chunk():
    chat = FragRelChatModel(model=SyncOnlyModel())
    chunks = list(chat.stream("hi"))
    assert [c.content for c in chunks] == ["sync reply"] and chunks[0].chunk_position == "last"


def test_token_counting_is_offline():
    chat = FragRelChatModel(model=ScriptedChatModel(["x"]))
    assert chat.get_num_tokens("internationalization") == 5  # the estimate, no GPT-2 download
    assert chat.get_num_tokens_from_messages([HumanMessage("hi")]) > 1


def test_wraps_cached_chat_model():
    fake = ScriptedChatModel(["first", "second"])
    chat = FragRelChatModel(model=CachedChatModel(fake, ":memory:"))
    assert [chat.invoke("hi").content, chat.invoke("hi").content] == ["first", "first"]
    assert len(fake.calls) == 1


async def test_async_uses_the_models_ainvoke():
    model = AsyncOnlyModel()
    chat = FragRelChatModel(model=model, max_tokens=7)
    assert (await chat.ainvoke([SystemMessage("s"), HumanMessage("q")], stop=["!"])).content == "async reply"
    assert [c.content async for c in chat.astream("q")] == ["async reply"]
    assert model.async_calls[0] == {
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}],
        "temperature": None,
        "max_tokens": 7,
        "stop": ["!"],
    }
    llm = FragRelLLM(model=model)
    assert (await llm.achat([LIChatMessage(role="user", content="q")])).message.content == "async reply"
    assert (await llm.acomplete("q")).text == "async reply"


async def test_async_without_ainvoke_runs_in_a_worker_thread():
    model = SyncOnlyModel()
    here = threading.get_ident()
    assert (await FragRelChatModel(model=model).ainvoke("q")).content == "sync reply"
    assert [c.content async for c in FragRelChatModel(model=model).astream("q")] == ["sync reply"]
    assert (await FragRelLLM(model=model).acomplete("q")).text == "sync reply"
    assert model.threads and here not in model.threads


def test_batch_keeps_input_order():
    chat = FragRelChatModel(model=ScriptedChatModel(_echo))
    assert [m.content for m in chat.batch(["x", "y", "z"])] == ["You said: x", "You said: y", "You said: z"]


def test_create_agent_without_tools_answers():
    from langchain.agents import create_agent

    fake = ScriptedChatModel(["Paris is the capital of France."])
    agent = create_agent(FragRelChatModel(model=fake, max_tokens=32), system_prompt="Answer briefly.")
    out = agent.invoke({"messages": [{"role": "user", "content": "Capital of France?"}]})
    assert out["messages"][-1].content == "Paris is the capital of France."
    assert fake.calls[0]["messages"] == [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Capital of France?"},
    ]


def test_create_agent_with_tools_on_a_model_without_tool_calling_says_what_to_use():
    from langchain.agents import create_agent
    from langchain_core.tools import tool

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    agent = create_agent(FragRelChatModel(model=ScriptedChatModel(["x"])), tools=[add])
    with pytest.raises(NotImplementedError, match="langchain-openai"):
        agent.invoke({"messages": [{"role": "user", "content": "2+2?"}]})


# ------------------------------------------------------------------------------------ LlamaIndex
def test_llama_index_message_conversion():
    msgs = [
        LIChatMessage(role=MessageRole.SYSTEM, content="Be brief."),
        LIChatMessage(role=MessageRole.USER, content="hello"),
        LIChatMessage(
            role=MessageRole.ASSISTANT,
            blocks=[TextBlock(text="checking"), ToolCallBlock(tool_name="lookup", tool_kwargs={"q": "x"})],
        ),
        LIChatMessage(role=MessageRole.TOOL, content="42", additional_kwargs={"tool_call_id": "c1"}),
        LIChatMessage(role=MessageRole.CHATBOT, content="it is 42"),
    ]
    assert li_role_messages(msgs) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": 'checking\n[tool call lookup({"q": "x"})]'},
        {"role": "user", "content": "Tool result (c1): 42"},
        {"role": "assistant", "content": "it is 42"},
    ]
    image = LIChatMessage(role="user", blocks=[TextBlock(text="what?"), ImageBlock(url="https://example.com/a.png")])
    with pytest.raises(ValueError, match="reads text only"):
        li_role_messages([image])


def test_llama_index_metadata_and_params():
    fake = ScriptedChatModel(["one two three. four"], cycle=True, context_window=2048)
    llm = FragRelLLM(model=fake, max_tokens=2, stop=".", temperature=0.5)
    meta = llm.metadata
    assert (meta.context_window, meta.num_output, meta.is_chat_model, meta.model_name) == (2048, 2, True, "scripted")
    assert not meta.is_function_calling_model
    assert FragRelLLM(model=ScriptedChatModel(["x"]), context_window=512).metadata.context_window == 512
    assert FragRelLLM(model=ScriptedChatModel(["x"])).metadata.context_window == 3900  # LlamaIndex's default
    assert llm.complete("count").text == "one two"
    assert fake.calls[-1] | {"messages": None} == {"messages": None, "temperature": 0.5, "max_tokens": 2, "stop": ["."]}
    assert llm.chat([LIChatMessage(role="user", content="count")], max_tokens=9, stop=["four"]).message.content == (
        "one two three. "
    )
    assert fake.calls[-1]["max_tokens"] == 9 and fake.calls[-1]["stop"] == ["four"]
    assert [r.delta for r in llm.stream_complete("count")] == ["one ", "two"]
    assert [r.text for r in llm.stream_complete("count")] == ["one ", "one two"]
    streamed = list(llm.stream_chat([LIChatMessage(role="user", content="c")]))
    assert [r.delta for r in streamed] == ["one ", "two"] and streamed[-1].message.content == "one two"
    with pytest.raises(ValueError, match="context_window"):
        FragRelLLM(model=fake, context_window=0)


def test_llama_index_simple_chat_engine_with_fake():
    fake = ScriptedChatModel(["Hi Ann.", "Your name is Ann."])
    engine = SimpleChatEngine.from_defaults(llm=FragRelLLM(model=fake), system_prompt="Be brief.")
    assert engine.chat("Hello, I am Ann.").response == "Hi Ann."
    assert engine.chat("What is my name?").response == "Your name is Ann."
    assert fake.calls[1]["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello, I am Ann."},
        {"role": "assistant", "content": "Hi Ann."},
        {"role": "user", "content": "What is my name?"},
    ]


async def test_llama_index_simple_chat_engine_async_and_streaming():
    engine = SimpleChatEngine.from_defaults(llm=FragRelLLM(model=ScriptedChatModel(_echo)))
    assert (await engine.achat("one")).response == "You said: one"
    streamed = engine.stream_chat("two")
    assert "".join(streamed.response_gen) == "You said: two"
    astreamed = await engine.astream_chat("three")
    assert "".join([t async for t in astreamed.async_response_gen()]) == "You said: three"


# ------------------------------------------------------------------------------------ real embedded model
@pytest.mark.slow
def test_llama_index_simple_chat_engine_with_embedded_model():
    llm = FragRelLLM(model=get_embedded(), max_tokens=16, temperature=0)
    assert llm.metadata.context_window == get_embedded().context_window
    engine = SimpleChatEngine.from_defaults(llm=llm, system_prompt="Answer in one short sentence.")
    first = engine.chat("What is the capital of France?").response
    assert isinstance(first, str) and first.strip()
    assert engine.chat("And of Italy?").response.strip()
    assert len(engine.chat_history) == 4


@pytest.mark.slow
def test_create_agent_with_embedded_model():
    from langchain.agents import create_agent

    agent = create_agent(FragRelChatModel(model=get_embedded(), max_tokens=16, temperature=0))
    out = agent.invoke({"messages": [{"role": "user", "content": "What is the capital of France?"}]})
    assert isinstance(out["messages"][-1], AIMessage) and out["messages"][-1].content.strip()
