"""SCM memory for LangChain agents: an ``AgentMiddleware`` for ``langchain.agents.create_agent``.

It converts messages and delegates to the core :class:`~fragrel_integrations.core.scm.SelfControlledMemory`:
``before_agent`` runs SCM steps 1-4 for the last human message once per run; ``wrap_model_call`` adds the memory
block to the system message of every model call and, unless ``keep_history=True``, shows the model only the
current turn (SCM's memory stands in for the transcript); ``after_agent`` writes the interaction (observation,
final AI reply) back to the stream. The session id is ``session_id=``, else ``runtime.context["session_id"]``,
else the run's ``thread_id`` (see :func:`~fragrel_integrations.adapters.chat_turns.resolve_run_session`): never a
shared fallback session, so one user's turns never reach another user's model call.

>>> from langchain.agents import create_agent
>>> from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
>>> from langchain_core.messages import AIMessage
>>> from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel
>>> controller = ScriptedChatModel(lambda m: "yes" if "yes or no" in m[-1]["content"] else "A summary.")
>>> middleware = SCMMiddleware(model=controller, embedder=HashingEmbedder(dim=64), session_id="ana")
>>> agent = create_agent(GenericFakeChatModel(messages=iter([AIMessage("Hello Ana!")])), middleware=[middleware])
>>> agent.invoke({"messages": [{"role": "user", "content": "Hi, I am Ana."}]})["messages"][-1].content
'Hello Ana!'
>>> [item.response for item in middleware.memory.history("ana")]
['Hello Ana!']
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, NotRequired

from .._optional import require

require("langchain.agents", "langchain")

from langchain.agents.middleware import AgentMiddleware, AgentState  # noqa: E402
from langchain.agents.middleware.types import ModelRequest, ModelResponse, PrivateStateAttr  # noqa: E402
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage  # noqa: E402
from langgraph.store.base import BaseStore  # noqa: E402

from ..adapters.chat_turns import build_memory, check_optional_session, is_final_reply, last_turn, resolve_run_session  # noqa: E402
from ..adapters.keyed_stream import owned_namespace  # noqa: E402
from ..core.scm import MemoryStream, SCMContext, SelfControlledMemory  # noqa: E402
from ..models.embedder import Embedder  # noqa: E402
from .scm_store import LangGraphStoreStream  # noqa: E402

__all__ = ["SCMMiddleware", "SCMState"]


def _merge(old: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, Any]:
    """State reducer: each SCM middleware of an agent updates only its own entry (keyed by its name)."""
    return {**(old if isinstance(old, dict) else {}), **(new if isinstance(new, dict) else {})}


class SCMState(AgentState):
    """The agent state with the middlewares' private per-run fields (kept out of the agent's input/output), one
    entry per :class:`SCMMiddleware` keyed by its ``name``, so several SCM memories can share one agent."""

    scm_memory: NotRequired[Annotated[dict[str, str], PrivateStateAttr, _merge]]
    scm_observation: NotRequired[Annotated[dict[str, str], PrivateStateAttr, _merge]]
    scm_session: NotRequired[Annotated[dict[str, str], PrivateStateAttr, _merge]]


def _last_turn(messages: Sequence[AnyMessage]) -> tuple[int | None, str | None]:
    """The last human message's position and the final AI reply after it (see ``adapters.chat_turns.last_turn``)."""
    turn = []
    for m in messages:
        role = "user" if isinstance(m, HumanMessage) else "assistant" if isinstance(m, AIMessage) else m.type
        turn.append((role, text := str(m.text), is_final_reply(role, text, bool(getattr(m, "tool_calls", None)))))
    return last_turn(turn)


class SCMMiddleware(AgentMiddleware):
    """Self-controlled long-term memory for ``create_agent`` agents (see the module docstring).

    Args:
        memory: a built core :class:`SelfControlledMemory`; or leave it out and pass ``model`` (the controller),
            at most one stream backend, ``embedder`` and any other :class:`SelfControlledMemory` keyword (``k``,
            ``relation``, ``index`` - e.g. :class:`~fragrel_integrations.langchain.scm_index.VectorStoreStreamIndex`).
        path: SQLite file of the stream (default: a throw-away in-memory stream; several processes may share one).
        store: a LangGraph ``BaseStore`` instead (the one you give ``create_agent(store=...)``), through
            :class:`~fragrel_integrations.langchain.scm_store.LangGraphStoreStream`. Each middleware owns its
            stream there: its namespace comes from its ``name`` (``("fragrel", "scm")`` for the default name,
            ``("fragrel", "scm:<name>")`` for another), or from ``namespace``.
        namespace: the store namespace of the stream (a str is one label, or a tuple of labels); only with
            ``store``. Two middlewares share one stream only when given the same namespace.
        stream: any built :class:`~fragrel_integrations.core.scm.MemoryStream` instead.
        session_id: a fixed session; None reads it from the run (see the module docstring).
        keep_history: show the model the thread's whole history (True) or only the current turn plus the memory.
        name: the middleware's name in the agent (unique per agent; default ``"SCMMiddleware"``); give each of
            several SCM middlewares of one agent its own (e.g. ``"work_memory"``), each recalls on its own.
    """

    state_schema = SCMState

    def __init__(
        self,
        memory: SelfControlledMemory | None = None,
        *,
        model: Any = None,
        path: str | Path | None = None,
        store: BaseStore | None = None,
        stream: MemoryStream | None = None,
        embedder: Embedder | Any | None = None,
        session_id: str | None = None,
        keep_history: bool = False,
        name: str | None = None,
        namespace: str | tuple[str, ...] | None = None,
        **memory_kwargs: Any,
    ) -> None:
        super().__init__()
        if name is not None and (not isinstance(name, str) or not name.strip() or any(c in name for c in ":|")):
            raise TypeError(f"name must be a non-empty str without ':' or '|' (LangGraph node names), got {name!r}")
        self._name = type(self).__name__ if name is None else name
        if namespace is not None and store is None:
            raise ValueError("namespace= is the stream's place in a LangGraph store: pass it with store=")
        ns = owned_namespace(name, namespace)
        self.memory = build_memory(
            memory,
            model=model,
            model_arg="model",
            streams={"path": path, "store": store, "stream": stream},
            embedder=embedder,
            convert=lambda arg, value: LangGraphStoreStream(value, namespace=ns) if arg == "store" else value,
            **memory_kwargs,
        )
        self.session_id = check_optional_session(session_id)
        if not isinstance(keep_history, bool):
            raise TypeError(f"keep_history must be True or False, got {keep_history!r}")
        self.keep_history = keep_history
        self.tools = []

    @property
    def name(self) -> str:
        """The middleware's name within its agent (``name=``, default the class name)."""
        return self._name

    # ------------------------------------------------------------------------------------------- conversion

    def resolve_session(self, runtime: Any) -> str:
        """The session id of a run (see :func:`~fragrel_integrations.adapters.chat_turns.resolve_run_session`)."""
        if self.session_id is not None:
            return self.session_id
        try:
            from langgraph.config import get_config

            thread = get_config().get("configurable", {}).get("thread_id")
        except RuntimeError:  # not inside a runnable context
            thread = None
        return resolve_run_session(self.session_id, getattr(runtime, "context", None), thread, type(self).__name__)

    def _start(self, state: Mapping[str, Any], runtime: Any) -> tuple[str, str] | None:
        messages = state.get("messages", [])
        i = _last_turn(messages)[0]
        return None if i is None else (str(messages[i].text), self.resolve_session(runtime))

    def _update(self, context: SCMContext | None) -> dict[str, Any]:
        if context is None:  # nothing to remember for; drop a block left by an earlier run of the thread
            return {"scm_memory": {self.name: ""}}
        return {
            "scm_memory": {self.name: self.memory.memory_prompt(context)},
            "scm_observation": {self.name: context.observation},
            "scm_session": {self.name: context.session_id},
        }

    def _own(self, state: Mapping[str, Any] | None, key: str) -> str:
        """This middleware's entry of a private state field."""
        return ((state or {}).get(key) or {}).get(self.name) or ""

    def _finish(self, state: Mapping[str, Any], runtime: Any) -> tuple[str, str, str] | None:
        messages = state.get("messages", [])
        i, reply = _last_turn(messages)
        if i is None or reply is None:
            return None
        observation = self._own(state, "scm_observation") or str(messages[i].text)
        session = self._own(state, "scm_session") or self.resolve_session(runtime)
        return observation, reply, session

    def _request(self, request: ModelRequest) -> ModelRequest:
        memory = self._own(request.state, "scm_memory")
        changes: dict[str, Any] = {}
        if memory:
            base = request.system_prompt
            changes["system_message"] = SystemMessage(f"{base}\n\n{memory}" if base else memory)
        if not self.keep_history:
            i = _last_turn(request.messages)[0]
            if i:
                changes["messages"] = list(request.messages[i:])
        return request.override(**changes) if changes else request

    # ------------------------------------------------------------------------------------------- hooks

    def before_agent(self, state: SCMState, runtime: Any) -> dict[str, Any] | None:
        start = self._start(state, runtime)
        return self._update(None if start is None else self.memory.prepare(start[0], session_id=start[1]))

    async def abefore_agent(self, state: SCMState, runtime: Any) -> dict[str, Any] | None:
        start = self._start(state, runtime)
        return self._update(None if start is None else await self.memory.aprepare(start[0], session_id=start[1]))

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]) -> Any:
        return handler(self._request(request))

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> Any:
        return await handler(self._request(request))

    def after_agent(self, state: SCMState, runtime: Any) -> dict[str, Any] | None:
        done = self._finish(state, runtime)
        if done is not None:
            self.memory.record(done[0], done[1], session_id=done[2])
        return None

    async def aafter_agent(self, state: SCMState, runtime: Any) -> dict[str, Any] | None:
        done = self._finish(state, runtime)
        if done is not None:
            await self.memory.arecord(done[0], done[1], session_id=done[2])
        return None
