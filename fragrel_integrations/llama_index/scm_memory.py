"""SCM memory as a LlamaIndex ``BaseMemory``: usable by ``SimpleChatEngine``, ``CondensePlusContextChatEngine``
and agents wherever they accept a ``memory=``.

It converts ``ChatMessage`` objects and delegates to :class:`~fragrel_integrations.adapters.chat_turns.SessionTurns`:
the assistant's final reply closes the turn a user message opened and stores it (see
:class:`~fragrel_integrations.adapters.chat_turns.OpenTurn`); ``get(input=...)`` returns the memory block for ``input``
(or the open turn) as a system message, then the open turn's messages - nothing else of the transcript.

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

from .._validation import check_text, check_type
from ..adapters.chat_turns import (
    OpenTurn,
    SessionTurns,
    build_path_memory,
    check_optional_session,
    is_final_reply,
    memory_session,
)
from ..core.scm import DEFAULT_SESSION, SCMContext, SelfControlledMemory
from ..models.embedder import Embedder

__all__ = ["SCMMemory"]


def turn_message(message: ChatMessage) -> tuple[str, str, bool]:
    """``(role, text, final)`` of a LlamaIndex message for :mod:`fragrel_integrations.adapters.chat_turns`: ``final``
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

    _turns: SessionTurns[ChatMessage] = PrivateAttr()

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
        turns: SessionTurns[ChatMessage] = SessionTurns(
            build_path_memory(memory, llm=llm, path=path, embedder=embedder, **memory_kwargs)
        )
        super().__init__(session_id=memory_session(session_id, shared, "SCMMemory"))
        self._turns = turns

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
        return self._turns.memory

    def _messages(self, context: SCMContext | None) -> list[ChatMessage]:
        prompt = self.core.memory_prompt(context) if context is not None else ""
        system = [ChatMessage(role=MessageRole.SYSTEM, content=prompt)] if prompt else []
        return [*system, *self._turns.open.originals()]

    def _message(self, message: ChatMessage) -> tuple[str, str, bool, ChatMessage]:
        check_type(message, ChatMessage, "message must be a llama_index ChatMessage")
        return (*turn_message(message), message)

    # ------------------------------------------------------------------------------------------- BaseMemory

    def get(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        """The memory system message for ``input`` (or the open turn), then the open turn's messages."""
        return self._messages(self._turns.context(self.session_id, input))

    async def aget(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        return self._messages(await self._turns.acontext(self.session_id, input))

    def get_all(self) -> list[ChatMessage]:
        """The session's stored interactions as user/assistant messages, then the open turn."""
        out: list[ChatMessage] = []
        for item in self.core.history(self.session_id):
            out.append(ChatMessage(role=MessageRole.USER, content=item.observation))
            out.append(ChatMessage(role=MessageRole.ASSISTANT, content=item.response))
        return [*out, *self._turns.open.originals()]

    async def aget_all(self) -> list[ChatMessage]:
        return self.get_all()

    def put(self, message: ChatMessage) -> None:
        """Add a message; the assistant's final reply writes the finished interaction to the stream."""
        self._turns.add(self.session_id, *self._message(message))

    async def aput(self, message: ChatMessage) -> None:
        await self._turns.aadd(self.session_id, *self._message(message))

    async def aput_messages(self, messages: list[ChatMessage]) -> None:
        for message in messages:
            await self.aput(message)

    def _plan(self, messages: Iterable[ChatMessage]) -> tuple[list[tuple[str, str]], OpenTurn[ChatMessage]]:
        """The :meth:`SessionTurns.plan` of ``messages``, checked before anything is deleted: a message that is not
        a ChatMessage (TypeError) or text a stream cannot store (ValueError) names its position."""
        if isinstance(messages, str | bytes | ChatMessage) or not isinstance(messages, Iterable):
            raise TypeError(f"messages must be a list of llama_index ChatMessage, got {type(messages).__name__}")
        converted = []
        for i, message in enumerate(messages):
            check_type(message, ChatMessage, f"messages[{i}] must be a llama_index ChatMessage")
            converted.append((*turn_message(message), message))
            check_text(converted[-1][1], f"messages[{i}]'s text")
        return SessionTurns.plan(converted)

    def set(self, messages: list[ChatMessage]) -> None:
        """Replace the session's stream with ``messages`` (each user/assistant pair becomes an interaction).
        Every message is checked first: a bad one raises and leaves the stored turns as they were."""
        self._turns.replace(self.session_id, self._plan(messages))

    async def aset(self, messages: list[ChatMessage]) -> None:
        await self._turns.areplace(self.session_id, self._plan(messages))

    def reset(self) -> None:
        """Forget the session: its stored interactions and the open turn."""
        self._turns.reset(self.session_id)

    async def areset(self) -> None:
        self.reset()
