"""The inner loop's results: one round (:class:`InnerLoopRound`), a run (:class:`InnerLoopResult`) and the error
that carries the completed rounds (:class:`InnerLoopError`); what a retriever may return."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..fragments import Fragment, ScoredFragment
from ..grounding import supported_by

__all__ = [
    "AsyncRetriever",
    "InnerLoopError",
    "InnerLoopResult",
    "InnerLoopRound",
    "RetrievedItem",
    "StopReason",
    "SyncRetriever",
    "fragment_key",
]

StopReason = Literal["converged", "max_loops", "empty_reply", "error"]
RetrievedItem = ScoredFragment | Fragment | str
SyncRetriever = Callable[[str], Sequence[RetrievedItem]]
AsyncRetriever = Callable[[str], Awaitable[Sequence[RetrievedItem]]]


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

    ``answer`` is the current STM (:meth:`format` marks it when the retrieved text does not support it).
    ``stop_reason`` is None while the loop is still running (streamed
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
        first: dict[Hashable, ScoredFragment] = {}
        for r in self.rounds:
            for hit in r.shown:
                first.setdefault(fragment_key(hit), hit)
        return list(first.values())

    @property
    def supported(self) -> bool:
        """Whether the fragments shown to the model support :attr:`answer`: the check of
        :func:`~fragrel_integrations.core.grounding.answer_span` against the sentences of those fragments (after a
        leading label, the answer is a contiguous run of words of one sentence, negations and numbers agreeing)."""
        return supported_by(self.answer, [hit.fragment.text for hit in self.fragments], self.question) is not None

    def format(self) -> str:
        """The answer to print: :attr:`answer` when :attr:`supported`, else marked as not supported by the
        retrieved text (a small model's memory is often a guess)."""
        if self.supported:
            return self.answer
        if not self.answer.strip():
            return "The retrieved text does not state an answer to this question."
        return f"Not supported by the retrieved text (the model's answer): {self.answer}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable trace of the run."""
        return {
            "question": self.question,
            "answer": self.answer,
            "supported": self.supported,
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
