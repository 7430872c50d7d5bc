"""Value types of SCM memory: a stored interaction and what one turn recalls.

>>> item = MemoryItem("s1", 0, "I adopted a cat named Miso.", "Congratulations!", "The user adopted a cat, Miso.")
>>> item.text
'User: I adopted a cat named Miso.\\nAssistant: Congratulations!'
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["Decision", "MemoryItem", "RecalledMemory", "SCMContext", "SCMTurn"]


@dataclass(frozen=True, slots=True, eq=False)
class MemoryItem:
    """One interaction of the memory stream.

    ``index`` counts the interactions of ``session_id`` from 0. ``summary`` is the controller's summary of the
    whole interaction (the user's observation and the reply); ``embedding`` is the vector of that summary, so it
    embeds both halves. ``created`` is a Unix timestamp.
    """

    session_id: str
    index: int
    observation: str
    response: str
    summary: str = ""
    embedding: np.ndarray | None = field(default=None, repr=False)
    created: float = 0.0

    @property
    def text(self) -> str:
        """The full interaction as the model sees it."""
        return f"User: {self.observation}\nAssistant: {self.response}"


@dataclass(frozen=True, slots=True)
class Decision:
    """A yes/no answer of a gate: ``value`` is what was used, ``parsed`` False means the fallback applied.

    ``probability`` is the model's ``P(yes) / (P(yes) + P(no))`` when the decision was taken by probability (None
    for a parsed text reply); ``score`` is the model-free gate's score (see
    :mod:`~fragrel_integrations.core.scm.gates`), None otherwise. ``raw`` is the reply text, or a short account of
    the score.
    """

    value: bool
    raw: str
    parsed: bool
    probability: float | None = None
    score: float | None = None


@dataclass(frozen=True, slots=True)
class RecalledMemory:
    """An activated memory and how it is shown: the full text, or its summary when ``use_summary``.

    ``score`` is the retrieval score (cosine, or the relation-aware score with a relation), ``tokens`` the full
    text's token count and ``decision`` the controller's "does the summary suffice?" answer (None: not asked).
    """

    item: MemoryItem
    score: float
    tokens: int
    use_summary: bool = False
    decision: Decision | None = None

    @property
    def shown(self) -> str:
        """The text put into the prompt."""
        return self.item.summary if self.use_summary and self.item.summary else self.item.text


@dataclass(frozen=True, slots=True)
class SCMContext:
    """Steps 1-4 of a turn: the observation, the activation decision, the flash and activated memories.

    ``activation`` is None when the controller was not asked (activation disabled or an empty stream).
    ``memories`` are in time order. ``block`` is the memory text for the prompt ('' when there is nothing).
    """

    session_id: str
    observation: str
    activation: Decision | None
    flash: MemoryItem | None
    memories: tuple[RecalledMemory, ...]
    block: str

    @property
    def use_memory(self) -> bool:
        """Whether long-term memory was activated for this turn."""
        return self.activation is None or self.activation.value


@dataclass(frozen=True, slots=True)
class SCMTurn:
    """A complete turn run by :meth:`SelfControlledMemory.chat`: the context, the reply and the stored item."""

    context: SCMContext
    response: str
    item: MemoryItem
