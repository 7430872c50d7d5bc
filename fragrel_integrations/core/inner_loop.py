"""ILM-TR's inner loop with a short-term memory (STM), framework-free.

The answer model reads the question in rounds. Each round retrieves with the question *plus* the current STM
(joined by :func:`join_query`), shows the model the question, the retrieved passages and its current STM, and
takes the model's reply as the new STM: the answer so far together with the facts that support it. The loop
stops when two consecutive memories agree (:func:`lcs_similarity` >= ``threshold``) or after ``max_loops``
rounds; the final STM is the answer.

Stop reasons: ``"converged"``, ``"max_loops"``, and ``"empty_reply"`` (the model returned blank text: the
previous STM is kept as the answer and the loop stops, since asking again with the same memory would repeat the
same request). A retriever or model that raises ends the loop with :class:`InnerLoopError`, whose ``.result``
holds every completed round.

>>> from fragrel_integrations.testing import ScriptedChatModel
>>> story = ["Mary went to the kitchen.", "Mary picked up the apple.", "Mary walked to the garden."]
>>> model = ScriptedChatModel(["The apple is with Mary in the garden.", "The apple is with Mary in the garden."])
>>> engine = InnerLoopEngine(lambda query: story, model)
>>> result = engine.run("Where is the apple?")
>>> result.answer, len(result.rounds), result.stop_reason
('The apple is with Mary in the garden.', 2, 'converged')
>>> result.rounds[1].query
'Where is the apple?\\nThe apple is with Mary in the garden.'
"""

from __future__ import annotations

import asyncio
import inspect
import re
import string
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tqdm.auto import tqdm

from .._validation import check_min_int
from ..models.chat import ChatModel, check_params, context_window
from ..models.convert import as_chat_model
from ..models.structured import ReplyFormat, format_kwargs
from ..models.tokens import count_message_tokens, count_tokens, fit_texts, truncate_to_tokens
from .types import Fragment, ScoredFragment

__all__ = [
    "DEFAULT_PROMPT_TEMPLATE",
    "DEFAULT_SYSTEM_PROMPT",
    "InnerLoopEngine",
    "InnerLoopError",
    "InnerLoopResult",
    "InnerLoopRound",
    "RetrievedItem",
    "StopReason",
    "fragment_key",
    "join_query",
    "lcs_length",
    "lcs_similarity",
    "lcs_tokens",
]

StopReason = Literal["converged", "max_loops", "empty_reply", "error"]
RetrievedItem = ScoredFragment | Fragment | str
SyncRetriever = Callable[[str], Sequence[RetrievedItem]]
AsyncRetriever = Callable[[str], Awaitable[Sequence[RetrievedItem]]]

DEFAULT_SYSTEM_PROMPT = """\
You answer a question by reading passages over several rounds, keeping a short-term memory between rounds. \
The memory is a few sentences: your best answer so far and the facts that support it.

Each round you get the question, your current memory and the passages retrieved for this round. Write the \
updated memory:
- keep the facts from your memory that still matter for the question;
- add what the new passages say about the question, and correct what they contradict;
- say the answer plainly as soon as you can; if it is still unknown, say what is missing;
- leave out everything that does not help answer the question.
Reply with the updated memory only.

Example.
Passages:
[1] Daniel went back to the office.
[2] Sandra journeyed to the kitchen.
Question: Where is the football?
Your memory so far: Daniel picked up the football and took it to the garden, so the football is in the garden.
Updated memory: Daniel carried the football from the garden to the office, so the football is in the office."""

DEFAULT_PROMPT_TEMPLATE = """\
Passages:
{context}

Question: {question}
Your memory so far: {memory}

Write your updated memory now: one or two plain sentences that answer the question."""

_EMPTY_MEMORY = "(empty)"
_NO_PASSAGES = "(no passages were retrieved)"
_NO_NEW_PASSAGES = "(no new passages; the earlier ones are already reflected in your memory)"
_TEMPLATE_FIELDS = frozenset({"question", "memory", "context"})
_PASSAGE_TOKENS = 4  # "[12] " and the line break around each passage
_LABEL = re.compile(r"^\s*(?:updated\s+)?memory\s*:\s*", re.IGNORECASE)
_WORD = re.compile(r"\w+", re.UNICODE)


# ------------------------------------------------------------------------------------------------------ LCS


def lcs_length(a: Sequence[Hashable], b: Sequence[Hashable]) -> int:
    """Length of the longest common subsequence of two token sequences (O(len(a)·len(b)) time, O(len(b)) memory).

    >>> lcs_length("ABCBDAB", "BDCABA")
    4
    >>> lcs_length([], ["x"])
    0
    """
    if len(a) < len(b):
        a, b = b, a
    if not b:
        return 0
    row = [0] * (len(b) + 1)
    for x in a:
        diagonal = 0  # row[j - 1] of the previous row
        for j, y in enumerate(b, start=1):
            above = row[j]
            row[j] = diagonal + 1 if x == y else max(above, row[j - 1])
            diagonal = above
    return row[-1]


def lcs_tokens(text: str) -> list[str]:
    """The tokens memories are compared on: lower-cased runs of letters and digits (punctuation is ignored).

    >>> lcs_tokens("The apple is in the Garden.")
    ['the', 'apple', 'is', 'in', 'the', 'garden']
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    return _WORD.findall(text.lower())


def lcs_similarity(a: str, b: str) -> float:
    """Normalised LCS similarity of two texts: ``LCS(tokens(a), tokens(b)) / max(len(tokens(a)), len(tokens(b)))``.

    1.0 for identical token sequences (two texts without tokens count as identical), 0.0 when one is empty.
    Tokens are :func:`lcs_tokens`.

    >>> lcs_similarity("the apple is in the garden", "The apple is in the kitchen.")
    0.8333333333333334
    >>> lcs_similarity("", "anything")
    0.0
    """
    ta, tb = lcs_tokens(a), lcs_tokens(b)
    longest = max(len(ta), len(tb))
    if longest == 0:
        return 1.0
    return lcs_length(ta, tb) / longest


def join_query(question: str, memory: str, separator: str = "\n") -> str:
    """The retrieval query of a round: the question, then the current STM (if any), joined by ``separator``.

    >>> join_query("Where is the apple?", "")
    'Where is the apple?'
    >>> join_query("Where is the apple?", "Mary has it.", " ")
    'Where is the apple? Mary has it.'
    """
    memory = memory.strip()
    return f"{question}{separator}{memory}" if memory else question


# ------------------------------------------------------------------------------------------------ results


@dataclass(frozen=True, slots=True)
class InnerLoopRound:
    """One round of the loop.

    ``retrieved`` is everything the retriever returned; ``shown`` the part the model saw (fragments shown in an
    earlier round are left out with ``dedupe=True``, and the context budget may drop the last ones). ``reply``
    is the model's raw text, ``stm`` the memory after this round (the cleaned reply, cut to ``max_stm_tokens``;
    the previous memory after an empty reply). ``similarity`` is :func:`lcs_similarity` of ``stm`` and the
    previous memory; None in the first round (there is no previous memory) and after an empty reply.
    """

    index: int
    query: str
    retrieved: tuple[ScoredFragment, ...]
    shown: tuple[ScoredFragment, ...]
    reply: str
    stm: str
    similarity: float | None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable view (fragment metadata is left out); each retrieved item says if it was shown."""
        shown = {id(h) for h in self.shown}
        return {
            "index": self.index,
            "query": self.query,
            "retrieved": [{**_fragment_dict(h), "shown": id(h) in shown} for h in self.retrieved],
            "reply": self.reply,
            "stm": self.stm,
            "similarity": self.similarity,
        }


def _fragment_dict(hit: ScoredFragment) -> dict[str, Any]:
    f = hit.fragment
    return {"text": f.text, "doc_id": f.doc_id, "position": f.position, "score": hit.score}


@dataclass(frozen=True, slots=True)
class InnerLoopResult:
    """The outcome (or, while streaming, the state) of a run.

    ``answer`` is the current STM. ``stop_reason`` is None while the loop is still running (streamed
    snapshots), then one of ``"converged"``, ``"max_loops"``, ``"empty_reply"``, or ``"error"`` (only in
    :attr:`InnerLoopError.result`).
    """

    question: str
    answer: str
    rounds: tuple[InnerLoopRound, ...]
    converged: bool
    stop_reason: StopReason | None

    @property
    def done(self) -> bool:
        """Whether the loop has stopped."""
        return self.stop_reason is not None

    @property
    def fragments(self) -> list[ScoredFragment]:
        """The fragments the model was shown, over all rounds, each once (first showing), in order."""
        seen: set[Hashable] = set()
        out = []
        for r in self.rounds:
            for hit in r.shown:
                key = fragment_key(hit)
                if key not in seen:
                    seen.add(key)
                    out.append(hit)
        return out

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable trace of the run."""
        return {
            "question": self.question,
            "answer": self.answer,
            "converged": self.converged,
            "stop_reason": self.stop_reason,
            "rounds": [r.to_dict() for r in self.rounds],
        }


class InnerLoopError(RuntimeError):
    """The retriever or the model raised during the loop. ``.result`` holds the completed rounds (stop reason
    ``"error"``), ``.stage`` is ``"retriever"`` or ``"model"``, and the original exception is ``__cause__``."""

    def __init__(self, message: str, result: InnerLoopResult, stage: str) -> None:
        super().__init__(message)
        self.result = result
        self.stage = stage


def fragment_key(hit: ScoredFragment) -> Hashable:
    """What makes two retrieved fragments "the same" for ``dedupe``: document, position and text."""
    f = hit.fragment
    return (f.doc_id, f.position, f.text)


def _as_hits(items: object, source: str) -> list[ScoredFragment]:
    if inspect.isawaitable(items):
        if inspect.iscoroutine(items):
            items.close()  # avoid the "never awaited" warning
        raise TypeError(
            f"{source} returned an awaitable: pass an async retriever as aretriever=... (or as the retriever) "
            "and call arun() / astream()"
        )
    if isinstance(items, str | bytes | Mapping) or not isinstance(items, Sequence | Iterator):
        raise TypeError(f"{source} must return a list of ScoredFragment, Fragment or str, got {type(items).__name__}")
    out: list[ScoredFragment] = []
    for i, item in enumerate(items):
        if isinstance(item, ScoredFragment):
            out.append(item)
        elif isinstance(item, Fragment):
            out.append(ScoredFragment(item, 0.0, 0.0, 0.0))
        elif isinstance(item, str):
            out.append(ScoredFragment(Fragment(item), 0.0, 0.0, 0.0))
        else:
            raise TypeError(
                f"{source} returned a {type(item).__name__} at [{i}]; each item must be a ScoredFragment, "
                "Fragment or str"
            )
    return out


# ------------------------------------------------------------------------------------------------ checks


def _check_threshold(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise ValueError(
            f"threshold must be a number in (0, 1] (LCS similarity at which two memories count as converged; "
            f"1.0 = identical), got {value!r}"
        )
    return float(value)


def _check_template(template: object) -> str:
    if not isinstance(template, str):
        raise TypeError(f"prompt_template must be str, got {type(template).__name__}")
    try:
        names = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        raise ValueError(
            f"prompt_template is not a valid format string ({exc}); write literal braces as {{{{ and }}}}"
        ) from exc
    if names != _TEMPLATE_FIELDS:
        raise ValueError(
            f"prompt_template must use exactly the fields {{question}}, {{memory}} and {{context}}, got {sorted(names)}"
        )
    return template


def _check_question(question: object) -> str:
    if not isinstance(question, str):
        raise TypeError(f"question must be str, got {type(question).__name__}")
    if not question.strip():
        raise ValueError("question is empty: pass the user's question as a non-blank string")
    return question.strip()


def _is_async_function(fn: object) -> bool:
    """An ``async def`` function or method, or an object whose ``__call__`` is one."""
    if inspect.iscoroutinefunction(fn):
        return True
    return not inspect.isroutine(fn) and inspect.iscoroutinefunction(type(fn).__call__)


def _resolve_retrievers(retriever: object, aretriever: object) -> tuple[SyncRetriever | None, AsyncRetriever | None]:
    sync: Any = None
    if retriever is not None:
        if callable(retriever):
            sync = retriever
        elif callable(getattr(retriever, "retrieve", None)):  # e.g. a FragRelIndex
            sync = retriever.retrieve  # type: ignore[attr-defined]
            if aretriever is None and callable(getattr(retriever, "aretrieve", None)):
                aretriever = retriever.aretrieve  # type: ignore[attr-defined]
        else:
            raise TypeError(
                "retriever must be a function query -> list of ScoredFragment / Fragment / str, or an object with "
                f"retrieve(query) such as a FragRelIndex, got {type(retriever).__name__}; for LangChain or "
                "LlamaIndex retrievers use fragrel_integrations.langchain.InnerLoopRunnable or "
                "fragrel_integrations.llama_index.InnerLoopQueryEngine"
            )
        if _is_async_function(sync):
            if aretriever is not None:
                raise TypeError("retriever is an async function and aretriever is given too: pass only one")
            aretriever, sync = sync, None
    if aretriever is not None and not callable(aretriever):
        raise TypeError(f"aretriever must be an async function query -> list, got {type(aretriever).__name__}")
    return sync, aretriever  # type: ignore[return-value]


# ------------------------------------------------------------------------------------------------ engine


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
            it. Off by default. With SmolLM2-135M on 100 bAbI qa2/qa3 dev questions it made every memory one
            line (free: 86%) at the same accuracy and 13% less time (benchmarks/results/inner_loop_qa23.md).

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
        if not isinstance(dedupe, bool):
            raise TypeError(f"dedupe must be True or False, got {dedupe!r}")
        self.dedupe = dedupe
        self.context_tokens = None if context_tokens is None else check_min_int(context_tokens, "context_tokens", 1)
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise TypeError(f"system_prompt must be str or None, got {type(system_prompt).__name__}")
        self.system_prompt = system_prompt or None
        self.prompt_template = _check_template(prompt_template)
        self.temperature = check_params(temperature, None, None)[0]
        if not isinstance(query_separator, str):
            raise TypeError(f"query_separator must be str, got {type(query_separator).__name__}")
        self.query_separator = query_separator
        if not isinstance(show_progress, bool):
            raise TypeError(f"show_progress must be True or False, got {show_progress!r}")
        self.show_progress = show_progress
        if not isinstance(constrained, bool):
            raise TypeError(f"constrained must be True or False, got {constrained!r}")
        self.constrained = constrained
        # one line of memory, for models that enforce reply formats ({}: free text, the label stripped as before)
        self._format = format_kwargs(self.model, self.stm_format()) if constrained else {}

    def stm_format(self) -> ReplyFormat:
        """The constrained reply of a round with ``constrained=True``: one line that starts with a letter, digit or
        quote (no list, no copied passages on further lines). Its length is bounded by ``max_stm_tokens`` (the
        output limit of each round), not by the pattern: llama.cpp rejects a grammar with a repetition bound in
        the hundreds, and the reply would then not be constrained at all."""
        return ReplyFormat.regex(r"[A-Za-z0-9\"'][^\n]*", name="stm")

    # -------------------------------------------------------------------------------------------- building

    def _settings(self) -> dict[str, Any]:
        return {
            "max_loops": self.max_loops,
            "threshold": self.threshold,
            "max_stm_tokens": self.max_stm_tokens,
            "dedupe": self.dedupe,
            "context_tokens": self.context_tokens,
            "system_prompt": self.system_prompt,
            "prompt_template": self.prompt_template,
            "temperature": self.temperature,
            "query_separator": self.query_separator,
            "show_progress": self.show_progress,
            "constrained": self.constrained,
        }

    def with_retriever(
        self, retriever: SyncRetriever | AsyncRetriever | Any | None, *, aretriever: AsyncRetriever | None = None
    ) -> InnerLoopEngine:
        """A copy of this engine (same model and settings) that retrieves with ``retriever`` / ``aretriever``."""
        return InnerLoopEngine(retriever, self.model, aretriever=aretriever, **self._settings())

    def with_settings(self, **changes: Any) -> InnerLoopEngine:
        """A copy with some settings changed (``max_loops``, ``threshold``, ``dedupe``, ...)."""
        unknown = sorted(set(changes) - set(self._settings()))
        if unknown:
            raise TypeError(f"unknown settings {unknown}; choose from {sorted(self._settings())}")
        return InnerLoopEngine(
            self._retriever, self.model, aretriever=self._aretriever, **{**self._settings(), **changes}
        )

    @property
    def has_sync_retriever(self) -> bool:
        return self._retriever is not None

    @property
    def has_async_retriever(self) -> bool:
        return self._aretriever is not None

    # -------------------------------------------------------------------------------------------- prompts

    def messages(self, question: str, memory: str, passages: Sequence[str], *, placeholder: str = "") -> list[dict]:
        """The chat messages of one round (system prompt, then the filled ``prompt_template``)."""
        if passages:
            context = "\n".join(f"[{i}] {p}" for i, p in enumerate(passages, start=1))
        else:
            context = placeholder or _NO_PASSAGES
        user = self.prompt_template.format(question=question, memory=memory or _EMPTY_MEMORY, context=context)
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return [*system, {"role": "user", "content": user}]

    def _context_budget(self, question: str, memory: str) -> int | None:
        limits = [] if self.context_tokens is None else [self.context_tokens]
        window = context_window(self.model)
        if window is not None:
            skeleton = count_message_tokens(self.model, self.messages(question, memory, [], placeholder=" "))
            limits.append(max(0, window - skeleton - self.max_stm_tokens))
        return min(limits) if limits else None

    def _clean(self, reply: str) -> str:
        text = _LABEL.sub("", reply.strip(), count=1).strip()
        return truncate_to_tokens(text, self.max_stm_tokens, self._count).strip()

    def _count(self, text: str) -> int:
        return count_tokens(self.model, text)

    # -------------------------------------------------------------------------------------------- running

    def _check_sync(self) -> SyncRetriever:
        if self._retriever is None:
            if self._aretriever is not None:
                raise TypeError("this engine has only an async retriever: use await engine.arun(...) / astream(...)")
            raise TypeError("this engine has no retriever: build it with one, or use engine.with_retriever(...)")
        return self._retriever

    def stream(self, question: str) -> Iterator[InnerLoopResult]:
        """Run the loop, yielding a snapshot after every round; the last one has ``stop_reason`` set.

        Raises :class:`InnerLoopError` (with the completed rounds) if the retriever or the model raises.
        """
        retrieve = self._check_sync()
        state = _LoopState(self, _check_question(question))
        with self._progress() as bar:
            yield from self._sync_rounds(state, retrieve, bar)

    def _progress(self) -> tqdm:
        return tqdm(total=self.max_loops, desc="inner loop", unit="round", leave=False, disable=not self.show_progress)

    def _sync_rounds(self, state: _LoopState, retrieve: SyncRetriever, bar: tqdm) -> Iterator[InnerLoopResult]:
        while not state.done:
            query = state.query()
            try:
                items = retrieve(query)
            except Exception as exc:
                raise state.error(exc, "retriever") from exc
            messages = state.prepare(query, _as_hits(items, "the retriever"))
            try:
                reply = self.model.invoke(
                    messages, temperature=self.temperature, max_tokens=self.max_stm_tokens, stop=None, **self._format
                )
            except Exception as exc:
                raise state.error(exc, "model") from exc
            result = state.accept(reply)
            bar.update(1)
            yield result

    async def astream(self, question: str) -> AsyncIterator[InnerLoopResult]:
        """Async :meth:`stream`: the model's ``ainvoke`` and the async retriever (else the sync one in a thread)."""
        if self._retriever is None and self._aretriever is None:
            self._check_sync()  # raises the "no retriever" error
        state = _LoopState(self, _check_question(question))
        with self._progress() as bar:
            async for result in self._async_rounds(state, bar):
                yield result

    async def _async_rounds(self, state: _LoopState, bar: tqdm) -> AsyncIterator[InnerLoopResult]:
        while not state.done:
            query = state.query()
            try:
                if self._aretriever is not None:
                    items = await self._aretriever(query)
                else:
                    items = await asyncio.to_thread(self._retriever, query)  # type: ignore[arg-type]
            except Exception as exc:
                raise state.error(exc, "retriever") from exc
            messages = state.prepare(query, _as_hits(items, "the retriever"))
            try:
                reply = await self.model.ainvoke(
                    messages, temperature=self.temperature, max_tokens=self.max_stm_tokens, stop=None, **self._format
                )
            except Exception as exc:
                raise state.error(exc, "model") from exc
            result = state.accept(reply)
            bar.update(1)
            yield result

    def run(self, question: str) -> InnerLoopResult:
        """Run the loop to the end and return the result (``.answer`` is the final STM)."""
        result: InnerLoopResult | None = None
        for result in self.stream(question):  # noqa: B007 - the last snapshot is the result
            pass
        return result  # type: ignore[return-value]  # max_loops >= 1: at least one snapshot

    async def arun(self, question: str) -> InnerLoopResult:
        """Async :meth:`run` (never starts an event loop of its own)."""
        result: InnerLoopResult | None = None
        async for result in self.astream(question):  # noqa: B007
            pass
        return result  # type: ignore[return-value]

    def __repr__(self) -> str:
        return (
            f"InnerLoopEngine(model={self.model!r}, max_loops={self.max_loops}, threshold={self.threshold}, "
            f"max_stm_tokens={self.max_stm_tokens}, dedupe={self.dedupe})"
        )


@dataclass
class _LoopState:
    """The bookkeeping of one run, shared by the sync and async loops."""

    engine: InnerLoopEngine
    question: str
    memory: str = ""
    rounds: list[InnerLoopRound] = field(default_factory=list)
    seen: set[Hashable] = field(default_factory=set)
    converged: bool = False
    stop_reason: StopReason | None = None
    _pending: tuple[str, tuple[ScoredFragment, ...], tuple[ScoredFragment, ...]] | None = None

    @property
    def done(self) -> bool:
        return self.stop_reason is not None

    def query(self) -> str:
        return join_query(self.question, self.memory, self.engine.query_separator)

    def prepare(self, query: str, hits: list[ScoredFragment]) -> list[dict]:
        """Pick the passages to show (dedupe, budget) and build the round's messages."""
        engine = self.engine
        fresh = [h for h in hits if fragment_key(h) not in self.seen] if engine.dedupe else list(hits)
        if engine.dedupe:  # one fragment retrieved twice in the same round is shown once
            unique: dict[Hashable, ScoredFragment] = {}
            for h in fresh:
                unique.setdefault(fragment_key(h), h)
            fresh = list(unique.values())
        budget = engine._context_budget(self.question, self.memory)
        texts = [h.text for h in fresh]
        if budget is not None:
            texts = fit_texts(texts, budget, engine._count, separator_tokens=_PASSAGE_TOKENS)
        shown = tuple(fresh[: len(texts)])
        self.seen.update(fragment_key(h) for h in shown)
        self._pending = (query, tuple(hits), shown)
        placeholder = _NO_NEW_PASSAGES if hits and not fresh else _NO_PASSAGES
        return engine.messages(self.question, self.memory, texts, placeholder=placeholder)

    def accept(self, reply: object) -> InnerLoopResult:
        """Record the model's reply as the new memory and decide whether to stop."""
        if not isinstance(reply, str):
            raise TypeError(f"the chat model must return str, got {type(reply).__name__}")
        if self._pending is None:  # pragma: no cover - internal invariant
            raise RuntimeError("internal error: accept() called before prepare()")
        query, hits, shown = self._pending
        self._pending = None
        stm = self.engine._clean(reply)
        index = len(self.rounds) + 1
        if not stm:
            self.rounds.append(InnerLoopRound(index, query, hits, shown, reply, self.memory, None))
            self.stop_reason = "empty_reply"
            return self.snapshot()
        similarity = lcs_similarity(self.memory, stm) if self.rounds else None
        self.rounds.append(InnerLoopRound(index, query, hits, shown, reply, stm, similarity))
        self.memory = stm
        if similarity is not None and similarity >= self.engine.threshold:
            self.converged, self.stop_reason = True, "converged"
        elif index >= self.engine.max_loops:
            self.stop_reason = "max_loops"
        return self.snapshot()

    def snapshot(self, stop_reason: StopReason | None = None) -> InnerLoopResult:
        return InnerLoopResult(
            self.question, self.memory, tuple(self.rounds), self.converged, stop_reason or self.stop_reason
        )

    def error(self, exc: Exception, stage: str) -> InnerLoopError:
        result = self.snapshot("error")
        return InnerLoopError(
            f"the {stage} raised {type(exc).__name__} in round {len(self.rounds) + 1} of the inner loop: {exc}; "
            f"the {len(self.rounds)} completed round(s) are in .result",
            result,
            stage,
        )
