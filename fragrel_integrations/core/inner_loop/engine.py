"""The inner loop's engine: :class:`InnerLoopEngine` runs the rounds (sync and async) over a retriever and a
chat model."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tqdm.auto import tqdm

from ..._validation import check_min_int, check_query, check_type
from ...models.chat import ChatModel, check_params, context_window
from ...models.convert import as_chat_model
from ...models.structured import ReplyFormat, format_kwargs
from ...models.tokens import count_message_tokens, count_tokens
from ..fragments import Fragment, ScoredFragment
from ..steps import ChatStep, Steps, adrive, drive
from ..token_budget import fit_texts, truncate_to_tokens
from .loop_prompts import (
    DEFAULT_PROMPT_TEMPLATE,
    DEFAULT_SYSTEM_PROMPT,
    NO_NEW_PASSAGES,
    PASSAGE_TOKENS,
    check_prompt_template,
    join_query,
    round_messages,
    strip_memory_label,
)
from .metric import lcs_similarity
from .rounds import (
    AsyncRetriever,
    InnerLoopError,
    InnerLoopResult,
    InnerLoopRound,
    StopReason,
    SyncRetriever,
    fragment_key,
)

__all__ = ["InnerLoopEngine"]


def _as_hits(items: object) -> list[ScoredFragment]:
    if inspect.isawaitable(items):
        if inspect.iscoroutine(items):
            items.close()  # avoid the "never awaited" warning
        raise TypeError(
            "the retriever returned an awaitable: pass an async retriever as aretriever=... (or as the retriever) "
            "and call arun() / astream()"
        )
    if isinstance(items, str | bytes | Mapping) or not isinstance(items, Sequence | Iterator):
        raise TypeError(
            f"the retriever must return a list of ScoredFragment, Fragment or str, got {type(items).__name__}"
        )
    out: list[ScoredFragment] = []
    for i, item in enumerate(items):
        if isinstance(item, ScoredFragment):
            out.append(item)
        elif isinstance(item, Fragment | str):
            out.append(ScoredFragment(Fragment(item) if isinstance(item, str) else item, 0.0, 0.0, 0.0))
        else:
            raise TypeError(
                f"the retriever returned a {type(item).__name__} at [{i}]; each item must be a ScoredFragment, "
                "Fragment or str"
            )
    return out


def _check_bool(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def _check_threshold(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise ValueError(
            f"threshold must be a number in (0, 1] (LCS similarity at which two memories count as converged; "
            f"1.0 = identical), got {value!r}"
        )
    return float(value)


def _is_async_function(fn: object) -> bool:
    """An ``async def`` function or method, or an object whose ``__call__`` is one."""
    if inspect.iscoroutinefunction(fn):
        return True
    return not inspect.isroutine(fn) and inspect.iscoroutinefunction(type(fn).__call__)


def _resolve_retrievers(retriever: object, aretriever: object) -> tuple[SyncRetriever | None, AsyncRetriever | None]:
    sync: Any = retriever
    if retriever is not None and not callable(retriever):
        if not callable(getattr(retriever, "retrieve", None)):
            raise TypeError(
                "retriever must be a function query -> list of ScoredFragment / Fragment / str, or an object with "
                f"retrieve(query) such as a FragRelIndex, got {type(retriever).__name__}; for LangChain or "
                "LlamaIndex retrievers use fragrel_integrations.langchain.InnerLoopRunnable or "
                "fragrel_integrations.llama_index.InnerLoopQueryEngine"
            )
        sync = retriever.retrieve  # type: ignore[attr-defined]  # e.g. a FragRelIndex
        if aretriever is None and callable(getattr(retriever, "aretrieve", None)):
            aretriever = retriever.aretrieve  # type: ignore[attr-defined]
    if sync is not None and _is_async_function(sync):
        if aretriever is not None:
            raise TypeError("retriever is an async function and aretriever is given too: pass only one")
        aretriever, sync = sync, None
    if aretriever is not None and not callable(aretriever):
        raise TypeError(f"aretriever must be an async function query -> list, got {type(aretriever).__name__}")
    return sync, aretriever  # type: ignore[return-value]


class InnerLoopEngine:
    """Answer a question by iterating retrieval and a short-term memory written by ``model`` (ILM-TR inner loop).

    Args:
        retriever: ``query -> list`` of :class:`ScoredFragment`, :class:`Fragment` or ``str`` (best first), or an
            object with such a ``retrieve`` method (a :class:`~fragrel_integrations.FragRelIndex`), or an async
            function (then only :meth:`arun` / :meth:`astream` work). None builds an engine to attach one later
            with :meth:`with_retriever` (the framework adapters do this).
        model: any chat model (:func:`~fragrel_integrations.models.as_chat_model` wraps LangChain and
            LlamaIndex models).
        aretriever: the async form of ``retriever``, used by :meth:`arun`; without it the sync retriever runs
            in a worker thread.
        max_loops: most rounds (ILM-TR uses 5).
        threshold: stop once :func:`lcs_similarity` of consecutive memories reaches it (in (0, 1]).
        max_stm_tokens: the model's output limit per round; the memory is also cut to this many tokens.
        dedupe: show each fragment to the model only in the first round that retrieves it.
        context_tokens: most tokens of passages per round; the model's context window (when it reports one)
            also bounds them. Passages that do not fit are dropped, the last one may be cut.
        system_prompt, prompt_template: the instructions (with a worked example) and the per-round message,
            which must use ``{question}``, ``{memory}`` and ``{context}``. ``system_prompt=None`` sends none.
        temperature: passed to the model (0 = greedy).
        query_separator: joins the question and the memory into the retrieval query (:func:`join_query`).
        show_progress: a tqdm bar over the rounds of each question (it goes away when the question is done);
            False hides it.
        constrained: with a model that enforces reply formats (the embedded llama.cpp model, OpenAI-compatible
            servers), each round's memory is written under :meth:`stm_format` (one line); other models ignore
            it. Off by default.

    >>> from fragrel_integrations.testing import ScriptedChatModel
    >>> engine = InnerLoopEngine(lambda q: ["Sandra took the milk to the hallway."],
    ...                          ScriptedChatModel(["The milk is in the hallway.", ""]), max_loops=3)
    >>> result = engine.run("Where is the milk?")
    >>> result.answer, result.stop_reason, result.converged
    ('The milk is in the hallway.', 'empty_reply', False)
    """

    def __init__(
        self,
        retriever: SyncRetriever | AsyncRetriever | Any | None,
        model: ChatModel | Any,
        *,
        aretriever: AsyncRetriever | None = None,
        max_loops: int = 5,
        threshold: float = 0.9,
        max_stm_tokens: int = 256,
        dedupe: bool = False,
        context_tokens: int | None = None,
        system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
        prompt_template: str = DEFAULT_PROMPT_TEMPLATE,
        temperature: float | None = 0.0,
        query_separator: str = "\n",
        show_progress: bool = True,
        constrained: bool = False,
    ) -> None:
        self._retriever, self._aretriever = _resolve_retrievers(retriever, aretriever)
        self.model = as_chat_model(model)
        self.max_loops = check_min_int(max_loops, "max_loops", 1, hint=" (the paper uses 5)")
        self.threshold = _check_threshold(threshold)
        self.max_stm_tokens = check_min_int(max_stm_tokens, "max_stm_tokens", 1)
        self.dedupe = _check_bool(dedupe, "dedupe")
        self.context_tokens = None if context_tokens is None else check_min_int(context_tokens, "context_tokens", 1)
        if system_prompt is not None:
            check_type(system_prompt, str, "system_prompt must be str or None")
        self.system_prompt = system_prompt or None
        self.prompt_template = check_prompt_template(prompt_template)
        self.temperature = check_params(temperature, None, None)[0]
        check_type(query_separator, str, "query_separator must be str")
        self.query_separator = query_separator
        self.show_progress = _check_bool(show_progress, "show_progress")
        self.constrained = _check_bool(constrained, "constrained")
        # one line of memory, for models that enforce reply formats ({}: free text, the label stripped as before)
        self._format = format_kwargs(self.model, self.stm_format()) if constrained else {}

    def stm_format(self) -> ReplyFormat:
        """The constrained reply of a round with ``constrained=True``: one line that starts with a letter, digit or
        quote (no list, no copied passages on further lines). Its length is bounded by ``max_stm_tokens`` (the
        output limit of each round), not by the pattern: llama.cpp rejects a grammar with a repetition bound in
        the hundreds, and the reply would then not be constrained at all."""
        return ReplyFormat.regex(r"[A-Za-z0-9\"'][^\n]*", name="stm")

    def _settings(self) -> dict[str, Any]:
        """The keyword settings of ``__init__`` (those after ``aretriever``) as this engine holds them."""
        names = list(inspect.signature(InnerLoopEngine).parameters)[3:]
        return {name: getattr(self, name) for name in names}

    def with_retriever(
        self, retriever: SyncRetriever | AsyncRetriever | Any | None, *, aretriever: AsyncRetriever | None = None
    ) -> InnerLoopEngine:
        """A copy of this engine (same model and settings) that retrieves with ``retriever`` / ``aretriever``."""
        return InnerLoopEngine(retriever, self.model, aretriever=aretriever, **self._settings())

    def with_settings(self, **changes: Any) -> InnerLoopEngine:
        """A copy with some settings changed (``max_loops``, ``threshold``, ``dedupe``, ...)."""
        settings = self._settings()
        unknown = sorted(set(changes) - set(settings))
        if unknown:
            raise TypeError(f"unknown settings {unknown}; choose from {sorted(settings)}")
        return InnerLoopEngine(self._retriever, self.model, aretriever=self._aretriever, **{**settings, **changes})

    @property
    def has_sync_retriever(self) -> bool:
        return self._retriever is not None

    @property
    def has_async_retriever(self) -> bool:
        return self._aretriever is not None

    def messages(self, question: str, memory: str, passages: Sequence[str], *, placeholder: str = "") -> list[dict]:
        """The chat messages of one round (system prompt, then the filled ``prompt_template``)."""
        return round_messages(self.system_prompt, self.prompt_template, question, memory, passages, placeholder)

    def _count(self, text: str) -> int:
        return count_tokens(self.model, text)

    def _check_sync(self) -> None:
        if self._retriever is None:
            if self._aretriever is not None:
                raise TypeError("this engine has only an async retriever: use await engine.arun(...) / astream(...)")
            raise TypeError("this engine has no retriever: build it with one, or use engine.with_retriever(...)")

    def _progress(self) -> tqdm:
        return tqdm(total=self.max_loops, desc="inner loop", unit="round", leave=False, disable=not self.show_progress)

    def stream(self, question: str) -> Iterator[InnerLoopResult]:
        """Run the loop, yielding a snapshot after every round; the last one has ``stop_reason`` set.

        Raises :class:`InnerLoopError` (with the completed rounds) if the retriever or the model raises.
        """
        self._check_sync()
        state = _LoopState(check_query(question, what="question").strip())
        with self._progress() as bar:
            while state.stop_reason is None:
                result = drive(self._round(state))
                bar.update(1)
                yield result

    async def astream(self, question: str) -> AsyncIterator[InnerLoopResult]:
        """Async :meth:`stream`: the model's ``ainvoke`` and the async retriever (else the sync one in a thread)."""
        if self._aretriever is None:
            self._check_sync()  # raises the "no retriever" error
        state = _LoopState(check_query(question, what="question").strip())
        with self._progress() as bar:
            while state.stop_reason is None:
                result = await adrive(self._round(state))
                bar.update(1)
                yield result

    def _round(self, state: _LoopState) -> Steps[InnerLoopResult]:
        """One round as steps (retrieve, pick the passages to show, ask the model, record the memory and decide
        whether to stop), run by :func:`drive` or :func:`adrive`."""
        question, memory = state.question, state.memory
        query = join_query(question, memory, self.query_separator)
        try:
            items = yield _Retrieval(self._retriever, self._aretriever, query)
        except Exception as exc:
            raise state.error(exc, "retriever") from exc
        hits = tuple(_as_hits(items))
        fresh = list(hits)
        if self.dedupe:  # fragments shown in an earlier round, and repeats within this one, are left out
            first: dict[Hashable, ScoredFragment] = {}
            for h in hits:
                first.setdefault(fragment_key(h), h)
            fresh = [h for key, h in first.items() if key not in state.seen]
        texts = [h.text for h in fresh]
        budget = self._context_budget(question, memory)
        if budget is not None:
            texts = fit_texts(texts, budget, self._count, separator_tokens=PASSAGE_TOKENS)
        shown = tuple(fresh[: len(texts)])
        state.seen.update(fragment_key(h) for h in shown)
        placeholder = NO_NEW_PASSAGES if hits and not fresh else ""
        messages = self.messages(question, memory, texts, placeholder=placeholder)
        options = {"temperature": self.temperature, "max_tokens": self.max_stm_tokens, "stop": None, **self._format}
        try:
            reply = yield ChatStep(self.model, messages, options)
        except Exception as exc:
            raise state.error(exc, "model") from exc
        check_type(reply, str, "the chat model must return str")
        stm = truncate_to_tokens(strip_memory_label(reply), self.max_stm_tokens, self._count).strip()
        similarity = lcs_similarity(memory, stm) if stm and state.rounds else None
        state.rounds.append(InnerLoopRound(len(state.rounds) + 1, query, hits, shown, reply, stm or memory, similarity))
        state.memory = stm or memory  # an empty reply keeps the previous memory
        if not stm:
            state.stop_reason = "empty_reply"
        elif similarity is not None and similarity >= self.threshold:
            state.stop_reason = "converged"
        elif len(state.rounds) >= self.max_loops:
            state.stop_reason = "max_loops"
        return state.snapshot()

    def _context_budget(self, question: str, memory: str) -> int | None:
        limits = [] if self.context_tokens is None else [self.context_tokens]
        window = context_window(self.model)
        if window is not None:
            skeleton = count_message_tokens(self.model, self.messages(question, memory, [], placeholder=" "))
            limits.append(max(0, window - skeleton - self.max_stm_tokens))
        return min(limits) if limits else None

    def run(self, question: str) -> InnerLoopResult:
        """Run the loop to the end and return the result (``.answer`` is the final STM)."""
        *_, result = self.stream(question)  # the last snapshot (max_loops >= 1: there is one)
        return result

    async def arun(self, question: str) -> InnerLoopResult:
        """Async :meth:`run` (never starts an event loop of its own)."""
        return [result async for result in self.astream(question)][-1]

    def __repr__(self) -> str:
        return (
            f"InnerLoopEngine(model={self.model!r}, max_loops={self.max_loops}, threshold={self.threshold}, "
            f"max_stm_tokens={self.max_stm_tokens}, dedupe={self.dedupe})"
        )


@dataclass(frozen=True, slots=True)
class _Retrieval:
    """The retrieval step of a round: the sync retriever (:func:`drive`); the async one, else the sync one in a
    worker thread (:func:`adrive`)."""

    retrieve: SyncRetriever | None
    aretrieve: AsyncRetriever | None
    query: str

    def run(self) -> Any:
        return self.retrieve(self.query)  # type: ignore[misc]  # stream() checked that there is one

    async def arun(self) -> Any:
        if self.aretrieve is not None:
            return await self.aretrieve(self.query)
        return await asyncio.to_thread(self.retrieve, self.query)  # type: ignore[arg-type]


@dataclass
class _LoopState:
    """The bookkeeping of one run, shared by the sync and async loops."""

    question: str
    memory: str = ""
    rounds: list[InnerLoopRound] = field(default_factory=list)
    seen: set[Hashable] = field(default_factory=set)
    stop_reason: StopReason | None = None

    def snapshot(self, stop_reason: StopReason | None = None) -> InnerLoopResult:
        reason = stop_reason or self.stop_reason
        return InnerLoopResult(self.question, self.memory, tuple(self.rounds), reason == "converged", reason)

    def error(self, exc: Exception, stage: str) -> InnerLoopError:
        return InnerLoopError(
            f"the {stage} raised {type(exc).__name__} in round {len(self.rounds) + 1} of the inner loop: {exc}; "
            f"the {len(self.rounds)} completed round(s) are in .result",
            self.snapshot("error"),
            stage,
        )
