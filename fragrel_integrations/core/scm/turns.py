"""What the SCM chat adapters (LangChain's ``SCMMiddleware``, LlamaIndex's ``SCMMemory`` and ``SCMMemoryBlock``)
share, without a framework: building their core memory, checking session ids, and telling from a chat's
messages when an interaction (the user's message, then the assistant's final reply) is complete.

An adapter reduces each framework message to ``(role, text, final)`` - ``final`` from :func:`is_final_reply` - and
hands it to :class:`OpenTurn` (a memory that keeps the open turn's messages) or :func:`collect_turns` (a block that
sees flushed messages in batches).

>>> turn = OpenTurn()
>>> turn.add("user", "Hi, I am Ana.", False, None), turn.add("assistant", "Hello Ana!", True, None)
(None, ('Hi, I am Ana.', 'Hello Ana!'))
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Generic, TypeVar

from ...models.convert import optional_embedder
from .memory import SelfControlledMemory
from .prompts import render_memory_block
from .stream import MemoryStream
from .types import SCMContext

__all__ = [
    "OpenTurn",
    "build_memory",
    "check_optional_session",
    "check_run_session",
    "collect_turns",
    "is_final_reply",
    "queued_memory_text",
    "resolve_run_session",
]

M = TypeVar("M")


def build_memory(
    memory: SelfControlledMemory | None,
    *,
    model: Any,
    model_arg: str,
    streams: Mapping[str, Any],
    embedder: Any = None,
    convert: Callable[[str, Any], MemoryStream | str | Path] | None = None,
    **memory_kwargs: Any,
) -> SelfControlledMemory:
    """An adapter's core memory: ``memory`` itself, or one built from ``model`` (the controller, passed to the
    adapter as ``model_arg``), at most one of ``streams`` (the adapter's stream arguments by name, None: not given;
    ``convert(name, value)`` turns the given one into a stream or path; none given: an in-memory stream),
    ``embedder`` and other :class:`SelfControlledMemory` keywords.

    >>> build_memory(None, model=None, model_arg="llm", streams={"path": None})
    Traceback (most recent call last):
    ValueError: llm is required: pass the controller model as llm=..., or memory=SelfControlledMemory(...)
    """
    given = [name for name, value in streams.items() if value is not None]
    if memory is not None:
        if not isinstance(memory, SelfControlledMemory):
            raise TypeError(f"memory must be a SelfControlledMemory, got {type(memory).__name__}")
        if model is not None or embedder is not None or memory_kwargs or given:
            options = "/".join(f"{name}=" for name in (model_arg, *streams, "embedder"))
            raise ValueError(f"pass either memory=... or {options}/settings, not both")
        return memory
    if model is None:
        raise ValueError(
            f"{model_arg} is required: pass the controller model as {model_arg}=..., "
            "or memory=SelfControlledMemory(...)"
        )
    if len(given) > 1:
        names = [f"{name}=" for name in streams]
        listed = f"{', '.join(names[:-1])} and {names[-1]}" if len(names) > 1 else names[0]
        raise ValueError(f"pass at most one of {listed}, got {' and '.join(given)}")
    stream: MemoryStream | str | Path = ":memory:"
    if given:
        value = streams[given[0]]
        stream = convert(given[0], value) if convert is not None else value
    return SelfControlledMemory(model, stream=stream, embedder=optional_embedder(embedder), **memory_kwargs)


def check_optional_session(session_id: object) -> str | None:
    """A session id given to an adapter: a non-empty str, or None (the adapter then finds or defaults it).

    >>> check_optional_session(None), check_optional_session("ana")
    (None, 'ana')
    """
    if session_id is not None and (not isinstance(session_id, str) or not session_id):
        raise TypeError(f"session_id must be a non-empty str or None, got {session_id!r}")
    return session_id


def check_run_session(value: object, where: str) -> str:
    """A session id read from a run (its context or thread): a non-empty str, else an error naming where it came
    from and the fix - never replaced by a shared session, so two users can never meet in one."""
    if not isinstance(value, str):
        raise TypeError(
            f"{where} must be a non-empty str (one id per user or conversation), got {type(value).__name__} "
            f"{value!r}: convert it yourself, e.g. str(user.id), so that two users can never share a session"
        )
    if not value.strip():
        raise ValueError(f"{where} is empty or blank: pass a non-empty id per user or conversation")
    return value


def resolve_run_session(fixed: str | None, context: object, thread: object, adapter: str) -> str:
    """The session of an agent run: ``fixed`` (the adapter's ``session_id=``), else the ``session_id`` of the run's
    ``context`` (a mapping's key or an object's attribute), else the run's thread id (an int is read as its decimal
    text, as LangGraph's checkpointers do); a value that is not a non-empty str is an error, and so is a run with
    none (never a shared session).

    >>> resolve_run_session(None, None, 7, "SCMMiddleware"), resolve_run_session(None, {"session_id": "ana"}, 7, "")
    ('7', 'ana')
    """
    context_value = context.get("session_id") if isinstance(context, Mapping) else getattr(context, "session_id", None)
    if fixed is not None:
        return fixed
    if context_value is not None:
        return check_run_session(context_value, "the run's context['session_id']")
    if thread is not None:
        if isinstance(thread, int) and not isinstance(thread, bool):
            thread = str(thread)
        return check_run_session(thread, "the run's config['configurable']['thread_id']")
    raise ValueError(
        f"{adapter} cannot tell whose conversation this is: invoke the agent with "
        "context={'session_id': '<user or conversation id>'} (create_agent(..., context_schema=...)) or "
        f"config={{'configurable': {{'thread_id': '...'}}}}, or fix one session with {adapter}(session_id='...')"
    )


def is_final_reply(role: str, text: str, has_tool_calls: bool) -> bool:
    """Whether a message closes the interaction: the assistant's reply with text and no tool calls.

    >>> is_final_reply("assistant", "Paris.", False), is_final_reply("assistant", "", True)
    (True, False)
    """
    return role == "assistant" and bool(text.strip()) and not has_tool_calls


class OpenTurn(Generic[M]):
    """The interaction a chat memory has seen but not stored: its user message(s), then anything up to the
    assistant's final reply. ``messages`` keeps each added message (``original``) with its role and text."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, str, M]] = []

    def observation(self) -> str | None:
        """The open turn's user messages, one per line (None before a user message)."""
        users = [text for role, text, _ in self.messages if role == "user"]
        return "\n".join(users) if users else None

    def originals(self) -> list[M]:
        """The open turn's messages as added."""
        return [original for _, _, original in self.messages]

    def add(self, role: str, text: str, final: bool, original: M) -> tuple[str, str] | None:
        """Add a message; return ``(observation, reply)`` when it is the final reply that completes the turn.

        Several user messages before any other message form one observation; a user message after other
        messages starts a new turn (an unanswered one before it is dropped); other messages before a user
        message are dropped.
        """
        observation = self.observation()
        if observation is not None and final:
            self.messages = []
            return observation, text.strip()
        if role == "user":
            if observation is None or any(r != "user" for r, _, _ in self.messages):
                self.messages = []  # a new turn
            self.messages.append((role, text, original))
        elif observation is not None:
            self.messages.append((role, text, original))
        return None


def collect_turns(
    pending: list[str], messages: Iterable[tuple[str, str, bool]]
) -> tuple[list[tuple[str, str]], list[str]]:
    """The interactions completed by ``messages`` (``(role, text, final)``, e.g. flushed out of a short-term
    queue) after the ``pending`` user texts of an earlier batch, and the user texts still waiting for a reply.

    >>> collect_turns(["Hi"], [("user", "I am Ana.", False), ("assistant", " Hello! ", True), ("user", "Bye", False)])
    ([('Hi\\nI am Ana.', 'Hello!')], ['Bye'])
    """
    users, turns = list(pending), []
    for role, text, final in messages:
        if role == "user":
            users.append(text)  # several user messages before a reply form one observation
        elif users and final:
            turns.append(("\n".join(users), text.strip()))
            users = []
    return turns, users


def queued_memory_text(context: SCMContext, memory_template: str) -> str:
    """The memory text for a chat that keeps its recent messages in a short-term queue (LlamaIndex's ``Memory``):
    the activated turns, then SCM's flash memory, which there is the newest turn flushed out of the queue (the
    previous turn is still in it) and is labelled so; '' when there is nothing to recall."""
    recalled = {m.item.index for m in context.memories}
    parts = [render_memory_block(None, context.memories)] if context.memories else []
    if context.flash is not None and context.flash.index not in recalled:
        parts.append(f"Newest turn before the recent messages:\n{context.flash.text}")
    return memory_template.format(memory="\n\n".join(parts)) if parts else ""
