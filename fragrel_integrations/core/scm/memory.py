"""The SCM workflow per turn (Wang et al., "Self-Controlled Memory"), sync and async, framework-free.

1. **Input acquisition** - the user's observation and the session id.
2. **Memory activation** - the controller is asked whether long-term memory is needed (see
   :mod:`~fragrel_integrations.core.scm.memory_controller`: by P(yes) against P(no) when the model offers probabilities,
   else by lenient parsing with a fallback), or a model-free gate decides (``activation="lexical"`` or
   ``"embedding"``, see :mod:`~fragrel_integrations.core.scm.gates`). The flash memory (the previous turn) is
   always shown, whatever the answer.
3. **Retrieval** - the top ``k`` earlier turns by cosine of the observation's embedding and each turn's stored
   embedding, the flash turn excluded, re-ordered by time. With ``relation=ContextRelation(0.8)`` (FragRel's
   dialogue setting, ``alpha=0.5``) turns near other relevant turns score higher: ``s + alpha * s_env``. With an
   external ``index`` (a vector store, see :mod:`~.stream_index`) only the pool of turns the
   index returns is scored, so the relation's environment is taken over that pool.
4. **Reorganisation** - when the recalled turns and the flash turn together exceed ``total_tokens`` (paper:
   2000), the controller is asked for every turn longer than ``item_tokens`` (paper: 800) whether its summary can
   answer the observation; if so the summary replaces the full text. The public SCM4LLMs code uses other
   thresholds (300, 500 and 2500 in its configuration); we default to the paper's numbers, and both are
   parameters. ``total_tokens`` also bounds what is shown: texts still over it afterwards (full texts the
   controller kept, turns stored without a summary, a 2 MB previous turn) are cut to fair shares of it, ending in
   ``[...]`` (:func:`~fragrel_integrations.core.scm.fusion_prompts.fit_memories`); the flash turn in the activation
   question is cut the same way.
5. **Input fusion and response** - :meth:`SelfControlledMemory.fusion_messages` (standalone use) or
   :meth:`SelfControlledMemory.memory_prompt` (a system message for a framework's own prompt).
6. **Write back** - the controller summarises the interaction; the summary is embedded (it covers both the
   observation and the response) and the turn is appended to the stream. Nothing that fails after the reply
   exists loses the turn: when the summary call fails (an error, a reply that is not text) the turn is stored
   without a summary (embedded and recalled by its full text); when the embedder fails it is stored without an
   embedding (embedded when retrieval next needs it); both give a ``RuntimeWarning``. An interruption
   (``KeyboardInterrupt``, a cancelled task) during write-back stores the turn, then propagates. Only the
   stream's own failure raises. With ``response_max_tokens`` the reply of :meth:`SelfControlledMemory.chat` is
   cut to :data:`~fragrel_integrations.core.token_budget.OUTPUT_CHARS_PER_TOKEN` characters per token (a model that
   ignores ``max_tokens``); summaries are always capped (see :mod:`~fragrel_integrations.core.scm.memory_controller`).

Both the sync and the async methods drive one shared step generator (:mod:`fragrel_integrations.core.steps`),
so they cannot drift apart. The prompts live in :mod:`.fusion_prompts`, the per-session caches in :mod:`.recall`,
the model-free gates in :mod:`.gates` and the external index's helpers in :mod:`.stream_index`.

>>> from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel
>>> def controller(messages):
...     text = messages[-1]["content"]
...     return "yes" if "yes or no" in text else "A short summary."
>>> memory = SelfControlledMemory(ScriptedChatModel(controller), embedder=HashingEmbedder(dim=64), k=3)
>>> _ = memory.record("My cat is called Miso.", "Nice name!", session_id="ana")
>>> _ = memory.record("I live in Lisbon.", "Lovely city.", session_id="ana")
>>> context = memory.prepare("What is my cat called?", session_id="ana")
>>> context.activation.value, [m.item.index for m in context.memories], context.flash.index
(True, [0], 1)
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ..._validation import check_min_int, check_text, check_type
from ...models.chat import ChatModel
from ...models.convert import as_chat_model
from ...models.embedder import Embedder, check_embeddings
from ...models.tokens import count_tokens
from ..relation_aware import check_alpha, fragrel_scores
from ..relations import FragmentLayout, Relation
from ..scorers import SCORER_NAMES, check_scorer, cosine_similarities, make_scorer
from ..steps import CallStep, ChatStep, Steps, adrive, drive
from ..token_budget import cap_output, storable_text
from .fusion_prompts import (
    FUSION_SYSTEM_PROMPT,
    FUSION_TEMPLATE,
    MEMORY_SYSTEM_TEMPLATE,
    check_template,
    fit_memories,
    fusion_messages,
    memory_prompt,
    render_memory_block,
)
from .gates import EmbeddingGate, LexicalGate, NameVocabulary, activation_gate, auto_activation
from .interactions import Decision, MemoryItem, RecalledMemory, SCMContext, SCMTurn
from .memory_controller import SCMController
from .recall import SessionCache
from .stream import MemoryStream, SCMStream, check_session
from .stream_index import StreamIndex, add_turn, pool_items
from .vectors import turn_fragment

__all__ = [
    "DEFAULT_SESSION",
    "DIALOGUE_W_REL",
    "PAPER_ITEM_TOKENS",
    "PAPER_TOTAL_TOKENS",
    "SCORERS",
    "SelfControlledMemory",
    "check_observation",
    "prepare_steps",
    "record_steps",
    "reindex_steps",
    "turn_steps",
]

DEFAULT_SESSION = "default"
#: FragRel's context-relation strength for dialogue (turn = fragment).
DIALOGUE_W_REL = 0.8
SCORERS = SCORER_NAMES
#: The paper's reorganisation thresholds: a recalled turn longer than this many tokens may be summarised ...
PAPER_ITEM_TOKENS = 800
#: ... once all recalled turns together exceed this many tokens.
PAPER_TOTAL_TOKENS = 2000


class SelfControlledMemory:
    """SCM memory: a persistent memory stream, a controller and the six-step workflow of every turn.

    Args:
        controller: the controller's chat model (any :class:`~fragrel_integrations.models.chat.ChatModel`, a
            LangChain chat model or a LlamaIndex LLM), or a built :class:`SCMController` (custom prompts and
            fallbacks).
        stream: any :class:`~fragrel_integrations.core.scm.stream.MemoryStream` (an :class:`SCMStream`, or a
            LangGraph store through :class:`fragrel_integrations.langchain.scm_store.LangGraphStoreStream`), or
            a path for an :class:`SCMStream` (a SQLite file; ``":memory:"`` for a throw-away one).
        embedder: embeds the observation and each turn's summary; None loads the embedded offline default
            (all-MiniLM-L6-v2) on first use.
        k: most activated memories per turn (the paper uses 3-10).
        relation: an optional FragRel relation over turns, e.g. ``ContextRelation(DIALOGUE_W_REL)``; turns are
            fragments of one conversation with ``position`` = interaction index.
        alpha: weight of the relation's environment score (FragRel default 0.5).
        scorer: the independent score of a turn: ``"dense"`` (cosine of the embeddings, the paper's choice),
            ``"bm25"`` (BM25 over the turns' stored texts, rebuilt per turn) or ``"hybrid"`` (0.5 min-max BM25 +
            0.5 min-max cosine, as :class:`~fragrel_integrations.core.scorers.HybridScorer`).
        activation: how to decide whether memory is needed: True or ``"controller"`` asks the controller (by
            probability when its model offers it, see :mod:`~fragrel_integrations.core.scm.memory_controller`);
            ``"lexical"`` (or a :class:`~fragrel_integrations.core.scm.gates.LexicalGate`) decides from cue words
            and names seen in earlier turns, ``"embedding"`` (or an
            :class:`~fragrel_integrations.core.scm.gates.EmbeddingGate`) from the highest cosine of the message
            with a stored turn, both without a model call; False always recalls. ``"auto"`` (default): the
            controller, except with the embedded SmolLM2-135M, which cannot answer the question, where the
            lexical gate decides (:func:`~fragrel_integrations.core.scm.gates.auto_activation`).
        summarize: let the controller summarise every turn on write-back (False: no summary, the turn's text is
            embedded and never replaced by a summary).
        item_tokens, total_tokens: the reorganisation thresholds (paper: 800 and 2000; see the module docstring);
            ``total_tokens`` is also the most the memory block (recalled turns and the flash turn) may hold.
        token_counter: counts tokens (an object with ``count_tokens`` or a function); None uses the controller
            model's tokenizer when it has one, else the estimate of :mod:`fragrel_integrations.models.tokens`.
        system_prompt, fusion_template: the standalone prompt (:meth:`fusion_messages`); the template needs
            ``{memory}`` and ``{observation}``.
        memory_template: the system message adapters add (:meth:`memory_prompt`); needs ``{memory}``.
        response_max_tokens: output limit of :meth:`chat`'s reply (None: the model's default).
        index: an optional external :class:`~.stream_index.StreamIndex` (e.g. a LangChain or
            LlamaIndex vector store through the adapters' ``VectorStoreStreamIndex``). The stream stays the record
            of every turn; write-back also adds each turn to the index, and retrieval asks the index for a pool of
            candidates instead of scoring every turn (see :meth:`scores`: the scorer, and the relation's
            environment, are then taken over that pool only, as FragRel re-ranks a base retriever's pool).
        pool: candidates asked from the index per turn, the flash turn included (at least ``k + 1``); None uses
            ``k + 1`` with the plain dense scorer and ``max(4 * k, 20)`` with a relation or a non-dense scorer.
            Only with ``index``.
    """

    def __init__(
        self,
        controller: SCMController | ChatModel | Any,
        *,
        stream: MemoryStream | str | Path = ":memory:",
        embedder: Embedder | None = None,
        k: int = 5,
        relation: Relation | None = None,
        alpha: float = 0.5,
        scorer: str = "dense",
        activation: bool | str | LexicalGate | EmbeddingGate = "auto",
        summarize: bool = True,
        item_tokens: int = PAPER_ITEM_TOKENS,
        total_tokens: int = PAPER_TOTAL_TOKENS,
        token_counter: object | None = None,
        system_prompt: str | None = FUSION_SYSTEM_PROMPT,
        fusion_template: str = FUSION_TEMPLATE,
        memory_template: str = MEMORY_SYSTEM_TEMPLATE,
        response_max_tokens: int | None = None,
        index: StreamIndex | None = None,
        pool: int | None = None,
    ) -> None:
        self.controller = controller if isinstance(controller, SCMController) else SCMController(controller)
        if isinstance(stream, str | Path):
            stream = SCMStream(stream)
        check_type(
            stream,
            MemoryStream,
            "stream must be a MemoryStream (an SCMStream, a LangGraphStoreStream, or any object with "
            "append/items/last/count/sessions/clear/close) or a SQLite path",
        )
        self.stream = stream
        if embedder is not None:
            check_type(
                embedder,
                Embedder,
                "embedder must have embed_documents(texts) and embed_query(text)",
                hint="; wrap framework models with fragrel_integrations.models.as_embedder",
            )
        self._embedder = embedder
        self.k = check_min_int(k, "k", 1, hint=" (the paper uses 3-10)")
        if relation is not None:
            check_type(
                relation,
                Relation,
                f"relation must be a fragrel Relation (e.g. ContextRelation({DIALOGUE_W_REL})) or None",
            )
        self.relation = relation
        self.alpha = check_alpha(alpha)
        check_scorer(scorer, SCORERS, allow_callable=False)
        self.scorer = scorer
        if activation == "auto":
            activation = auto_activation(self.controller.model)
        self.activation = activation_gate(activation)
        if not isinstance(summarize, bool):
            raise TypeError(f"summarize must be True or False, got {summarize!r}")
        self.summarize = summarize
        self.item_tokens = check_min_int(item_tokens, "item_tokens", 0, hint=f" (paper: {PAPER_ITEM_TOKENS})")
        self.total_tokens = check_min_int(total_tokens, "total_tokens", 0, hint=f" (paper: {PAPER_TOTAL_TOKENS})")
        self.token_counter = token_counter
        if system_prompt is not None:
            check_type(system_prompt, str, "system_prompt must be str or None")
        self.system_prompt = system_prompt or None
        self.fusion_template = check_template("fusion_template", fusion_template, ("{memory}", "{observation}"))
        self.memory_template = check_template("memory_template", memory_template, ("{memory}",))
        if response_max_tokens is not None:
            check_min_int(response_max_tokens, "response_max_tokens", 1)
        self.response_max_tokens = response_max_tokens
        if index is not None:
            check_type(
                index,
                StreamIndex,
                "index must be a StreamIndex (add/search/delete_session)",
                hint="; wrap a LangChain VectorStore with "
                "fragrel_integrations.langchain.scm_index.VectorStoreStreamIndex(store) or a LlamaIndex vector store "
                "with fragrel_integrations.llama_index.scm_index.VectorStoreStreamIndex(store)",
            )
        self.index = index
        if pool is not None:
            if index is None:
                raise ValueError("pool only applies with an index: pass index=... or leave pool=None")
            check_min_int(
                pool, "pool", self.k + 1, hint=f" (k + 1 = {self.k + 1}: the flash turn is dropped from the pool)"
            )
        self.pool = pool
        #: Per session: the turns' embedding matrix and the lexical gate's names (read by the workflow's steps).
        self.sessions = SessionCache(self.embed)

    # ------------------------------------------------------------------------------------------- helpers

    @property
    def embedder(self) -> Embedder:
        """The embedder (the embedded default is loaded on first access when none was given)."""
        if self._embedder is None:
            from ...models.local import default_embedder

            self._embedder = default_embedder()
        return self._embedder

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` for the budget (see ``token_counter``)."""
        counter = self.token_counter
        if callable(counter) and not hasattr(counter, "count_tokens"):
            return int(counter(text))
        return count_tokens(counter if counter is not None else self.controller.model, text)

    def embed(self, texts: list[str]) -> np.ndarray:
        """The turns' embeddings, checked: a finite float32 ``(len(texts), dim)`` array."""
        return check_embeddings(self.embedder.embed_documents(texts), len(texts))

    def embed_query(self, text: str) -> np.ndarray:
        """The observation's embedding, checked: a finite float32 ``(dim,)`` vector."""
        vector = np.asarray(self.embedder.embed_query(text), dtype=np.float32)
        return check_embeddings(vector[None, :], 1, source="embedder.embed_query")[0]

    @property
    def pool_size(self) -> int:
        """Candidates asked from the index per turn, the flash turn included (see ``pool``)."""
        if self.pool is not None:  # validated to be at least k + 1
            return self.pool
        if self.scorer == "dense" and (self.relation is None or self.alpha == 0.0):
            return self.k + 1
        return max(4 * self.k, 20)

    def scores(
        self,
        query: np.ndarray,
        items: Sequence[MemoryItem],
        embeddings: np.ndarray,
        observation: str | None = None,
        *,
        norms: np.ndarray | None = None,
        layout: FragmentLayout | None = None,
    ) -> np.ndarray:
        """Retrieval scores of ``items``: the ``scorer``'s score (cosine with ``query``; BM25 and hybrid also need
        the ``observation`` text), plus ``alpha * s_env`` with a relation.

        The relation treats the turns as fragments of one conversation (``position`` = interaction index); its
        environment is taken over ``items`` only (the workflow passes every turn but the flash turn, or with an
        ``index`` the pool it returned), with the core's O(N) sums (FragRel eq. 9-10). BM25's statistics are
        likewise those of ``items``. Cosine is computed in the embeddings' precision (float32 turns stay float32);
        ``norms`` (the rows' norms) and ``layout`` (the turns' FragRel layout) may come precomputed.
        """
        e = np.asarray(embeddings)
        if e.dtype not in (np.float32, np.float64):
            e = e.astype(np.float64)
        q = np.asarray(query, dtype=np.float64)
        if e.ndim != 2:
            raise ValueError(f"embeddings must be a 2-D array (one row per turn), got shape {e.shape}")
        if e.shape[1] != q.shape[0]:
            raise ValueError(
                f"stored turn embeddings have dimension {e.shape[1]} but the embedder returns {q.shape[0]}: "
                "use the embedder the stream was written with, or start a new stream"
            )
        s = cosine_similarities(e, q, norms)
        if self.scorer != "dense":
            if not isinstance(observation, str):
                raise ValueError(f"scorer={self.scorer!r} needs the observation text: scores(..., observation=...)")
            cosine = s
            texts = [it.summary or it.text for it in items]
            s = make_scorer(self.scorer, texts, dense=lambda: lambda _: cosine)(observation)
        if self.relation is None or self.alpha == 0.0:
            return s
        if layout is None:
            layout = FragmentLayout.from_fragments([turn_fragment(it) for it in items])
        if self.relation.needs_embeddings:
            layout = replace(layout, embeddings=e)
        return fragrel_scores(s, self.relation.prepare(layout).sums, self.alpha)[1]

    # ------------------------------------------------------------------------------------------- public

    def prepare(self, observation: str, *, session_id: str = DEFAULT_SESSION) -> SCMContext:
        """Steps 1-4: activation decision, flash memory, activated memories (time order), reorganisation."""
        return drive(prepare_steps(self, observation, session_id))

    async def aprepare(self, observation: str, *, session_id: str = DEFAULT_SESSION) -> SCMContext:
        """Async :meth:`prepare` (the model's ``ainvoke``; embedder and SQLite in a worker thread)."""
        return await adrive(prepare_steps(self, observation, session_id))

    def record(self, observation: str, response: str, *, session_id: str = DEFAULT_SESSION) -> MemoryItem:
        """Step 6: summarise, embed and append one interaction to the stream.

        A failing summary call or embedder does not lose the turn: it is stored without a summary or embedding
        and a ``RuntimeWarning`` says so (see the module docstring)."""
        return drive(record_steps(self, observation, response, session_id))

    async def arecord(self, observation: str, response: str, *, session_id: str = DEFAULT_SESSION) -> MemoryItem:
        """Async :meth:`record`."""
        return await adrive(record_steps(self, observation, response, session_id))

    def chat(self, observation: str, *, session_id: str = DEFAULT_SESSION, model: Any = None) -> SCMTurn:
        """A whole turn: prepare, answer with ``model`` (default: the controller's model), write back.

        Once the reply exists the turn is stored whatever fails afterwards (see :meth:`record`); errors before it
        (the observation, the activation question, retrieval, the model's own call) raise and store nothing."""
        return drive(turn_steps(self, observation, session_id, None if model is None else as_chat_model(model)))

    async def achat(self, observation: str, *, session_id: str = DEFAULT_SESSION, model: Any = None) -> SCMTurn:
        """Async :meth:`chat`."""
        steps = turn_steps(self, observation, session_id, None if model is None else as_chat_model(model))
        return await adrive(steps)

    def fusion_messages(self, context: SCMContext) -> list[dict[str, str]]:
        """Step 5 for standalone use: the system prompt and the observation fused with the memory block."""
        return fusion_messages(context, self.system_prompt, self.fusion_template)

    def memory_prompt(self, context: SCMContext) -> str:
        """Step 5 for adapters: a system-message text carrying the memory block ('' when there is none)."""
        return memory_prompt(context, self.memory_template)

    def history(self, session_id: str = DEFAULT_SESSION) -> list[MemoryItem]:
        """The session's memory stream, in time order."""
        return self.stream.items(session_id)

    def clear(self, session_id: str = DEFAULT_SESSION) -> int:
        """Forget a session; returns the number of interactions deleted.

        With an ``index`` its entries of the session are deleted first, so a failing index leaves the stream
        untouched."""
        if self.index is not None:
            self.index.delete_session(check_session(session_id))
        self.sessions.forget(session_id)
        return self.stream.clear(session_id)

    def reindex(self, session_id: str = DEFAULT_SESSION) -> int:
        """Add every stored turn of a session to the ``index`` (for a stream written before the index was
        attached, or after an :class:`SCMIndexError`); returns the number of turns indexed.

        Entries are keyed by interaction index, so running it again rewrites them; the stream is never changed.
        Turns stored without an embedding are embedded with the memory's embedder (not written back).
        """
        return drive(reindex_steps(self, session_id))

    async def areindex(self, session_id: str = DEFAULT_SESSION) -> int:
        """Async :meth:`reindex` (the index, stream and embedder run in a worker thread)."""
        return await adrive(reindex_steps(self, session_id))

    def __repr__(self) -> str:
        return (
            f"SelfControlledMemory(stream={self.stream!r}, index={self.index!r}, k={self.k}, "
            f"relation={self.relation!r}, alpha={self.alpha}, item_tokens={self.item_tokens}, "
            f"total_tokens={self.total_tokens})"
        )


# -- the turn as step generators (run by drive / adrive) ------------------------------------------------------


def check_observation(observation: object) -> str:
    """The user's message: a str (TypeError) that a stream can store (ValueError)."""
    return check_text(observation, "the observation (user message)")


def prepare_steps(memory: SelfControlledMemory, observation: str, session_id: str) -> Steps[SCMContext]:
    """Steps 1-4: the activation decision, the flash turn, the activated turns (time order), reorganisation.

    Reorganisation starts when the recalled turns and the flash turn together exceed ``memory.total_tokens``;
    whatever still exceeds it afterwards (full texts the controller kept, turns without a summary, a huge previous
    turn) is cut in the block (:func:`~.fusion_prompts.fit_memories`), so the block, and the flash turn in the
    activation question, never exceed the budget. ``SCMContext.flash`` and ``memories`` keep the stored items."""
    observation = check_observation(observation)
    session_id = check_session(session_id)
    items: list[MemoryItem] = yield CallStep(memory.stream.items, (session_id,))
    flash = items[-1] if items else None
    candidates = items[:-1]
    activation: Decision | None = None
    gate = memory.activation
    if gate is True and candidates:
        shown_flash, _ = fit_memories(flash, (), memory.total_tokens, memory.count_tokens)  # within the budget
        messages = memory.controller.activation_messages(observation, shown_flash)
        activation = yield from memory.controller.decision_steps(messages, "activation")
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
            activation = gate.decide(cosine_similarities(np.asarray(matrix, dtype=np.float64), query, norms))
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
                    messages = memory.controller.sufficiency_messages(observation, m.item)
                    decision = yield from memory.controller.decision_steps(messages, "sufficiency")
                    recalled[n] = RecalledMemory(m.item, m.score, m.tokens, decision.value, decision)
    block = render_memory_block(*fit_memories(flash, recalled, memory.total_tokens, memory.count_tokens))
    return SCMContext(session_id, observation, activation, flash, tuple(recalled), block)


def record_steps(memory: SelfControlledMemory, observation: str, response: str, session_id: str) -> Steps[MemoryItem]:
    """Summarise, embed, append. Once the turn exists nothing may lose it: a failing summary or embedding
    stores the turn without one (and warns); an interruption (Ctrl-C, a cancelled task) stores it, then stops."""
    observation = check_observation(observation)
    response = check_text(response, "response")
    session_id = check_session(session_id)
    summary, vector, problems = "", None, []
    try:
        if memory.summarize:
            try:
                summary = yield from memory.controller.summary_steps(observation, response)
            except Exception as exc:  # the turn is kept without a summary
                problems.append(
                    f"no summary (the controller failed: {type(exc).__name__}: {exc}), so it is embedded and "
                    "recalled by its full text"
                )
        item_text = summary or MemoryItem(session_id, 0, observation, response).text
        try:
            vector = (yield CallStep(memory.embed, ([item_text],)))[0]
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
    session_id = check_session(session_id)
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
    options = {"temperature": None, "max_tokens": memory.response_max_tokens}
    reply = yield ChatStep(model or memory.controller.model, memory.fusion_messages(context), options)
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
