"""Yes/no answers by probability (:class:`YesNoScorer`): ``P(yes) / (P(yes) + P(no))`` of the reply's first token,
summed over the spellings; None means no probabilities (parse the text instead).

>>> from fragrel_integrations.testing import ScriptedChatModel
>>> yes_no_probability(ScriptedChatModel(["yes"]), "Is water wet?") is None
True
>>> round(yes_no_from_logprobs([("Yes", -0.1), ("No", -2.5), ("Maybe", -3.0)]), 3)
0.917
"""

from __future__ import annotations

import logging
import math
from abc import ABC, abstractmethod
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

#: Token spellings that count as "yes" / "no" (after stripping spaces).
YES_WORDS = frozenset({"yes", "Yes", "YES"})
NO_WORDS = frozenset({"no", "No", "NO"})
#: Alternatives asked for the first reply token of a yes/no question by the framework adapters.
TOP_LOGPROBS = 20

logger = logging.getLogger(__name__)


def single_token_ids(tokenize: Callable[[str], Sequence[int]], words: Iterable[str]) -> tuple[int, ...]:
    """The ids of the spellings in ``words`` (with and without a leading space) that are one token.

    >>> single_token_ids(lambda t: [len(t)] if t.strip() == "yes" else [1, 2], ["yes", "no"])
    (3, 4)
    """
    tokens = (tokenize(text) for word in words for text in (word, " " + word))
    return tuple(sorted({int(t[0]) for t in tokens if len(t) == 1}))


@runtime_checkable
class YesNoScorer(Protocol):
    """A chat model that says how likely its reply starts with *yes* rather than *no*."""

    def yes_no_probability(self, messages: Messages) -> float | None: ...
    async def ayes_no_probability(self, messages: Messages) -> float | None: ...


def _logsumexp(values: list[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def yes_no_from_logprobs(candidates: Iterable[tuple[str, float]], *, complete: bool = False) -> float | None:
    """``P(yes)`` from the first token's ``(token, logprob)`` pairs (None: neither side); a missing side gets the
    smallest probability of a top-k list, 0 with ``complete=True``.

    >>> yes_no_from_logprobs([("Yes", -1.0), (" yes", -1.0), ("No", -1.0)])  # two spellings of yes, one of no
    0.666...
    """
    pairs = [(str(t).strip(), float(lp)) for t, lp in candidates]
    pairs = [(t, lp) for t, lp in pairs if not math.isnan(lp)]
    yes = [lp for t, lp in pairs if t in YES_WORDS]
    no = [lp for t, lp in pairs if t in NO_WORDS]
    if not yes and not no:
        return None
    if complete and not (yes and no):
        return 1.0 if yes else 0.0
    floor = min(lp for _, lp in pairs)
    diff = _logsumexp(yes or [floor]) - _logsumexp(no or [floor])
    return 1.0 / (1.0 + math.exp(-diff)) if diff >= 0 else math.exp(diff) / (1.0 + math.exp(diff))


def _checked(value: object, model: object) -> float | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1):
        raise ValueError(
            f"{type(model).__name__}.yes_no_probability gave {value!r}, not a probability in [0, 1] or None"
        )
    return None if value is None else float(value)


def yes_no_probability(model: object, messages: Messages) -> float | None:
    """``model.yes_no_probability(messages)`` when the model has it (checked to be in [0, 1]), else None."""
    return _checked(model.yes_no_probability(messages), model) if isinstance(model, YesNoScorer) else None


async def ayes_no_probability(model: object, messages: Messages) -> float | None:
    """Async :func:`yes_no_probability`."""
    return _checked(await model.ayes_no_probability(messages), model) if isinstance(model, YesNoScorer) else None


class LogprobsYesNo(ABC):
    """:class:`YesNoScorer` over OpenAI-style logprobs of a one-token reply; a model without them is not asked again."""

    logprobs_supported: bool | None = None
    model_name: str = "model"

    @abstractmethod
    def _asks_logprobs(self) -> bool: ...
    @abstractmethod
    def _logprobs_reply(self, messages: Messages) -> Any: ...
    @abstractmethod
    async def _alogprobs_reply(self, messages: Messages) -> Any: ...
    @abstractmethod
    def _first_token_logprobs(self, reply: Any) -> list[tuple[str, float]] | None: ...

    def _refused(self, exc: Exception) -> None:
        """A failed first request (not a lost connection or timeout) means no logprobs; later ones raise."""
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
            return self._no_logprobs("it returned no logprobs")
        self.logprobs_supported = True
        return yes_no_from_logprobs(pairs)

    def yes_no_probability(self, messages: Messages) -> float | None:
        """``P(yes)`` of the reply's first token; None when the wrapped model gives no logprobs."""
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
