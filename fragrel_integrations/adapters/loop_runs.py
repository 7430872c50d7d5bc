"""What the LangChain and LlamaIndex inner-loop adapters share: the engine behind an adapter, the framework's
retrieved items as core hits (and back), and the partial output an error carries.

>>> from fragrel_integrations.core.fragments import Fragment
>>> hit = scored_from_metadata(Fragment("a", "d", 0), None, {"fragrel_environment_score": 0.25})
>>> hit.score, hit.independent_score, hit.environment_score
(0.0, 0.0, 0.25)
"""

from __future__ import annotations

import numbers
from collections.abc import AsyncIterator, Callable, Hashable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

from .._validation import check_type
from ..core.fragments import Fragment, ScoredFragment
from ..core.inner_loop import InnerLoopEngine, InnerLoopError, InnerLoopResult, fragment_key
from .wrapper_settings import ENVIRONMENT_SCORE_KEY, INDEPENDENT_SCORE_KEY

__all__ = [
    "ADAPTER_SETTINGS",
    "ADAPTER_SETTING_DOCS",
    "arun",
    "astream",
    "bind_retriever",
    "engine_for_adapter",
    "question_of",
    "result_dict",
    "run",
    "scored_from_metadata",
    "stream",
]

T = TypeVar("T")

#: The loop settings the LangChain and LlamaIndex adapters take next to (or instead of) a built engine.
ADAPTER_SETTINGS = ("max_loops", "threshold", "max_stm_tokens", "dedupe", "show_progress")

#: What each loop setting means (None: the engine's own value, or its default).
ADAPTER_SETTING_DOCS: dict[str, str] = {
    "max_loops": "Most rounds (engine default 5).",
    "threshold": "LCS similarity of consecutive memories that counts as converged (engine default 0.9).",
    "max_stm_tokens": "The model's output limit per round and the memory's size limit (engine default 256).",
    "dedupe": "Show each retrieved text to the model only in the first round that retrieves it (default False).",
    "show_progress": "A progress bar over each question's rounds (engine default True; False hides it).",
}


def engine_for_adapter(
    engine: object,
    model: object,
    settings: Mapping[str, Any],
    *,
    has_retriever: bool,
    model_arg: str,
    model_hint: str,
    retriever_hint: str,
) -> InnerLoopEngine:
    """The core engine behind a framework adapter: ``engine`` with ``settings`` applied (those not None), or a
    new engine for ``model``. ``model_arg`` is the adapter's name for the model argument (``"model"``,
    ``"llm"``); the hints name what to pass in the errors (e.g. ``"a LlamaIndex LLM"``)."""
    changes = {name: value for name, value in settings.items() if value is not None}
    if engine is not None:
        check_type(engine, InnerLoopEngine, "engine must be an InnerLoopEngine")
        if model is not None:
            raise ValueError(f"pass either engine=... or {model_arg}=..., not both: the engine already has its model")
        core = engine.with_settings(**changes) if changes else engine
        if not has_retriever and not (core.has_sync_retriever or core.has_async_retriever):
            raise ValueError(f"the engine has no retriever: pass retriever=... ({retriever_hint})")
        return core
    if model is None:
        raise ValueError(
            f"{model_arg} is required: pass {model_hint} (or any ChatModel) as {model_arg}=..., "
            "or a built engine=InnerLoopEngine(...)"
        )
    if not has_retriever:
        raise ValueError(f"retriever is required: pass {retriever_hint} as retriever=...")
    return InnerLoopEngine(None, model, **changes)


def _number(value: object, default: float) -> float:
    return float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else default


def scored_from_metadata(fragment: Fragment, score: float | None, metadata: Mapping[str, Any]) -> ScoredFragment:
    """A retrieved framework object as a core hit: ``score`` is its retriever's score (None: 0); FragRel's
    independent and environment scores are read back from ``metadata`` when a FragRel retriever put them there
    (else the score and 0)."""
    score = 0.0 if score is None else float(score)
    independent = _number(metadata.get(INDEPENDENT_SCORE_KEY), score)
    environment = _number(metadata.get(ENVIRONMENT_SCORE_KEY), 0.0)
    return ScoredFragment(fragment, score, independent, environment)


def bind_retriever(
    engine: InnerLoopEngine,
    calls: tuple[Callable[[str], Any], Callable[[str], Any]] | None,
    items: Callable[[object], list[T]],
    to_hit: Callable[[T], ScoredFragment],
    fresh: Callable[[ScoredFragment], T],
) -> tuple[InnerLoopEngine, Callable[[Iterable[ScoredFragment]], list[T]]]:
    """``engine`` retrieving through a framework retriever for one call, and the conversion of hits back to the
    framework items they came from (``fresh(hit)`` for a hit the engine's own retriever made).

    ``calls`` is the retriever's ``(retrieve, aretrieve)`` returning the framework's result (None: the engine's own
    retriever), ``items`` checks a result into a list of items and ``to_hit`` turns one item into a core hit (e.g.
    with :func:`scored_from_metadata`).
    """
    found: dict[Hashable, T] = {}

    def convert(hits: Iterable[ScoredFragment]) -> list[T]:
        return [fresh(hit) if (item := found.get(fragment_key(hit))) is None else item for hit in hits]

    if calls is None:
        return engine, convert
    retrieve, aretrieve = calls

    def as_hits(result: object) -> list[ScoredFragment]:
        out = []
        for item in items(result):
            hit = to_hit(item)
            found.setdefault(fragment_key(hit), item)
            out.append(hit)
        return out

    async def ahits(query: str) -> list[ScoredFragment]:
        return as_hits(await aretrieve(query))

    return engine.with_retriever(lambda query: as_hits(retrieve(query)), aretriever=ahits), convert


#: What :func:`bind_retriever` returns: the engine for one call and the conversion of hits to framework items.
Bound = tuple[InnerLoopEngine, Callable[[Iterable[ScoredFragment]], list[Any]]]
#: The adapter's output of a loop result, given the conversion of hits (e.g. :func:`result_dict`).
Output = Callable[[InnerLoopResult, Callable[[Iterable[ScoredFragment]], list[Any]]], T]


@contextmanager
def _outputs(bound: Bound, output: Output[T]) -> Iterator[tuple[InnerLoopEngine, Callable[[InnerLoopResult], T]]]:
    """The bound engine and the adapter's ``output`` of a result; an :class:`InnerLoopError` raised inside the
    block gets the output of the completed rounds as ``.output`` (the LangChain dict, the LlamaIndex ``Response``)."""
    engine, items = bound
    try:
        yield engine, lambda result: output(result, items)
    except InnerLoopError as exc:
        exc.output = output(exc.result, items)  # type: ignore[attr-defined]
        raise


def run(bound: Bound, question: str, output: Output[T]) -> T:
    """Run the bound engine on ``question``; its ``output``, which an :class:`InnerLoopError` carries too."""
    with _outputs(bound, output) as (engine, out):
        return out(engine.run(question))


async def arun(bound: Bound, question: str, output: Output[T]) -> T:
    """Async :func:`run`."""
    with _outputs(bound, output) as (engine, out):
        return out(await engine.arun(question))


def stream(bound: Bound, question: str, output: Output[T]) -> Iterator[T]:
    """:func:`run`, yielding the ``output`` of each round's snapshot (the last one is the final result)."""
    with _outputs(bound, output) as (engine, out):
        for snapshot in engine.stream(question):
            yield out(snapshot)


async def astream(bound: Bound, question: str, output: Output[T]) -> AsyncIterator[T]:
    """Async :func:`stream`."""
    with _outputs(bound, output) as (engine, out):
        async for snapshot in engine.astream(question):
            yield out(snapshot)


def question_of(value: object, adapter: str) -> str:
    """The question of an adapter's input: a string, or ``{"question": ...}``; TypeError naming ``adapter``."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and "question" in value:
        return check_type(value["question"], str, 'input["question"] must be str')
    raise TypeError(
        f'{adapter} takes a question string or {{"question": "..."}}, got {type(value).__name__}'
        + (f" with keys {sorted(map(str, value))}" if isinstance(value, Mapping) else "")
    )


def result_dict(result: InnerLoopResult, items: Callable[[Iterable[ScoredFragment]], list[Any]]) -> dict[str, Any]:
    """A loop result as a plain dict whose retrieved texts are the framework's items (``items`` converts hits):
    ``question``, ``answer``, ``supported``, ``converged``, ``stop_reason``, ``rounds`` (``index``, ``query``,
    ``documents`` shown to the model, ``retrieved``, ``reply``, ``stm``, ``similarity``) and ``documents`` (each
    shown once)."""
    rounds = [
        {
            "index": r.index,
            "query": r.query,
            "documents": items(r.shown),
            "retrieved": items(r.retrieved),
            **{name: getattr(r, name) for name in ("reply", "stm", "similarity")},
        }
        for r in result.rounds
    ]
    fields = ("question", "answer", "supported", "converged", "stop_reason")
    return {**{name: getattr(result, name) for name in fields}, "rounds": rounds, "documents": items(result.fragments)}
