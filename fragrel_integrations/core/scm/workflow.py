"""The SCM turn as step generators: one code path that :func:`~fragrel_integrations.core.steps.drive` runs
synchronously and :func:`~fragrel_integrations.core.steps.adrive` asynchronously.

* :func:`prepare_steps` - steps 1-4 (input, activation, retrieval, reorganisation) -> :class:`~.types.SCMContext`
* :func:`record_steps` - step 6 (summarise, embed, append; the turn survives a failing summary or embedder)
* :func:`turn_steps` - a whole turn: prepare, answer, record -> :class:`~.types.SCMTurn`
* :func:`reindex_steps` - add a session's stored turns to the external index
* :func:`decision_steps` - one yes/no question to the controller (by probability when the model offers it)

Each takes the :class:`~.memory.SelfControlledMemory` whose settings, stream, caches and index it uses; the
memory's public methods are the way to run them.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..._validation import check_text
from ...models.chat import ChatModel
from ...models.structured import ReplyFormat, format_kwargs
from ...models.tokens import cap_output, storable_text
from ...models.yes_no import ayes_no_probability, yes_no_probability
from ..scorers import cosine_similarities
from ..steps import CallStep, ChatStep, Steps
from .fusion_prompts import fit_memories, render_memory_block
from .gates import EmbeddingGate, LexicalGate, NameVocabulary
from .interactions import Decision, MemoryItem, RecalledMemory, SCMContext, SCMTurn
from .memory_controller import DECISION_MAX_TOKENS, YES_NO_FORMAT, SCMController
from .stream import check_session
from .stream_index import add_turn, pool_items

if TYPE_CHECKING:
    from .memory import SelfControlledMemory

__all__ = [
    "check_observation",
    "check_session_id",
    "decision_steps",
    "prepare_steps",
    "record_steps",
    "reindex_steps",
    "turn_steps",
]


@dataclass(frozen=True, slots=True)
class _ProbabilityStep:
    """A yes/no question asked by probability (the reply is ``P(yes) / (P(yes) + P(no))`` or None)."""

    model: ChatModel
    messages: list[dict[str, str]]

    def run(self) -> float | None:
        return yes_no_probability(self.model, self.messages)

    async def arun(self) -> float | None:
        return await ayes_no_probability(self.model, self.messages)


def _chat_step(
    messages: list[dict[str, str]],
    max_tokens: int | None,
    model: ChatModel,
    temperature: float | None = None,
    reply_format: ReplyFormat | None = None,  # asked only of models that enforce it
) -> ChatStep:
    options = {"temperature": temperature, "max_tokens": max_tokens, **format_kwargs(model, reply_format)}
    return ChatStep(model, messages, options)


def _check_storable(name: str, text: str) -> str:
    """``text`` if a stream can store it (UTF-8 encodable), else a ValueError raised before any model call."""
    return check_text(text, name)


def check_session_id(session_id: object) -> str:
    """A session id the memory accepts: a non-empty str (TypeError) that a stream can store (ValueError)."""
    return _check_storable("session_id", check_session(session_id))


def check_observation(observation: object) -> str:
    """The user's message: a str (TypeError) that a stream can store (ValueError)."""
    if not isinstance(observation, str):
        raise TypeError(f"the observation (user message) must be str, got {type(observation).__name__}")
    return _check_storable("the observation (user message)", observation)


def prepare_steps(memory: SelfControlledMemory, observation: str, session_id: str) -> Steps[SCMContext]:
    """Steps 1-4: the activation decision, the flash turn, the activated turns (time order), reorganisation.

    Reorganisation starts when the recalled turns and the flash turn together exceed ``memory.total_tokens``;
    whatever still exceeds it afterwards (full texts the controller kept, turns without a summary, a huge previous
    turn) is cut in the block (:func:`~.prompts.fit_memories`), so the block, and the flash turn in the activation
    question, never exceed the budget. ``SCMContext.flash`` and ``memories`` keep the stored items."""
    observation = check_observation(observation)
    session_id = check_session_id(session_id)
    items: list[MemoryItem] = yield CallStep(memory.stream.items, (session_id,))
    flash = items[-1] if items else None
    candidates = items[:-1]
    activation: Decision | None = None
    gate = memory.activation
    if gate is True and candidates:
        shown_flash, _ = fit_memories(flash, (), memory.total_tokens, memory.count_tokens)  # within the budget
        activation = yield from decision_steps(
            memory.controller, memory.controller.activation_messages(observation, shown_flash), "activation"
        )
    elif isinstance(gate, LexicalGate) and candidates:
        vocabulary = memory.sessions.vocabulary(session_id, candidates) if gate.names else NameVocabulary()
        activation = gate.decide_known(observation, vocabulary)
    recalled: list[RecalledMemory] = []
    query: np.ndarray | None = None
    if candidates and (activation is None or activation.value) and memory.index is not None:
        query = yield CallStep(memory.embed_query, (observation,))
        hits = yield CallStep(memory.index.search, (session_id, observation, query, memory.pool_size))
        candidates = pool_items(hits, candidates, session_id, memory.pool_size)  # the pool, in time order
    if candidates and (activation is None or activation.value):
        cached = memory.index is None  # the whole session: reuse its matrix; an index pool changes every turn
        rows = yield from memory.sessions.turn_matrix(session_id, candidates, cached)
        if query is None:
            query = yield CallStep(memory.embed_query, (observation,))
        matrix, norms = rows.view(len(candidates))
        if isinstance(gate, EmbeddingGate):  # the gate reads the cosines retrieval needs anyway
            activation = gate.decide(_cosines(query, matrix, norms))
        if activation is None or activation.value:
            layout = rows.layout(len(candidates)) if memory.relation is not None else None
            scores = memory.scores(query, candidates, matrix, observation, norms=norms, layout=layout)
            top = np.argsort(-scores, kind="stable")[: memory.k]
            for i in sorted(int(t) for t in top):  # time order
                item = candidates[i]
                recalled.append(RecalledMemory(item, float(scores[i]), memory.count_tokens(item.text)))
        flash_tokens = memory.count_tokens(flash.text) if flash is not None and recalled else 0
        if sum(m.tokens for m in recalled) + flash_tokens > memory.total_tokens:
            for n, m in enumerate(recalled):
                if m.tokens > memory.item_tokens and m.item.summary:
                    decision = yield from decision_steps(
                        memory.controller, memory.controller.sufficiency_messages(observation, m.item), "sufficiency"
                    )
                    recalled[n] = RecalledMemory(m.item, m.score, m.tokens, decision.value, decision)
    block = render_memory_block(*fit_memories(flash, recalled, memory.total_tokens, memory.count_tokens))
    return SCMContext(session_id, observation, activation, flash, tuple(recalled), block)


def decision_steps(controller: SCMController, messages: list[dict[str, str]], question: str) -> Steps[Decision]:
    """Ask the controller a yes/no question: by probability when its model offers it, else as text."""
    if controller.uses_probability:
        p = yield _ProbabilityStep(controller.model, messages)
        if p is not None:
            return controller.decide_probability(p, question)
    reply = yield _chat_step(messages, DECISION_MAX_TOKENS, controller.model, controller.temperature, YES_NO_FORMAT)
    if question == "activation":
        return controller.decide_activation(reply)
    return controller.decide_sufficiency(reply)


def _cosines(query: np.ndarray, matrix: np.ndarray, norms: np.ndarray) -> np.ndarray:
    return cosine_similarities(np.asarray(matrix, dtype=np.float64), query, norms)


def record_steps(memory: SelfControlledMemory, observation: str, response: str, session_id: str) -> Steps[MemoryItem]:
    """Summarise, embed, append. Once the turn exists nothing may lose it: a failing summary or embedding
    stores the turn without one (and warns); an interruption (Ctrl-C, a cancelled task) stores it, then stops."""
    observation = check_observation(observation)
    if not isinstance(response, str):
        raise TypeError(f"response must be str, got {type(response).__name__}")
    response = _check_storable("response", response)
    session_id = check_session_id(session_id)
    summary, vector, problems = "", None, []
    try:
        if memory.summarize:
            controller = memory.controller
            try:
                reply = yield _chat_step(
                    controller.summary_messages(observation, response),
                    controller.summary_max_tokens,
                    controller.model,
                    controller.temperature,
                    controller.summary_format(),
                )
                summary = controller.summary_text(reply, observation, response)
            except Exception as exc:  # the turn is kept without a summary
                problems.append(
                    f"no summary (the controller failed: {type(exc).__name__}: {exc}), so it is embedded and "
                    "recalled by its full text"
                )
        item_text = summary or MemoryItem(session_id, 0, observation, response).text
        try:
            vectors = yield CallStep(memory.embed, ([item_text],))
            vector = vectors[0]
        except Exception as exc:  # embedded again when a later turn's retrieval needs it
            fix = f"; run memory.reindex({session_id!r}) once the embedder works" if memory.index is not None else ""
            problems.append(
                f"no embedding (the embedder failed: {type(exc).__name__}: {exc}), so it is embedded when a "
                f"later turn's retrieval needs it{fix}"
            )
    except GeneratorExit:
        raise
    except BaseException:  # interrupted after the reply exists: keep the turn, then stop
        memory.stream.append(session_id, observation, response, summary=summary)
        raise
    item = yield CallStep(
        memory.stream.append, (session_id, observation, response), {"summary": summary, "embedding": vector}
    )
    if problems:
        warnings.warn(
            f"turn {item.index} of session {session_id!r} was stored with {'; and '.join(problems)}",
            RuntimeWarning,
            stacklevel=4,
        )
    if memory.index is not None and vector is not None:  # after the stream: a failure loses nothing
        stored = vector if item.embedding is None else item.embedding
        yield CallStep(add_turn, (memory.index, item, item_text, stored))
    return item


def reindex_steps(memory: SelfControlledMemory, session_id: str) -> Steps[int]:
    """Add every stored turn of the session to ``memory.index`` (embedding those stored without a vector)."""
    session_id = check_session_id(session_id)
    if memory.index is None:
        raise ValueError("reindex needs an index: build the memory with index=...")
    items: list[MemoryItem] = yield CallStep(memory.stream.items, (session_id,))
    missing = [it for it in items if it.embedding is None]
    fresh: dict[int, np.ndarray] = {}
    if missing:
        vectors = yield CallStep(memory.embed, ([it.summary or it.text for it in missing],))
        fresh = {it.index: v for it, v in zip(missing, vectors, strict=True)}
    for item in items:
        vector = item.embedding if item.embedding is not None else fresh[item.index]
        yield CallStep(add_turn, (memory.index, item, item.summary or item.text, vector, True))
    return len(items)


def turn_steps(
    memory: SelfControlledMemory, observation: str, session_id: str, model: ChatModel | None
) -> Steps[SCMTurn]:
    """A whole turn: prepare, answer with ``model`` (default: the controller's), record the reply."""
    context = yield from prepare_steps(memory, observation, session_id)
    reply = yield _chat_step(
        memory.fusion_messages(context), memory.response_max_tokens, model or memory.controller.model
    )
    if not isinstance(reply, str):
        raise TypeError(
            f"the chat model returned {type(reply).__name__} instead of the reply; its invoke/ainvoke must "
            "return the reply text (str)"
        )
    reply = storable_text(reply.strip())  # model output: lone surrogates become U+FFFD
    if memory.response_max_tokens is not None:  # a model that ignores max_tokens cannot fill the stream
        reply, _ = cap_output(reply, memory.response_max_tokens)
    item = yield from record_steps(memory, context.observation, reply, context.session_id)
    return SCMTurn(context, reply, item)
