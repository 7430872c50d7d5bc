"""SCM as a block of LlamaIndex's current ``Memory`` (``SCMMemoryBlock``): turns flushed out of the short-term queue
go into the SCM stream of the Memory's session, ``memory.get(input=...)`` brings back the activated turns, and the
block works inside a real ``Memory`` used by a chat engine and a ``FunctionAgent`` (sync and async)."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms.mock import MockFunctionCallingLLMWithChatMemoryOfLastCall, MockLLMWithChatMemoryOfLastCall
from llama_index.core.memory import BaseMemoryBlock, Memory, StaticMemoryBlock
from llama_index.core.storage.chat_store.sql import MessageStatus
from test_scm_frameworks import controller

from fragrel_integrations.core.scm import SelfControlledMemory
from fragrel_integrations.llama_index import SCMMemory, SCMMemoryBlock
from fragrel_integrations.testing import HashingEmbedder

FACT = "My cat is called Miso and she is nine years old."
FILLER = [
    "I am planning a trip to Porto next spring.",
    "The weather today is grey and rainy.",
    "I started reading a book about Roman history.",
    "My sister moved to Berlin for a new job.",
    "I bought a new bicycle with a blue frame.",
    "We cooked lentil soup for dinner yesterday.",
    "The train to work was late again this morning.",
    "I am learning to play the piano slowly.",
    "Our team finished the quarterly report on Friday.",
    "I watered the tomatoes on the balcony.",
    "The museum downtown has a new photography show.",
    "I need to renew my passport before summer.",
]
QUESTION = "How old is my cat Miso?"


def _turns() -> list[str]:
    return [FACT, *FILLER]  # 13 turns before the question, the 14th


def block(**kwargs) -> SCMMemoryBlock:
    return SCMMemoryBlock(llm=controller(), embedder=HashingEmbedder(dim=256), k=3, **kwargs)


def test_block_is_a_memory_block_and_validates():
    b = block()
    assert isinstance(b, BaseMemoryBlock) and b.name == "scm_memory" and b.priority == 0
    assert b.accept_short_term_memory is True
    with pytest.raises(ValueError, match="llm is required"):
        SCMMemoryBlock()
    with pytest.raises(TypeError, match="name must be a non-empty str"):
        block(name="")
    with pytest.raises(TypeError, match="priority must be an int >= 0"):
        block(priority=-1)
    core = SelfControlledMemory(controller(), embedder=HashingEmbedder(dim=8))
    assert SCMMemoryBlock(core).core is core
    with pytest.raises(ValueError, match="not both"):
        SCMMemoryBlock(core, llm=controller())
    with pytest.raises(ValueError, match="keyed by the Memory's session_id"):  # outside a Memory, no session
        asyncio.run(b.aget([ChatMessage(role="user", content="hi")]))


def test_fact_planted_in_turn_one_is_recalled_at_turn_fourteen():
    scm = block()
    memory = Memory.from_defaults(session_id="ana", memory_blocks=[scm], token_limit=120, chat_history_token_ratio=0.5)
    for i, text in enumerate(_turns()):
        memory.put(ChatMessage(role="user", content=text))
        memory.put(ChatMessage(role="assistant", content=f"Noted, point {i}."))
    stored = scm.core.history("ana")
    assert stored and stored[0].observation == FACT and stored[0].response == "Noted, point 0."
    active = asyncio.run(memory.sql_store.get_messages("ana", status=MessageStatus.ACTIVE))
    # the fact left the short-term queue: only SCM can bring it back
    assert active and FACT not in [m.content for m in active]
    messages = memory.get(input=QUESTION)
    assert messages[0].role == MessageRole.SYSTEM
    system = messages[0].content
    assert len(stored) > 3  # the fact is not the flash memory: the activated-memory search found it
    assert "<scm_memory>" in system and f"[turn 0] User: {FACT}" in system
    assert not any(m.content and FACT in m.content for m in messages[1:])
    # another session of the same stream sees nothing of ana's
    other = Memory.from_defaults(session_id="bo", memory_blocks=[scm], token_limit=120)
    assert all(FACT not in (m.content or "") for m in other.get(input=QUESTION))


def test_block_beside_other_blocks_and_async_flush_keeps_turns_whole():
    scm = block()
    static = StaticMemoryBlock(name="core_info", static_content="The user's name is Ana.")
    memory = Memory.from_defaults(session_id="s", memory_blocks=[static, scm], token_limit=60)

    async def run():
        await memory.aput_messages(
            [
                ChatMessage(role="user", content=FACT),
                ChatMessage(role="assistant", content="", additional_kwargs={"tool_calls": [{"id": "1"}]}),
                ChatMessage(role="tool", content="saved", additional_kwargs={"tool_call_id": "1"}),
                ChatMessage(role="assistant", content="I will remember Miso."),
                *[ChatMessage(role=r, content=t) for t in FILLER[:4] for r in ("user", "assistant")],
            ]
        )
        return await memory.aget(input=QUESTION)

    messages = asyncio.run(run())
    stored = scm.core.history("s")
    assert (stored[0].observation, stored[0].response) == (FACT, "I will remember Miso.")  # tool steps not stored
    assert "The user's name is Ana." in messages[0].content and f"User: {FACT}" in messages[0].content


def test_unanswered_user_message_waits_for_its_reply_across_flushes():
    scm = block()

    async def run():
        await scm.aput([ChatMessage(role="user", content=FACT)], session_id="p")
        assert scm.core.history("p") == []
        await scm.aput([ChatMessage(role="assistant", content="Nice.")], session_id="p")

    asyncio.run(run())
    assert [(i.observation, i.response) for i in scm.core.history("p")] == [(FACT, "Nice.")]


def test_read_only_block_does_not_take_flushed_turns():
    core = SelfControlledMemory(controller(), embedder=HashingEmbedder(dim=64))
    core.record(FACT, "Noted.", session_id="r")
    scm = SCMMemoryBlock(core, accept_short_term_memory=False)
    memory = Memory.from_defaults(session_id="r", memory_blocks=[scm], token_limit=40)
    for text in FILLER[:4]:
        memory.put_messages([ChatMessage(role="user", content=text), ChatMessage(role="assistant", content="Ok.")])
    assert len(core.history("r")) == 1
    assert FACT in memory.get(input=QUESTION)[0].content


def test_chat_engine_with_memory_and_scm_block():
    scm = block()
    memory = Memory.from_defaults(session_id="chat", memory_blocks=[scm], token_limit=120, chat_history_token_ratio=0.5)
    llm = MockLLMWithChatMemoryOfLastCall()
    engine = SimpleChatEngine.from_defaults(llm=llm, memory=memory)
    for text in _turns():
        engine.chat(text)
    engine.chat(QUESTION)
    sent = llm.last_chat_messages
    assert sent[0].role == MessageRole.SYSTEM and f"User: {FACT}" in sent[0].content
    assert sent[-1].content == QUESTION
    assert scm.core.history("chat")[0].observation == FACT


# LlamaIndex's workflow agents inspect pydantic objects and warn, with their own default memory too.
@pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince20")
@pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211")
def test_function_agent_with_memory_and_scm_block():
    scm = block()
    memory = Memory.from_defaults(
        session_id="agent", memory_blocks=[scm], token_limit=120, chat_history_token_ratio=0.5
    )
    llm = MockFunctionCallingLLMWithChatMemoryOfLastCall()
    agent = FunctionAgent(llm=llm, tools=[], system_prompt="Be kind.")

    async def run():
        for text in [*_turns(), QUESTION]:
            await agent.run(user_msg=text, memory=memory)

    asyncio.run(run())
    sent = llm.last_chat_messages
    assert any(m.role == MessageRole.SYSTEM and f"User: {FACT}" in (m.content or "") for m in sent)
    assert sent[-1].content == QUESTION
    assert scm.core.history("agent")[0].observation == FACT


def test_same_stream_file_serves_the_block_and_scm_memory(tmp_path):
    path = tmp_path / "scm.sqlite"
    scm = SCMMemoryBlock(llm=controller(), path=path, embedder=HashingEmbedder(dim=64))
    asyncio.run(
        scm.aput(
            [ChatMessage(role="user", content=FACT), ChatMessage(role="assistant", content="Noted.")], session_id="f"
        )
    )
    scm.core.stream.close()
    legacy = SCMMemory(llm=controller(), path=path, embedder=HashingEmbedder(dim=64), session_id="f")
    assert [m.content for m in legacy.get_all()] == [FACT, "Noted."]


@pytest.mark.slow
def test_real_embedder_recalls_the_planted_fact_by_meaning(real_embedder):
    """The embedded MiniLM, and the question worded differently from the fact (age / pet, not old / cat)."""
    scm = SCMMemoryBlock(llm=controller(), embedder=real_embedder, k=2)
    memory = Memory.from_defaults(session_id="m", memory_blocks=[scm], token_limit=120, chat_history_token_ratio=0.5)
    for i, text in enumerate(_turns()):
        memory.put_messages([ChatMessage(role="user", content=text), ChatMessage(role="assistant", content=f"Ok {i}.")])
    system = memory.get(input="What age is my pet Miso?")[0].content
    assert len(scm.core.history("m")) > 3 and f"[turn 0] User: {FACT}" in system
