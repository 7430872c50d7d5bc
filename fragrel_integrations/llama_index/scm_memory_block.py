"""SCM as one block of LlamaIndex's ``Memory`` (``llama_index.core.memory.Memory``), beside a user's other blocks.

``Memory`` keeps the recent messages in its short-term queue and hands the messages it flushes to its blocks;
:class:`SCMMemoryBlock` delegates both directions to the core
:class:`~fragrel_integrations.core.scm.SelfControlledMemory`, keyed by the ``Memory``'s ``session_id``: ``aput``
stores each completed turn of the flushed messages (:func:`~fragrel_integrations.adapters.chat_turns.collect_turns`);
``aget`` runs SCM steps 1-4 for the last user message and returns the block's text
(:func:`~fragrel_integrations.adapters.chat_turns.queued_memory_text`), which ``Memory`` puts into the system message.

>>> from llama_index.core.memory import Memory
>>> from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel
>>> controller = ScriptedChatModel(lambda m: "yes" if "yes or no" in m[-1]["content"] else "A summary.")
>>> block = SCMMemoryBlock(llm=controller, embedder=HashingEmbedder(dim=64))
>>> memory = Memory.from_defaults(session_id="ana", memory_blocks=[block], token_limit=24)
>>> memory.put_messages([ChatMessage(role="user", content="My cat is called Miso."),
...                      ChatMessage(role="assistant", content="Nice name!"),
...                      ChatMessage(role="user", content="I live in Lisbon by the sea."),
...                      ChatMessage(role="assistant", content="Lovely city, lots of light.")])
>>> [item.observation for item in block.core.history("ana")]  # the first turn was flushed into SCM
['My cat is called Miso.']
>>> "My cat is called Miso." in memory.get(input="What is my cat called?")[0].content
True
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.memory import BaseMemoryBlock

from .._validation import check_type
from ..adapters.chat_turns import block_session, build_path_memory, collect_turns, queued_memory_text
from ..core.scm import SelfControlledMemory
from ..models.embedder import Embedder
from .scm_memory import turn_message

__all__ = ["SCMMemoryBlock"]


def _session(block_kwargs: dict[str, Any], messages: list[ChatMessage] | None) -> str:
    sessions = (m.additional_kwargs.get("session_id") for m in messages or [] if m.additional_kwargs)
    return block_session(block_kwargs.get("session_id"), sessions, "SCMMemoryBlock")


class SCMMemoryBlock(BaseMemoryBlock[str]):
    """Self-controlled long-term memory (SCM) as a ``BaseMemoryBlock`` (see the module docstring).

    Args:
        memory, llm, path, embedder, memory_kwargs: as for :class:`~fragrel_integrations.llama_index.SCMMemory`.
        name: the block's name in the ``Memory`` (its tag in the memory template); unique within one ``Memory``.
        priority: ``Memory``'s truncation priority (0, the default: never truncated; higher is truncated first).
        accept_short_term_memory: take the messages ``Memory`` flushes (False: a read-only view of a stream).
    """

    name: str = Field(default="scm_memory", description="The block's name within its Memory.")
    description: str | None = Field(
        default="Self-controlled long-term memory: earlier turns of this conversation recalled for the input.",
        description="A description of the memory block.",
    )

    _core: SelfControlledMemory = PrivateAttr()
    _pending: dict[str, list[str]] = PrivateAttr(default_factory=dict)

    def __init__(
        self,
        memory: SelfControlledMemory | None = None,
        *,
        llm: Any = None,
        path: str | Path = ":memory:",
        embedder: Embedder | Any | None = None,
        name: str = "scm_memory",
        priority: int = 0,
        accept_short_term_memory: bool = True,
        **memory_kwargs: Any,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"name must be a non-empty str, got {name!r}")
        if isinstance(priority, bool) or not isinstance(priority, int) or priority < 0:
            raise TypeError(f"priority must be an int >= 0 (0: never truncated), got {priority!r}")
        core = build_path_memory(memory, llm=llm, path=path, embedder=embedder, **memory_kwargs)
        super().__init__(name=name, priority=priority, accept_short_term_memory=accept_short_term_memory)
        self._core = core

    @property
    def core(self) -> SelfControlledMemory:
        """The core SCM memory every call delegates to."""
        return self._core

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        """The memory block for the last user message of ``messages`` ('' when there is none or nothing to recall)."""
        users = [text for role, text, _ in map(turn_message, messages or []) if role == "user" and text.strip()]
        if not users:
            return ""
        context = await self._core.aprepare(users[-1], session_id=_session(block_kwargs, messages))
        return queued_memory_text(context, self._core.memory_template)

    async def _aput(self, messages: list[ChatMessage]) -> None:
        """Store each completed turn of ``messages`` (user message(s), then the final reply) in the session."""
        if not messages:
            return
        for message in messages:
            check_type(message, ChatMessage, "messages must be llama_index ChatMessages")
        session = _session({}, messages)
        turns, self._pending[session] = collect_turns(self._pending.pop(session, []), map(turn_message, messages))
        for observation, reply in turns:
            await self._core.arecord(observation, reply, session_id=session)
        if not self._pending[session]:
            del self._pending[session]  # no user message waits for a reply from a later flush
