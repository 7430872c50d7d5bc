"""Yes/no answers by probability: an optional capability of a chat model.

A yes/no question parsed from free text depends on the words a model happens to write; a small model often writes
the same word to every question. When the backend exposes the next-token distribution, the reply's first token
says more: :class:`YesNoScorer` models have

* ``yes_no_probability(messages) -> float | None`` and ``async ayes_no_probability(messages) -> float | None``:
  ``P(yes) / (P(yes) + P(no))`` for the first token of the assistant's reply, where ``P(yes)`` sums the
  probabilities of the tokens spelling *yes* (``yes``, ``Yes``, ``YES``, each with or without a leading space)
  and ``P(no)`` those spelling *no*. None means "this backend (or this server) gave no probabilities"; the
  caller then parses the text reply instead.

:class:`~fragrel_integrations.models.llama_cpp_chat.LlamaCppChatModel` computes it from llama.cpp's logits;
:class:`~fragrel_integrations.models.openai_chat.OpenAIChatModel` from ``logprobs``/``top_logprobs`` of a one-token
completion (None when the server returns none); ``LangChainChatModel`` and ``LlamaIndexChatModel`` (through
:class:`LogprobsYesNo`) from the OpenAI-style logprobs of framework models that have ``logprobs`` /
``top_logprobs`` fields (``ChatOpenAI``; LlamaIndex ``OpenAI`` / ``OpenAILike`` chat LLMs); ``CachedChatModel`` and
``RetryingChatModel`` pass it through. Other models (your own objects, framework models without those fields)
do not have it: :func:`yes_no_probability` returns None for them.

>>> from fragrel_integrations.testing import ScriptedChatModel
>>> yes_no_probability(ScriptedChatModel(["yes"]), "Is water wet?") is None
True
>>> round(yes_no_from_logprobs([("Yes", -0.1), ("No", -2.5), ("Maybe", -3.0)]), 3)
0.917
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

from .chat import Messages

__all__ = [
    "NO_WORDS",
    "YES_WORDS",
    "LogprobsYesNo",
    "YesNoScorer",
    "ayes_no_probability",
    "single_token_ids",
    "yes_no_from_logprobs",
    "yes_no_probability",
]

#: Token spellings that count as "yes" / "no" (compared after stripping spaces; case as listed).
YES_WORDS = frozenset({"yes", "Yes", "YES"})
NO_WORDS = frozenset({"no", "No", "NO"})


logger = logging.getLogger(__name__)


def single_token_ids(tokenize: Callable[[str], Sequence[int]], words: Iterable[str]) -> tuple[int, ...]:
    """The ids of every spelling in ``words`` (with and without a leading space) that is one token for
    ``tokenize`` (text -> token ids, no special tokens).

    >>> single_token_ids(lambda t: [len(t)] if t.strip() == "yes" else [1, 2], ["yes", "no"])
    (3, 4)
    """
    ids = set()
    for word in words:
        for text in (word, " " + word):
            tokens = tokenize(text)
            if len(tokens) == 1:
                ids.add(int(tokens[0]))
    return tuple(sorted(ids))


#: Alternatives asked for the first reply token of a yes/no question by the framework adapters.
TOP_LOGPROBS = 20


@runtime_checkable
class YesNoScorer(Protocol):
    """A chat model that can say how likely its reply starts with *yes* rather than *no* (see the module doc)."""

    def yes_no_probability(self, messages: Messages) -> float | None: ...

    async def ayes_no_probability(self, messages: Messages) -> float | None: ...


def _logsumexp(values: list[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def yes_no_from_logprobs(candidates: Iterable[tuple[str, float]], *, complete: bool = False) -> float | None:
    """``P(yes) / (P(yes) + P(no))`` from ``(token text, log probability)`` pairs of the first reply token.

    Tokens are matched after stripping whitespace against :data:`YES_WORDS` / :data:`NO_WORDS`. With
    ``complete=False`` the pairs are a top-k list (an OpenAI ``top_logprobs``): a side that is missing from it is
    given the smallest listed probability (an upper bound of its real probability, so the answer leans to the
    middle rather than to certainty). None when neither side is listed, or for no pairs. With ``complete=True`` (the
    whole vocabulary) a missing side has probability 0.

    >>> yes_no_from_logprobs([("Yes", -1.0), (" yes", -1.0), ("No", -1.0)])  # two spellings of yes, one of no
    0.666...
    >>> yes_no_from_logprobs([("Sure", -0.1), ("Maybe", -2.0)]) is None
    True
    """
    pairs = [(str(t).strip(), float(lp)) for t, lp in candidates]
    pairs = [(t, lp) for t, lp in pairs if not math.isnan(lp)]
    yes = [lp for t, lp in pairs if t in YES_WORDS]
    no = [lp for t, lp in pairs if t in NO_WORDS]
    if not yes and not no:
        return None
    floor = min(lp for _, lp in pairs)
    if not yes:
        if complete:
            return 0.0
        yes = [floor]
    if not no:
        if complete:
            return 1.0
        no = [floor]
    diff = _logsumexp(yes) - _logsumexp(no)
    if diff >= 0:
        return 1.0 / (1.0 + math.exp(-diff))
    e = math.exp(diff)
    return e / (1.0 + e)


def _checked(value: object, model: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(
            f"{type(model).__name__}.yes_no_probability returned {value!r}; it must return a probability in "
            "[0, 1] or None"
        )
    return float(value)


def yes_no_probability(model: object, messages: Messages) -> float | None:
    """``model.yes_no_probability(messages)`` when the model has it (checked to be in [0, 1]), else None."""
    if not isinstance(model, YesNoScorer):
        return None
    return _checked(model.yes_no_probability(messages), model)


async def ayes_no_probability(model: object, messages: Messages) -> float | None:
    """Async :func:`yes_no_probability` (``ayes_no_probability`` of the model, never blocking the event loop)."""
    if not isinstance(model, YesNoScorer):
        return None
    return _checked(await model.ayes_no_probability(messages), model)


class LogprobsYesNo:
    """:class:`YesNoScorer` for adapters of framework models that return OpenAI-style ``logprobs``: asks a
    one-token reply with ``logprobs`` / ``top_logprobs`` and reads the first token's alternatives.

    Subclasses define ``_asks_logprobs()`` (whether the wrapped model can be asked), ``_logprobs_reply`` /
    ``_alogprobs_reply`` (the call) and ``_first_token_logprobs(reply)`` (``(token, logprob)`` pairs, or None
    when the reply has none). A model that returns or refuses none is noted (``logprobs_supported = False``) and
    not asked again; other errors raise.
    """

    logprobs_supported: bool | None = None
    model_name: str = "model"

    def _asks_logprobs(self) -> bool:
        raise NotImplementedError

    def _logprobs_reply(self, messages: Messages) -> Any:
        raise NotImplementedError

    async def _alogprobs_reply(self, messages: Messages) -> Any:
        raise NotImplementedError

    def _first_token_logprobs(self, reply: Any) -> list[tuple[str, float]] | None:
        raise NotImplementedError

    def _refused(self, exc: Exception) -> None:
        """Asked once: a first logprobs request that fails (other than a lost connection or a timeout) means
        the model gives none; it is not asked again. Later failures raise."""
        if self.logprobs_supported or isinstance(exc, ConnectionError | TimeoutError):
            raise exc
        self._no_logprobs(f"the model refused logprobs: {exc}")

    def _no_logprobs(self, why: str) -> None:
        if self.logprobs_supported is not False:
            logger.warning("%s: yes/no questions fall back to parsing the reply text (%s)", self.model_name, why)
        self.logprobs_supported = False

    def _probability(self, reply: Any) -> float | None:
        pairs = self._first_token_logprobs(reply)
        if not pairs:
            self._no_logprobs("it returned no logprobs")
            return None
        self.logprobs_supported = True
        return yes_no_from_logprobs(pairs)

    def yes_no_probability(self, messages: Messages) -> float | None:
        """``P(yes) / (P(yes) + P(no))`` of the reply's first token (see the module doc); None when the wrapped
        model cannot give logprobs (the caller then parses a text reply)."""
        if self.logprobs_supported is False or not self._asks_logprobs():
            return None
        try:
            reply = self._logprobs_reply(messages)
        except Exception as exc:
            return self._refused(exc)
        return self._probability(reply)

    async def ayes_no_probability(self, messages: Messages) -> float | None:
        """Async :meth:`yes_no_probability`."""
        if self.logprobs_supported is False or not self._asks_logprobs():
            return None
        try:
            reply = await self._alogprobs_reply(messages)
        except Exception as exc:
            return self._refused(exc)
        return self._probability(reply)
