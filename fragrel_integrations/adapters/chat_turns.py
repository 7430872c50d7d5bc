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

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

from .._validation import check_type
from ..core.scm.fusion_prompts import render_memory_block
from ..core.scm.interactions import SCMContext
from ..core.scm.memory import DEFAULT_SESSION, SelfControlledMemory, prepare_steps, record_steps
from ..core.scm.stream import MemoryStream
from ..core.steps import Steps, adrive, drive
from ..models.convert import optional_embedder

__all__ = [
    "OpenTurn",
    "SessionTurns",
    "block_session",
    "build_memory",
    "build_path_memory",
    "check_optional_session",
    "collect_turns",
    "is_final_reply",
    "last_turn",
    "memory_session",
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
        check_type(memory, SelfControlledMemory, "memory must be a SelfControlledMemory")
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
        listed = f"{', '.join(names[:-1])} and {names[-1]}"  # two given: at least two stream arguments
        raise ValueError(f"pass at most one of {listed}, got {' and '.join(given)}")
    stream: MemoryStream | str | Path = ":memory:"
    if given:
        stream = streams[given[0]] if convert is None else convert(given[0], streams[given[0]])
    return SelfControlledMemory(model, stream=stream, embedder=optional_embedder(embedder), **memory_kwargs)


def build_path_memory(
    memory: SelfControlledMemory | None,
    *,
    llm: Any = None,
    path: str | Path = ":memory:",
    embedder: Any = None,
    **memory_kwargs: Any,
) -> SelfControlledMemory:
    """:func:`build_memory` for an adapter (LlamaIndex's ``SCMMemory`` and ``SCMMemoryBlock``) whose controller is
    ``llm=`` and whose only stream argument is ``path`` (a SQLite file; ``":memory:"``: an in-memory stream)."""
    streams = {"path": None if str(path) == ":memory:" else path}
    return build_memory(memory, model=llm, model_arg="llm", streams=streams, embedder=embedder, **memory_kwargs)


def check_optional_session(session_id: object) -> str | None:
    """A session id given to an adapter: a non-empty str, or None (the adapter then finds or defaults it).

    >>> check_optional_session(None), check_optional_session("ana")
    (None, 'ana')
    """
    if session_id is not None and (not isinstance(session_id, str) or not session_id):
        raise TypeError(f"session_id must be a non-empty str or None, got {session_id!r}")
    return session_id


def memory_session(session_id: object, shared: bool, adapter: str) -> str:
    """The session of a chat memory object: ``session_id`` (a non-empty str), else ``"default"`` for a private
    in-memory stream; a ``shared`` stream (a file or a memory= object) needs one, so users never meet in one.

    >>> memory_session(None, False, "SCMMemory"), memory_session("ana", True, "SCMMemory")
    ('default', 'ana')
    """
    check_optional_session(session_id)
    if session_id is not None:
        return session_id
    if shared:
        raise ValueError(
            "session_id is required when the stream is shared (a path= file or a memory= object): pass "
            f"{adapter}(..., session_id='<user or conversation id>'), one per user or conversation"
        )
    return DEFAULT_SESSION  # a private in-memory stream: no one else can read this session


def block_session(given: object, message_sessions: Iterable[object], adapter: str) -> str:
    """The session of a memory block's call: ``given`` (the call's ``session_id``), else the first of
    ``message_sessions`` (the ``session_id`` of each message that carries extra keywords).

    >>> block_session(None, ["ana", "bo"], "SCMMemoryBlock")
    'ana'
    """
    session = given if given is not None else next(iter(message_sessions), None)
    if not isinstance(session, str) or not session:
        raise ValueError(
            f"{adapter} is keyed by the Memory's session_id: use it inside "
            "llama_index.core.memory.Memory(memory_blocks=[...]), or pass session_id=... to aget/aput"
        )
    return session


def check_run_session(value: object, where: str) -> str:
    """A session id read from a run (its context or thread): a non-empty str, else an error naming where it came
    from and the fix - never replaced by a shared session, so two users can never meet in one."""
    check_type(
        value,
        str,
        f"{where} must be a non-empty str (one id per user or conversation)",
        hint=f" {value!r}: convert it yourself, e.g. str(user.id), so that two users can never share a session",
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
        if role == "user" and (observation is None or any(r != "user" for r, _, _ in self.messages)):
            self.messages = []  # a new turn
        if role == "user" or observation is not None:
            self.messages.append((role, text, original))
        return None


class SessionTurns(Generic[M]):
    """The session plumbing of a chat memory that sees messages one by one (LlamaIndex's ``SCMMemory``): the open
    turn, the context prepared for an observation (reused until the observation or the stream changes), and
    recording, replacing or forgetting the session's turns. The adapter converts each message to
    ``(role, text, final)`` and passes its session id to every call.

    >>> from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel
    >>> model = ScriptedChatModel(lambda m: "yes" if "yes or no" in m[-1]["content"] else "A summary.")
    >>> turns = SessionTurns(SelfControlledMemory(model, embedder=HashingEmbedder(dim=64)))
    >>> turns.add("ana", "user", "Hi, I am Ana.", False, None), turns.add("ana", "assistant", "Hello!", True, None)
    (False, True)
    >>> turns.context("ana", "Who am I?").flash.observation
    'Hi, I am Ana.'
    """

    def __init__(self, memory: SelfControlledMemory) -> None:
        self.memory = memory
        self.open: OpenTurn[M] = OpenTurn()
        self._cached: tuple[tuple[str, str, int], SCMContext] | None = None

    def observation(self, input: object) -> str | None:
        """``input`` (a str), else the open turn's observation (None: nothing to prepare the memory for)."""
        if input is not None:
            return check_type(input, str, "input must be str or None")
        return self.open.observation()

    def _context_steps(self, session_id: str, input: object) -> Steps[SCMContext | None]:
        observation = self.observation(input)
        if observation is None:
            return None
        key = (session_id, observation, self.memory.stream.count(session_id))
        if self._cached is None or self._cached[0] != key:
            self._cached = (key, (yield from prepare_steps(self.memory, observation, session_id)))
        return self._cached[1]

    def context(self, session_id: str, input: object = None) -> SCMContext | None:
        """The prepared context for ``input`` (or the open turn) in ``session_id``; None without an observation."""
        return drive(self._context_steps(session_id, input))

    async def acontext(self, session_id: str, input: object = None) -> SCMContext | None:
        """:meth:`context`, preparing with the memory's async methods."""
        return await adrive(self._context_steps(session_id, input))

    def _add_steps(self, session_id: str, role: str, text: str, final: bool, original: M) -> Steps[bool]:
        done = self.open.add(role, text, final, original)
        if done is not None:
            yield from record_steps(self.memory, *done, session_id)
        return done is not None

    def add(self, session_id: str, role: str, text: str, final: bool, original: M) -> bool:
        """Add a message to the open turn; record the interaction it completes (True when it did)."""
        return drive(self._add_steps(session_id, role, text, final, original))

    async def aadd(self, session_id: str, role: str, text: str, final: bool, original: M) -> bool:
        """:meth:`add`, recording with the memory's async methods."""
        return await adrive(self._add_steps(session_id, role, text, final, original))

    @staticmethod
    def plan(messages: Iterable[tuple[str, str, bool, M]]) -> tuple[list[tuple[str, str]], OpenTurn[M]]:
        """The interactions ``(role, text, final, original)`` messages form and the turn left open after them."""
        turn: OpenTurn[M] = OpenTurn()
        return [done for message in messages if (done := turn.add(*message)) is not None], turn

    def _replace_steps(self, session_id: str, plan: tuple[list[tuple[str, str]], OpenTurn[M]]) -> Steps[None]:
        self.reset(session_id)
        for observation, reply in plan[0]:
            yield from record_steps(self.memory, observation, reply, session_id)
        self.open = plan[1]

    def replace(self, session_id: str, plan: tuple[list[tuple[str, str]], OpenTurn[M]]) -> None:
        """Forget the session, record the :meth:`plan`'s interactions and keep its open turn."""
        drive(self._replace_steps(session_id, plan))

    async def areplace(self, session_id: str, plan: tuple[list[tuple[str, str]], OpenTurn[M]]) -> None:
        """:meth:`replace`, recording with the memory's async methods."""
        await adrive(self._replace_steps(session_id, plan))

    def reset(self, session_id: str) -> None:
        """Forget the session's stored interactions, the open turn and the cached context."""
        self.memory.clear(session_id)
        self.open = OpenTurn()
        self._cached = None


def last_turn(messages: Sequence[tuple[str, str, bool]]) -> tuple[int | None, str | None]:
    """The position of the last user message of ``(role, text, final)`` messages (None: there is none) and the
    stripped text of the last final reply after it (None: not answered yet).

    >>> last_turn([("user", "Hi", False), ("assistant", " Hello! ", True), ("user", "Bye", False)])
    (2, None)
    """
    user = next((i for i in range(len(messages) - 1, -1, -1) if messages[i][0] == "user"), None)
    if user is None:
        return None, None
    replies = [text.strip() for _, text, final in messages[user + 1 :] if final]
    return user, replies[-1] if replies else None


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
