"""Model-free activation gates for SCM: decide whether a user message needs long-term memory without an LLM.

SCM's controller asks a model "is memory needed?"; a small model cannot answer that (the embedded 135M model says
"No" to every question). These gates decide from the message and the stored turns alone, in microseconds:

* :class:`LexicalGate` (``SelfControlledMemory(activation="lexical")``): **yes** when the message has at least
  ``min_score`` cues, counting

  - *memory cues*: words and phrases that point back into the conversation, e.g. "remember", "earlier",
    "last time", "again", "you said", "I told you", "we talked", "what did I ...", "did you ...", "as I mentioned"
    (:data:`MEMORY_CUES`, case-insensitive regular expressions, each counted once); and
  - *known names*: capitalised words of the message (not function words such as "What" or "I") that occur
    capitalised in the earlier turns and never in lower case there, e.g. "Caroline" in "When did Caroline go to
    the support group?" after turns by or about Caroline. A word the turns also write in lower case is a common
    word at the start of a sentence ("Suggest", "Maybe"), not a name; one that is only ever capitalised is a
    name, place, title or brand, and one seen before is a reference to something said.

  Its blind spots: references without a cue or a name ("how is the puppy doing?"), and self-contained requests
  that name someone the conversation named (a question about "Paris" after the user talked about Paris).
* :class:`EmbeddingGate` (``activation="embedding"``): **yes** when the highest cosine similarity between the
  message's embedding and a stored turn's embedding is at least ``threshold``. It reuses the vectors retrieval
  computes anyway, so it costs nothing extra; it is as good as the embedder's sense of topic, and a message on
  a topic the conversation happened to touch counts as a reference.

Defaults were chosen on the dev part of ``benchmarks/data/scm_activation.json`` (LoCoMo questions about earlier
turns vs self-contained requests, each asked after a LoCoMo conversation); the held-out numbers are in
``benchmarks/results/llm_steps_scm.md``. All patterns are linear-time; a message is cut to
:data:`MAX_MESSAGE_CHARS` characters before it is scanned.

>>> gate = LexicalGate()
>>> gate.decide("What did I tell you about my sister?", ["User: My sister Ana moved to Porto."]).value
True
>>> gate.decide("Write a haiku about autumn.", ["User: My sister Ana moved to Porto."]).value
False
>>> gate.decide("How is Ana doing?", ["User: My sister Ana moved to Porto."]).raw
'1 cue(s): name Ana'
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import numpy as np

from ..._validation import check_cosine, check_min_int, check_type
from .interactions import Decision

__all__ = [
    "ACTIVATION_MODES",
    "DEFAULT_SIMILARITY_THRESHOLD",
    "MAX_MESSAGE_CHARS",
    "MEMORY_CUES",
    "EmbeddingGate",
    "LexicalGate",
    "NameVocabulary",
    "activation_gate",
    "auto_activation",
    "capitalised_words",
]

#: Characters of a message the lexical gate scans (a longer message is cut; the cues are near the start anyway).
MAX_MESSAGE_CHARS = 4000

#: The lexical gate's memory cues (case-insensitive regular expressions matched anywhere in the message).
MEMORY_CUES: tuple[str, ...] = (
    r"\b(?:remember|remind|recall|forgot|forget)\w*",
    r"\b(?:earlier|previously|before|last time|the other day|again|so far|back then)\b",
    r"\b(?:you|i|we) (?:said|told|mentioned|asked|talked|discussed|spoke|shared|wrote|suggested|recommended)\b",
    r"\b(?:told|asked) (?:you|me)\b",
    r"\bwhat (?:did|was|were) (?:i|you|we)\b",
    r"\b(?:did|have|had) (?:i|you|we) (?:ever )?(?:say|tell|mention|talk|discuss|ask|share)\w*",
    r"\bas (?:i|you|we) (?:said|mentioned|discussed|noted)\b",
    r"\b(?:our|that) (?:conversation|chat|talk|discussion)\b",
)

#: The embedding gate's default: max cosine (all-MiniLM-L6-v2) with a stored turn (chosen on dev data).
DEFAULT_SIMILARITY_THRESHOLD = 0.46

# Capitalised words that are not names: question words, pronouns, articles, auxiliaries, days/months stay names.
_FUNCTION_WORDS = frozenset(
    """
    a an the i i'm i've i'd i'll me my mine we our you your yours he she it they them their his her its this that
    these those what when where which who whom whose why how is are was were be been am do does did have has had can
    could will would shall should may might must not no yes ok okay hi hello hey thanks thank please sure well so and
    or but if then than also too very just there here all any some each every both either neither one tell give
    write make let explain describe list name find show help translate compute calculate summarise summarize user
    assistant
    """.split()  # noqa: SIM905
)
_CAPITALISED = re.compile(r"\b[A-Z][A-Za-z'\-]{1,40}")
_LOWER = re.compile(r"\b[a-z][a-z'\-]{1,40}")


def capitalised_words(text: str) -> set[str]:
    """Capitalised words of ``text`` that are not function words (possessive ``'s`` dropped).

    >>> sorted(capitalised_words("What did Caroline's friend say in Paris? I forgot."))
    ['Caroline', 'Paris']
    """
    words = (w.removesuffix("'s").removesuffix("'").rstrip("-") for w in _CAPITALISED.findall(text))
    return {w for w in words if len(w) > 1 and w.lower() not in _FUNCTION_WORDS}


class NameVocabulary:
    """The capitalised words of earlier turns and the words they write in lower case; grown with :meth:`update`.

    >>> v = NameVocabulary(["Maybe we meet Ana in Porto.", "maybe not"])
    >>> sorted(v.names({"Ana", "Maybe", "Lisbon"}))
    ['Ana']
    """

    __slots__ = ("capitalised", "lower")

    def __init__(self, texts: Iterable[str] = ()) -> None:
        self.capitalised: set[str] = set()
        self.lower: set[str] = set()
        self.update(texts)

    def update(self, texts: Iterable[str]) -> NameVocabulary:
        """Add the words of ``texts`` (each cut to :data:`MAX_MESSAGE_CHARS` x 4 characters); returns self."""
        for text in texts:
            check_type(text, str, "earlier turns must be str")
            text = text[: 4 * MAX_MESSAGE_CHARS]
            self.capitalised |= capitalised_words(text)
            self.lower.update(_LOWER.findall(text))
        return self

    def copy(self) -> NameVocabulary:
        out = NameVocabulary()
        out.capitalised, out.lower = set(self.capitalised), set(self.lower)
        return out

    def names(self, words: Iterable[str]) -> set[str]:
        """The ``words`` that the turns capitalise and never write in lower case."""
        return {w for w in words if w in self.capitalised and w.lower() not in self.lower}


def _compile_cues(cues: object) -> tuple[re.Pattern[str], ...]:
    if isinstance(cues, str) or not isinstance(cues, Sequence):
        raise TypeError(f"cues must be a list of regular expressions (str), got {type(cues).__name__}")
    compiled = []
    for i, cue in enumerate(cues):
        if not isinstance(cue, str) or not cue:
            raise ValueError(f"cues[{i}] must be a non-empty regular expression string, got {cue!r}")
        try:
            compiled.append(re.compile(cue, re.IGNORECASE))
        except re.error as exc:
            raise ValueError(f"cues[{i}] = {cue!r} is not a valid regular expression: {exc}") from None
    return tuple(compiled)


class LexicalGate:
    """Memory is needed when the message has at least ``min_score`` cues (see the module docstring).

    Args:
        cues: regular expressions of memory cues (default :data:`MEMORY_CUES`); each that matches counts 1.
        names: count capitalised words of the message that occur capitalised in the earlier turns (each 1).
        min_score: cues needed for "yes" (an int >= 1).
    """

    def __init__(self, *, cues: Sequence[str] = MEMORY_CUES, names: bool = True, min_score: int = 1) -> None:
        self.cues = tuple(cues) if not isinstance(cues, str) else cues
        self._patterns = _compile_cues(cues)
        if not isinstance(names, bool):
            raise TypeError(f"names must be True or False, got {names!r}")
        self.names = names
        self.min_score = check_min_int(min_score, "min_score", 1, hint=" (cues needed for 'memory is needed')")

    def decide(self, observation: str, history: Iterable[str]) -> Decision:
        """The decision for ``observation`` after the earlier turns ``history`` (their texts)."""
        return self.decide_known(observation, NameVocabulary(history if self.names else ()))

    def decide_known(self, observation: str, vocabulary: NameVocabulary) -> Decision:
        """The decision for ``observation`` given the earlier turns' :class:`NameVocabulary`."""
        check_type(observation, str, "observation must be str")
        check_type(vocabulary, NameVocabulary, "vocabulary must be a NameVocabulary")
        text = observation[:MAX_MESSAGE_CHARS]
        found = [m.group(0).lower() for p in self._patterns if (m := p.search(text))]
        names = sorted(vocabulary.names(capitalised_words(text))) if self.names else []
        score = len(found) + len(names)
        parts = [f"cue {c!r}" for c in found] + [f"name {n}" for n in names]
        raw = f"{score} cue(s): " + ", ".join(parts) if parts else "0 cues"
        return Decision(score >= self.min_score, raw, True, score=float(score))

    def __repr__(self) -> str:
        custom = "" if self.cues == MEMORY_CUES else f"cues={list(self.cues)!r}, "
        return f"LexicalGate({custom}names={self.names}, min_score={self.min_score})"


class EmbeddingGate:
    """Memory is needed when a stored turn's embedding has cosine >= ``threshold`` with the message's.

    ``threshold`` is in [-1, 1]; the default :data:`DEFAULT_SIMILARITY_THRESHOLD` suits all-MiniLM-L6-v2 (the
    embedded default); another embedder has another scale, so choose it on your data.
    """

    def __init__(self, threshold: float = DEFAULT_SIMILARITY_THRESHOLD) -> None:
        self.threshold = check_cosine(threshold, "threshold", what="a cosine similarity")

    def decide(self, similarities: np.ndarray | Sequence[float]) -> Decision:
        """The decision for the cosine similarities of the message with the stored turns (none: no)."""
        s = np.asarray(similarities, dtype=np.float64).ravel()
        if s.size == 0:
            return Decision(False, "no stored turns", True, score=None)
        s = s[np.isfinite(s)]
        if s.size == 0:
            raise ValueError("the similarities are all NaN or infinite: check the embedder's vectors")
        top = float(s.max())
        return Decision(top >= self.threshold, f"max cosine {top:.3f} (threshold {self.threshold:g})", True, score=top)

    def __repr__(self) -> str:
        return f"EmbeddingGate(threshold={self.threshold:g})"


#: ``activation`` by name: the controller model (True), or a model-free gate.
ACTIVATION_MODES = ("auto", "controller", "lexical", "embedding")


def auto_activation(model: object) -> str:
    """What ``activation="auto"`` means for a memory whose controller has this ``model``: ``"controller"`` for
    any model of yours (the paper's method); ``"lexical"`` with the embedded SmolLM2-135M, which answers "is
    memory needed?" little better than chance (held-out accuracy 0.68 by probability, 0.47 as text, lexical gate
    0.97; ``benchmarks/results/llm_steps_scm.md``, measured on LoCoMo turn texts, not through a memory). The
    lexical gate reads the stored turns' own text, so neither the embedder nor summaries change what it sees;
    the embedding gate (0.93) was measured on turn-text vectors, while a summarising memory stores summary
    vectors.

    >>> auto_activation(object())
    'controller'
    """
    from ...models.transformers_chat import is_embedded_model

    return "lexical" if is_embedded_model(model) else "controller"


def activation_gate(activation: object) -> bool | LexicalGate | EmbeddingGate:
    """``activation`` as True (the controller), False (always recall) or a model-free gate (``"auto"`` is resolved
    by :func:`auto_activation` first).

    >>> activation_gate("lexical").__class__.__name__, activation_gate("controller")
    ('LexicalGate', True)
    """
    if isinstance(activation, bool | LexicalGate | EmbeddingGate):
        return activation
    if not isinstance(activation, str):
        raise TypeError(
            f"activation must be True, False, one of {list(ACTIVATION_MODES)}, a LexicalGate or an EmbeddingGate, "
            f"got {type(activation).__name__}"
        )
    if activation == "auto":
        raise ValueError("activation='auto' depends on the model and embedder: resolve it with auto_activation()")
    gates = {"controller": lambda: True, "lexical": LexicalGate, "embedding": EmbeddingGate}
    if activation not in gates:
        raise ValueError(
            f"activation must be True, False or one of {list(ACTIVATION_MODES)} (or a LexicalGate / EmbeddingGate), "
            f"got {activation!r}"
        )
    return gates[activation]()
