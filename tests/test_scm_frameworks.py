"""SCM memory in the frameworks: ``SCMMiddleware`` in ``langchain.agents.create_agent`` agents and ``SCMMemory``
in LlamaIndex chat engines and agents, end to end with fake models; one slow test with the embedded LLM."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

pytest.importorskip("langchain")
pytest.importorskip("llama_index.core")

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.chat_engine import CondensePlusContextChatEngine, SimpleChatEngine
from llama_index.core.llms.mock import (
    MockFunctionCallingLLMWithChatMemoryOfLastCall,
    MockLLM,
    MockLLMWithChatMemoryOfLastCall,
)
from llama_index.core.memory import BaseMemory
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, TextNode
from pydantic import Field

from fragrel_integrations.core.relations import ContextRelation
from fragrel_integrations.core.scm import SelfControlledMemory
from fragrel_integrations.langchain import scm_middleware
from fragrel_integrations.langchain.scm_middleware import SCMMiddleware
from fragrel_integrations.llama_index import scm_memory
from fragrel_integrations.llama_index.scm_memory import SCMMemory
from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel

TURNS = ["My cat is called Miso.", "I live in Lisbon.", "What is my cat called?"]


def controller() -> ScriptedChatModel:
    """Says yes to every yes/no question; every summary is the first words of the user line."""

    def respond(messages):
        text = messages[-1]["content"]
        if "yes or no" in text:
            return "Yes."
        user = next((line for line in text.splitlines() if line.startswith("User: ")), "User: ?")
        return "Summary: " + user[6:]

    return ScriptedChatModel(respond)


class RecordingChatModel(GenericFakeChatModel):
    """GenericFakeChatModel that records the messages of every call and accepts tools."""

    seen: list = Field(default_factory=list)

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.seen.append(list(messages))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)

    def bind_tools(self, tools, **kwargs):
        return self


def recording(*replies: Any) -> RecordingChatModel:
    return RecordingChatModel(
        messages=iter([r if isinstance(r, AIMessage) else AIMessage(r) for r in replies]), seen=[]
    )


def test_public_names():
    assert scm_middleware.__all__ == ["SCMMiddleware", "SCMState"]
    assert scm_memory.__all__ == ["SCMMemory"]


# ------------------------------------------------------------------------------------------ LangChain


def test_langchain_agent_end_to_end_with_checkpointer():
    middleware = SCMMiddleware(model=controller(), embedder=HashingEmbedder(dim=128))
    model = recording("Nice name.", "Lovely city.", "Your cat is Miso.")
    agent = create_agent(model, system_prompt="Be kind.", middleware=[middleware], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t1"}}
    for text in TURNS:
        out = agent.invoke({"messages": [{"role": "user", "content": text}]}, config)
    assert out["messages"][-1].content == "Your cat is Miso."
    assert "scm_memory" not in out  # private state stays private
    last = model.seen[-1]
    assert [type(m) for m in last] == [SystemMessage, HumanMessage]  # SCM replaces the replayed transcript
    system = last[0].content
    assert system.startswith("Be kind.\n\n")
    assert "[turn 0] User: My cat is called Miso.\nAssistant: Nice name." in system  # activated memory
    assert "Previous turn:\nUser: I live in Lisbon.\nAssistant: Lovely city." in system  # flash memory
    assert last[1].content == "What is my cat called?"
    items = middleware.memory.history("t1")  # the session id is the thread id
    assert [(i.observation, i.response) for i in items] == list(
        zip(TURNS, ["Nice name.", "Lovely city.", "Your cat is Miso."], strict=True)
    )
    assert items[0].summary == "My cat is called Miso." and items[0].embedding.shape == (128,)


def test_langchain_keep_history_and_first_turn():
    middleware = SCMMiddleware(model=controller(), embedder=HashingEmbedder(dim=64), keep_history=True)
    model = recording("A.", "B.")
    agent = create_agent(model, middleware=[middleware], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    agent.invoke({"messages": [{"role": "user", "content": "Hi"}]}, config)
    assert [type(m) for m in model.seen[0]] == [HumanMessage]  # first turn: nothing to remember, no system message
    agent.invoke({"messages": [{"role": "user", "content": "Again"}]}, config)
    assert [type(m) for m in model.seen[1]] == [SystemMessage, HumanMessage, AIMessage, HumanMessage]
    assert "Previous turn:\nUser: Hi\nAssistant: A." in model.seen[1][0].content


def test_langchain_tool_loop_gets_memory_on_every_call_and_stores_the_final_reply():
    @tool
    def lookup(name: str) -> str:
        """Look up a pet's species."""
        return f"{name} is a cat."

    memory = SelfControlledMemory(controller(), embedder=HashingEmbedder(dim=64))
    memory.record("My pet is Miso.", "Noted.", session_id="ana")
    middleware = SCMMiddleware(memory, session_id="ana")
    call = AIMessage("", tool_calls=[{"name": "lookup", "args": {"name": "Miso"}, "id": "c1", "type": "tool_call"}])
    model = recording(call, "Miso is a cat.")
    agent = create_agent(model, tools=[lookup], middleware=[middleware])
    out = agent.invoke({"messages": [{"role": "user", "content": "What is Miso?"}]})
    assert out["messages"][-1].content == "Miso is a cat."
    assert len(model.seen) == 2
    for seen in model.seen:
        assert isinstance(seen[0], SystemMessage) and "User: My pet is Miso." in seen[0].content
    assert [type(m) for m in model.seen[1][1:]] == [HumanMessage, AIMessage, ToolMessage]
    assert [(i.observation, i.response) for i in memory.history("ana")][-1] == ("What is Miso?", "Miso is a cat.")


def test_langchain_sessions_from_context_are_isolated_and_async_works():
    middleware = SCMMiddleware(model=controller(), embedder=HashingEmbedder(dim=64))
    model = recording("Hi Ana.", "Hi Bo.", "Ana again.", "Bo again.")
    agent = create_agent(model, middleware=[middleware], context_schema=dict)

    async def run():
        await agent.ainvoke({"messages": [{"role": "user", "content": "I am Ana."}]}, context={"session_id": "ana"})
        await agent.ainvoke({"messages": [{"role": "user", "content": "I am Bo."}]}, context={"session_id": "bo"})
        await agent.ainvoke({"messages": [{"role": "user", "content": "Who am I?"}]}, context={"session_id": "ana"})
        await agent.ainvoke({"messages": [{"role": "user", "content": "Who am I?"}]}, context={"session_id": "bo"})

    asyncio.run(run())
    ana_system, bo_system = model.seen[2][0].content, model.seen[3][0].content
    assert "I am Ana." in ana_system and "I am Bo." not in ana_system
    assert "I am Bo." in bo_system and "I am Ana." not in bo_system
    assert [i.response for i in middleware.memory.history("ana")] == ["Hi Ana.", "Ana again."]
    assert [i.response for i in middleware.memory.history("bo")] == ["Hi Bo.", "Bo again."]


def test_langchain_chat_model_as_controller_and_persistence(tmp_path):
    path = tmp_path / "scm.sqlite"
    lc_controller = GenericFakeChatModel(messages=itertools.cycle([AIMessage("yes")]))
    first = SCMMiddleware(model=lc_controller, path=path, embedder=HashingEmbedder(dim=64), session_id="s")
    create_agent(recording("Noted."), middleware=[first]).invoke(
        {"messages": [{"role": "user", "content": "Remember 42."}]}
    )
    first.memory.stream.close()
    second = SCMMiddleware(model=controller(), path=path, embedder=HashingEmbedder(dim=64), session_id="s")
    model = recording("It was 42.")
    create_agent(model, middleware=[second]).invoke({"messages": [{"role": "user", "content": "What number?"}]})
    assert "User: Remember 42.\nAssistant: Noted." in model.seen[0][0].content
    assert second.memory.history("s")[0].summary == "yes"  # the LangChain controller's summary
    # the same file serves LlamaIndex
    memory = SCMMemory(llm=controller(), path=path, embedder=HashingEmbedder(dim=64), session_id="s")
    assert [m.content for m in memory.get_all()] == ["Remember 42.", "Noted.", "What number?", "It was 42."]


def test_langchain_validation():
    with pytest.raises(ValueError, match="model is required"):
        SCMMiddleware()
    with pytest.raises(TypeError, match="SelfControlledMemory"):
        SCMMiddleware(memory="x")  # type: ignore[arg-type]
    core = SelfControlledMemory(controller(), embedder=HashingEmbedder(dim=8))
    with pytest.raises(ValueError, match="not both"):
        SCMMiddleware(core, model=controller())
    with pytest.raises(TypeError, match="keep_history"):
        SCMMiddleware(core, keep_history="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cannot tell whose conversation"):  # no shared fallback session
        SCMMiddleware(core).resolve_session(None)


# ------------------------------------------------------------------------------------------ LlamaIndex


def test_llama_index_simple_chat_engine():
    memory = SCMMemory(llm=controller(), embedder=HashingEmbedder(dim=64), session_id="ana")
    assert isinstance(memory, BaseMemory)
    llm = MockLLMWithChatMemoryOfLastCall()
    engine = SimpleChatEngine.from_defaults(llm=llm, memory=memory)
    for text in TURNS:
        engine.chat(text)
    sent = llm.last_chat_messages
    assert [m.role for m in sent] == [MessageRole.SYSTEM, MessageRole.USER]
    assert "[turn 0] User: My cat is called Miso." in sent[0].content
    assert "Previous turn:\nUser: I live in Lisbon." in sent[0].content
    assert sent[1].content == "What is my cat called?"
    assert [i.observation for i in memory.core.history("ana")] == TURNS


def test_llama_index_condense_plus_context_engine():
    class Fixed(BaseRetriever):
        def _retrieve(self, query_bundle):
            return [NodeWithScore(node=TextNode(text="Cats sleep a lot."), score=1.0)]

    memory = SCMMemory(
        llm=controller(), embedder=HashingEmbedder(dim=64), session_id="c", relation=ContextRelation(0.8)
    )
    engine = CondensePlusContextChatEngine.from_defaults(Fixed(), llm=MockLLM(), memory=memory)
    responses = [str(engine.chat(text)) for text in TURNS]
    assert "Notes from your memory" not in responses[0]  # first turn: nothing to remember
    assert "[turn 0] User: My cat is called Miso." in responses[2]  # MockLLM echoes its prompt
    assert "Previous turn:\nUser: I live in Lisbon." in responses[2]
    assert [i.observation for i in memory.core.history("c")] == TURNS


# LlamaIndex's workflow agents inspect pydantic objects and warn, with their own default memory too.
@pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince20")
@pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211")
def test_llama_index_async_chat_and_function_agent():
    memory = SCMMemory(llm=controller(), embedder=HashingEmbedder(dim=64), session_id="agent")
    llm = MockFunctionCallingLLMWithChatMemoryOfLastCall()
    agent = FunctionAgent(llm=llm, tools=[], system_prompt="Be kind.")

    async def run():
        for text in TURNS:
            await agent.run(user_msg=text, memory=memory)

    asyncio.run(run())
    roles = [m.role for m in llm.last_chat_messages]
    assert roles == [MessageRole.SYSTEM, MessageRole.SYSTEM, MessageRole.USER]
    assert "[turn 0] User: My cat is called Miso." in llm.last_chat_messages[1].content
    assert [i.observation for i in memory.core.history("agent")] == TURNS

    chat_memory = SCMMemory(llm=controller(), embedder=HashingEmbedder(dim=64))
    engine = SimpleChatEngine.from_defaults(llm=MockLLM(), memory=chat_memory)

    async def chat():
        for text in TURNS[:2]:
            await engine.achat(text)

    asyncio.run(chat())
    assert [i.observation for i in chat_memory.core.history()] == TURNS[:2]


def test_llama_index_sessions_set_reset_and_from_defaults(tmp_path):
    core = SelfControlledMemory(controller(), stream=tmp_path / "s.sqlite", embedder=HashingEmbedder(dim=64))
    ana, bo = SCMMemory(core, session_id="ana"), SCMMemory(core, session_id="bo")
    ana.put_messages([ChatMessage(role="user", content="I am Ana."), ChatMessage(role="assistant", content="Hi Ana.")])
    bo.set([ChatMessage(role="user", content="I am Bo."), ChatMessage(role="assistant", content="Hi Bo.")])
    assert "I am Ana." in ana.get(input="Who am I?")[0].content and "Bo" not in ana.get(input="Who am I?")[0].content
    assert "I am Bo." in bo.get(input="Who am I?")[0].content and "Ana" not in bo.get(input="Who am I?")[0].content
    # an open turn: the user message and a tool-call message stay until the final reply
    ana.put(ChatMessage(role="user", content="Check my calendar."))
    ana.put(ChatMessage(role="assistant", content="", additional_kwargs={"tool_calls": [{"id": "1"}]}))
    ana.put(ChatMessage(role="tool", content="Free all day."))
    got = ana.get()
    assert [m.role for m in got] == [MessageRole.SYSTEM, MessageRole.USER, MessageRole.ASSISTANT, MessageRole.TOOL]
    ana.put(ChatMessage(role="assistant", content="You are free."))
    assert [(i.observation, i.response) for i in core.history("ana")][-1] == ("Check my calendar.", "You are free.")
    assert ana.get() == []  # no open turn, no input: nothing to recall for
    ana.reset()
    assert core.history("ana") == [] and len(core.history("bo")) == 1
    history = [ChatMessage(role="user", content="Hello"), ChatMessage(role="assistant", content="Hi!")]
    fresh = SCMMemory.from_defaults(chat_history=history, llm=controller(), embedder=HashingEmbedder(dim=8))
    assert [m.content for m in fresh.get_all()] == ["Hello", "Hi!"]


def test_llama_index_validation(tmp_path):
    with pytest.raises(ValueError, match="llm is required"):
        SCMMemory()
    with pytest.raises(TypeError, match="session_id"):
        SCMMemory(llm=controller(), session_id="")
    core = SelfControlledMemory(controller(), embedder=HashingEmbedder(dim=8))
    with pytest.raises(ValueError, match="not both"):
        SCMMemory(core, llm=controller())
    with pytest.raises(TypeError, match="ChatMessage"):
        SCMMemory(core, session_id="s").put("hello")  # type: ignore[arg-type]
    # a shared stream (a file, a core memory) never falls back to one session for every user
    with pytest.raises(ValueError, match="session_id is required"):
        SCMMemory(core)
    with pytest.raises(ValueError, match="session_id is required"):
        SCMMemory(llm=controller(), path=tmp_path / "scm.sqlite")
    assert SCMMemory(llm=controller(), embedder=HashingEmbedder(dim=8)).session_id == "default"  # private stream


# ------------------------------------------------------------------------------------------ real models


@pytest.mark.slow
def test_real_embedded_llm_and_embedder(real_embedder, tmp_path):
    """SmolLM2 (llama.cpp) as controller and responder, all-MiniLM-L6-v2 embeddings: robust properties only."""
    from fragrel_integrations.core.scm import SCMController
    from fragrel_integrations.models.transformers_chat import TransformersChatModel

    model = TransformersChatModel(context_window=2048)
    try:
        core = SelfControlledMemory(
            SCMController(model, summary_max_tokens=48),
            stream=tmp_path / "real.sqlite",
            embedder=real_embedder,
            k=3,
            response_max_tokens=32,
        )
        memory = SCMMemory(core, session_id="real")
        engine = SimpleChatEngine.from_defaults(llm=MockLLM(), memory=memory)
        turns = ["My cat is called Miso.", "I live in Lisbon.", "I like lemon tart.", "What is my cat called?"]
        for text in turns[:3]:
            engine.chat(text)
        turn = core.chat(turns[3], session_id="real")
    finally:
        model.close()
    items = core.history("real")
    assert [i.observation for i in items] == turns and [i.index for i in items] == [0, 1, 2, 3]
    assert all(isinstance(i.summary, str) and i.summary.strip() for i in items)
    assert all(i.embedding is not None and i.embedding.shape == (384,) for i in items)
    assert isinstance(turn.response, str)
    assert turn.context.activation is not None and isinstance(turn.context.activation.value, bool)
    assert turn.context.flash.observation == "I like lemon tart."  # flash memory, whatever the controller said
    assert "Previous turn:\nUser: I like lemon tart." in turn.context.block
    recalled = [m.item.index for m in turn.context.memories]
    assert recalled == sorted(recalled) and 2 not in recalled and len(recalled) <= 2
    if turn.context.activation.value:
        assert recalled == [0, 1]  # k=3 > two candidates: both, in time order


@pytest.mark.parametrize(
    ("bad", "error", "match"),
    [
        ("hello", TypeError, "list of llama_index ChatMessage"),
        ([ChatMessage(role="user", content="New."), "not a message"], TypeError, r"messages\[1\] must be"),
        (
            [ChatMessage(role="user", content="ok"), ChatMessage(role="assistant", content="bad \ud800 reply")],
            ValueError,
            r"messages\[1\]'s text contains .* lone surrogate",
        ),
    ],
)
def test_llama_index_set_checks_every_message_before_it_deletes_anything(bad, error, match, tmp_path):
    core = SelfControlledMemory(controller(), stream=tmp_path / "s.sqlite", embedder=HashingEmbedder(dim=64))
    memory = SCMMemory(core, session_id="ana")
    memory.put_messages([ChatMessage(role="user", content="I am Ana."), ChatMessage(role="assistant", content="Hi.")])
    memory.put(ChatMessage(role="user", content="An open turn."))
    with pytest.raises(error, match=match):
        memory.set(bad)
    with pytest.raises(error, match=match):
        asyncio.run(memory.aset(bad))
    assert [(i.observation, i.response) for i in core.history("ana")] == [("I am Ana.", "Hi.")]  # nothing lost
    assert [m.content for m in memory.get_all()] == ["I am Ana.", "Hi.", "An open turn."]
    # a good replacement still replaces, and keeps the turn it leaves open
    memory.set([ChatMessage(role="user", content="I am Bo."), ChatMessage(role="assistant", content="Hi Bo."),
                ChatMessage(role="user", content="Still open.")])  # fmt: skip
    assert [(i.observation, i.response) for i in core.history("ana")] == [("I am Bo.", "Hi Bo.")]
    assert [m.content for m in memory.get_all()] == ["I am Bo.", "Hi Bo.", "Still open."]


@pytest.mark.parametrize("field", ["observation", "response", "summary"])
def test_a_lone_surrogate_in_a_langgraph_store_stream_is_refused_before_it_is_stored(field):
    from langgraph.store.memory import InMemoryStore

    from fragrel_integrations.langchain.scm_store import LangGraphStoreStream

    stream = LangGraphStoreStream(InMemoryStore())
    turn = {"observation": "ok", "response": "ok", "summary": "", field: "cut \ud83d text"}
    with pytest.raises(ValueError, match=f"{field} contains .* lone surrogate"):
        stream.append("ana", turn["observation"], turn["response"], summary=turn["summary"])
    assert stream.count("ana") == 0
