"""SCM memory as a LlamaIndex ``BaseMemory``: usable by ``SimpleChatEngine``, ``CondensePlusContextChatEngine``
and agents wherever they accept a ``memory=``.

It converts ``ChatMessage`` objects and delegates to the core
:class:`~fragrel_integrations.core.scm.SelfControlledMemory`: ``put`` of a user message opens a turn, ``put`` of
the assistant's final reply (text, no tool calls) closes it and stores the interaction (tool calls and results in
between are not stored; see :class:`~fragrel_integrations.core.scm.turns.OpenTurn`); ``get(input=...)`` returns a
system message with the memory block for ``input`` (or the open turn), then the open turn's messages - nothing
else of the transcript; ``get_all`` returns the session's stored stream as user/assistant messages.

>>> from llama_index.core.chat_engine import SimpleChatEngine
>>> from llama_index.core.llms import MockLLM
>>> from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel
>>> controller = ScriptedChatModel(lambda m: "yes" if "yes or no" in m[-1]["content"] else "A summary.")
>>> memory = SCMMemory(llm=controller, embedder=HashingEmbedder(dim=64), session_id="ana")
>>> engine = SimpleChatEngine.from_defaults(llm=MockLLM(), memory=memory)
>>> _ = engine.chat("My cat is called Miso.")
>>> [m.role.value for m in memory.get_all()], len(memory.core.history("ana"))
(['user', 'assistant'], 1)
>>> "My cat is called Miso." in memory.get(input="And my dog?")[0].content  # the flash memory
True
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.memory.types import BaseMemory

from .._validation import check_text
from ..core.scm import DEFAULT_SESSION, SCMContext, SelfControlledMemory
from ..core.scm.turns import OpenTurn, build_memory, check_optional_session, is_final_reply
from ..models.base import Embedder

__all__ = ["SCMMemory"]


def build_core(
    memory: SelfControlledMemory | None = None,
    *,
    llm: Any = None,
    path: str | Path = ":memory:",
    embedder: Embedder | Any | None = None,
    **memory_kwargs: Any,
) -> SelfControlledMemory:
    """The core memory of :class:`SCMMemory` and ``SCMMemoryBlock``: ``memory`` itself, or one built from ``llm``
    (the controller), ``path`` (the SQLite stream), ``embedder`` and other :class:`SelfControlledMemory` keywords."""
    streams = {"path": None if str(path) == ":memory:" else path}
    return build_memory(memory, model=llm, model_arg="llm", streams=streams, embedder=embedder, **memory_kwargs)


def turn_message(message: ChatMessage) -> tuple[str, str, bool]:
    """``(role, text, final)`` of a LlamaIndex message for :mod:`fragrel_integrations.core.scm.turns`: ``final``
    when it is the assistant's reply with text and no tool calls."""
    text = message.content if isinstance(message.content, str) else str(message.content or "")
    role = message.role.value if isinstance(message.role, MessageRole) else str(message.role)
    calls = bool((message.additional_kwargs or {}).get("tool_calls")) or any(
        type(b).__name__ == "ToolCallBlock" for b in getattr(message, "blocks", None) or []
    )
    return role, text, is_final_reply(role, text, calls)


class SCMMemory(BaseMemory):
    """Self-controlled long-term chat memory (SCM) for LlamaIndex chat engines and agents.

    Args:
        memory: a built core :class:`SelfControlledMemory`; or leave it out and pass ``llm`` (the controller),
            optionally ``path`` (SQLite file of the stream, default in memory), ``embedder`` and any other
            :class:`SelfControlledMemory` keyword (``k``, ``relation``, ``index`` - e.g.
            :class:`~fragrel_integrations.llama_index.scm_index.VectorStoreStreamIndex`).
        session_id: the conversation this memory reads and writes (a non-empty str). Required with a ``path``
            file or a shared ``memory=``; a private in-memory stream defaults to ``"default"``.
    """

    session_id: str = Field(default=DEFAULT_SESSION, description="The SCM session (conversation) id.")

    _core: SelfControlledMemory = PrivateAttr()
    _open: OpenTurn[ChatMessage] = PrivateAttr(default_factory=OpenTurn)
    _cached: tuple[tuple[str, str, int], SCMContext] | None = PrivateAttr(default=None)

    def __init__(
        self,
        memory: SelfControlledMemory | None = None,
        *,
        llm: Any = None,
        path: str | Path = ":memory:",
        embedder: Embedder | Any | None = None,
        session_id: str | None = None,
        **memory_kwargs: Any,
    ) -> None:
        check_optional_session(session_id)
        shared = memory is not None or str(path) != ":memory:"
        memory = build_core(memory, llm=llm, path=path, embedder=embedder, **memory_kwargs)
        if session_id is None:
            if shared:
                raise ValueError(
                    "session_id is required when the stream is shared (a path= file or a memory= object): pass "
                    "SCMMemory(..., session_id='<user or conversation id>'), one per user or conversation"
                )
            session_id = DEFAULT_SESSION  # a private in-memory stream: no one else can read this session
        super().__init__(session_id=session_id)
        self._core = memory

    @classmethod
    def class_name(cls) -> str:
        return "SCMMemory"

    @classmethod
    def from_defaults(cls, chat_history: list[ChatMessage] | None = None, llm: Any = None, **kwargs: Any) -> SCMMemory:
        """Build a memory (``llm`` is the controller); ``chat_history`` is written into the stream."""
        memory = cls(llm=llm, **kwargs)
        if chat_history:
            memory.put_messages(chat_history)
        return memory

    @property
    def core(self) -> SelfControlledMemory:
        """The core SCM memory every call delegates to."""
        return self._core

    # ------------------------------------------------------------------------------------------- conversion

    def _observation(self, input: str | None) -> str | None:
        if input is not None:
            if not isinstance(input, str):
                raise TypeError(f"input must be str or None, got {type(input).__name__}")
            return input
        return self._open.observation()

    def _key(self, observation: str) -> tuple[str, str, int]:
        return (self.session_id, observation, self._core.stream.count(self.session_id))

    def _messages(self, context: SCMContext | None) -> list[ChatMessage]:
        prompt = self._core.memory_prompt(context) if context is not None else ""
        system = [ChatMessage(role=MessageRole.SYSTEM, content=prompt)] if prompt else []
        return [*system, *self._open.originals()]

    def _close(self, message: ChatMessage) -> tuple[str, str] | None:
        """Add ``message`` to the open turn; return (observation, reply) when it completes the turn."""
        if not isinstance(message, ChatMessage):
            raise TypeError(f"message must be a llama_index ChatMessage, got {type(message).__name__}")
        return self._open.add(*turn_message(message), message)

    # ------------------------------------------------------------------------------------------- BaseMemory

    def get(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        """The memory system message for ``input`` (or the open turn), then the open turn's messages."""
        observation = self._observation(input)
        if observation is None:
            return self._messages(None)
        key = self._key(observation)
        if self._cached is None or self._cached[0] != key:
            self._cached = (key, self._core.prepare(observation, session_id=self.session_id))
        return self._messages(self._cached[1])

    async def aget(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        observation = self._observation(input)
        if observation is None:
            return self._messages(None)
        key = self._key(observation)
        if self._cached is None or self._cached[0] != key:
            self._cached = (key, await self._core.aprepare(observation, session_id=self.session_id))
        return self._messages(self._cached[1])

    def get_all(self) -> list[ChatMessage]:
        """The session's stored interactions as user/assistant messages, then the open turn."""
        out: list[ChatMessage] = []
        for item in self._core.history(self.session_id):
            out.append(ChatMessage(role=MessageRole.USER, content=item.observation))
            out.append(ChatMessage(role=MessageRole.ASSISTANT, content=item.response))
        return [*out, *self._open.originals()]

    async def aget_all(self) -> list[ChatMessage]:
        return self.get_all()

    def put(self, message: ChatMessage) -> None:
        """Add a message; the assistant's final reply writes the finished interaction to the stream."""
        done = self._close(message)
        if done is not None:
            self._core.record(done[0], done[1], session_id=self.session_id)

    async def aput(self, message: ChatMessage) -> None:
        done = self._close(message)
        if done is not None:
            await self._core.arecord(done[0], done[1], session_id=self.session_id)

    async def aput_messages(self, messages: list[ChatMessage]) -> None:
        for message in messages:
            await self.aput(message)

    def _replacement(self, messages: Iterable[ChatMessage]) -> tuple[list[tuple[str, str]], OpenTurn[ChatMessage]]:
        """The interactions ``messages`` form and the turn left open after them, worked out and checked before
        anything is deleted: a message that is not a ChatMessage (TypeError) or text a stream cannot store
        (ValueError) names its position, and the stored turns stay as they were."""
        if isinstance(messages, str | bytes | ChatMessage) or not isinstance(messages, Iterable):
            raise TypeError(f"messages must be a list of llama_index ChatMessage, got {type(messages).__name__}")
        messages = list(messages)
        for i, message in enumerate(messages):
            if not isinstance(message, ChatMessage):
                raise TypeError(f"messages[{i}] must be a llama_index ChatMessage, got {type(message).__name__}")
            check_text(turn_message(message)[1], f"messages[{i}]'s text")
        turn: OpenTurn[ChatMessage] = OpenTurn()
        return [done for m in messages if (done := turn.add(*turn_message(m), m)) is not None], turn

    def set(self, messages: list[ChatMessage]) -> None:
        """Replace the session's stream with ``messages`` (each user/assistant pair becomes an interaction).
        Every message is checked first: a bad one raises and leaves the stored turns as they were."""
        turns, left_open = self._replacement(messages)
        self.reset()
        for observation, reply in turns:
            self._core.record(observation, reply, session_id=self.session_id)
        self._open = left_open

    async def aset(self, messages: list[ChatMessage]) -> None:
        turns, left_open = self._replacement(messages)
        await self.areset()
        for observation, reply in turns:
            await self._core.arecord(observation, reply, session_id=self.session_id)
        self._open = left_open

    def reset(self) -> None:
        """Forget the session: its stored interactions and the open turn."""
        self._core.clear(self.session_id)
        self._open = OpenTurn()
        self._cached = None

    async def areset(self) -> None:
        self.reset()
