"""Grounded answers: a short answer the retrieved text supports, with the quoted evidence, or an honest "not stated".

:func:`grounded_answer` takes a question and the retrieved fragments and

1. splits the fragments into sentences (long ones at ``;`` and ``:``) and ranks them by the hybrid score
   (0.5 min-max BM25 + 0.5 min-max dense cosine, as the index ranks fragments): the best ``max_sentences`` are
   the evidence, each cited by its document, fragment position and sentence number;
2. asks the model to answer from the evidence alone (with ``constrain=True``, a model that enforces a llama.cpp
   grammar may only copy a run of words from the evidence, :func:`span_grammar`);
3. checks the reply against the evidence (:func:`supported_by`): the words of the reply that are not in the
   question must all occur in the evidence, and there must be at least one. An unsupported reply is never
   returned as the answer: :attr:`GroundedAnswer.text` is None and :meth:`GroundedAnswer.format` says the text
   does not state an answer and prints the evidence instead.

>>> from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel
>>> text = "Ann lived by the sea. Her parrot was called Poll. It rained all winter."
>>> result = grounded_answer("What was the parrot called?", [text], ScriptedChatModel(["Poll"]),
...                          embedder=HashingEmbedder(), max_sentences=1)
>>> result.text, result.evidence[0].quote
('Poll', 'Her parrot was called Poll.')
>>> grounded_answer("What was the parrot called?", [text], ScriptedChatModel(["Polly Jones"]),
...                 embedder=HashingEmbedder()).text is None
True
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict, Unpack

import numpy as np

from .._validation import check_positive_int
from ..models.base import Embedder, embed_documents
from ..models.chat import context_window
from ..models.structured import ReplyFormat, format_kwargs
from ..models.tokens import count_message_tokens, fit_texts
from .scorers import DenseScorer, make_scorer, tokenize
from .steps import CallStep, ChatStep, Steps, adrive, drive
from .types import Fragment, ScoredFragment

__all__ = [
    "ANSWER_PROMPT",
    "AnswerSettings",
    "Evidence",
    "GroundedAnswer",
    "agrounded_answer",
    "answer_messages",
    "check_answer_settings",
    "grounded_answer",
    "grounded_answer_steps",
    "select_evidence",
    "span_grammar",
    "split_sentences",
    "supported_by",
]

#: The instruction the model gets (short: the embedded model has 135M parameters).
ANSWER_PROMPT = "Answer the question with a few words from the text."

#: Sentences longer than this many words are split again at ``;`` and ``:``.
LONG_SENTENCE_WORDS = 40

_SENTENCE_END = re.compile(r"(?<=[.!?])[\"'”’)\]_]*\s+")
_CLAUSE_END = re.compile(r"(?<=[;:])\s+")
_WORD = re.compile(r"\S+")
_WORD_TOKEN = re.compile(r"\w+", re.UNICODE)
_ANSWER_LEAD = re.compile(
    r"^(?:the\s+)?answer\b(?:\s+to\s+(?:this|the)\s+question)?(?:\s+is)?\s*[:,-]?\s*", re.IGNORECASE
)
_TITLE_TEXT = "mr. mrs. ms. dr. st. messrs. mme. mlle. capt. col. gen. rev. sr. jr. mt."
_TITLES = frozenset(_TITLE_TEXT.split())
_INITIALS = re.compile(r"(?:[a-z]\.)+")
_PUNCT = "\"'“”‘’()[]_*,.;:!?-—"


def split_sentences(text: str, *, long_words: int = LONG_SENTENCE_WORDS) -> list[tuple[int, int]]:
    """``(start, end)`` character spans of the sentences of ``text``; a sentence of more than ``long_words``
    words is split again after ``;`` and ``:``. Titles (Mr., Mrs., St., ...) and initials end no sentence.

    >>> t = "Mr. Rochester ran. She said: “Stop!” Then it rained."
    >>> [t[a:b] for a, b in split_sentences(t)]
    ['Mr. Rochester ran.', 'She said: “Stop!”', 'Then it rained.']
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    spans: list[tuple[int, int]] = []
    start = 0
    for m in _SENTENCE_END.finditer(text):
        before = text[start : m.start()].rsplit(None, 1)
        word = before[-1].lstrip(_PUNCT[:8]).lower() if before else ""
        if word in _TITLES or (word != "i." and _INITIALS.fullmatch(word)):
            continue
        end = m.start() + len(m.group(0).rstrip())
        if text[start:end].strip():
            spans += _clauses(text, start, end, long_words)
        start = m.end()
    if text[start:].strip():
        spans += _clauses(text, start, len(text), long_words)
    return spans


def _clauses(text: str, start: int, end: int, long_words: int) -> list[tuple[int, int]]:
    piece = text[start:end]
    if len(piece.split()) <= long_words:
        return [_strip(text, start, end)]
    out, a = [], start
    for m in _CLAUSE_END.finditer(piece):
        out.append(_strip(text, a, start + m.start()))
        a = start + m.end()
    out.append(_strip(text, a, end))
    return [s for s in out if s[1] > s[0]]


def _strip(text: str, a: int, b: int) -> tuple[int, int]:
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    return a, b


@dataclass(frozen=True, slots=True)
class Evidence:
    """A quoted sentence of a retrieved fragment: where it is (``doc_id``, fragment ``position``, ``sentence``
    number within the fragment, ``start`` character offset in the fragment's text) and its score."""

    quote: str
    doc_id: str
    position: int
    sentence: int
    start: int
    score: float

    def citation(self) -> str:
        """``"doc, fragment 12, sentence 3"``."""
        return f"{self.doc_id}, fragment {self.position}, sentence {self.sentence + 1}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "quote": self.quote,
            "doc_id": self.doc_id,
            "position": self.position,
            "sentence": self.sentence,
            "start": self.start,
            "score": self.score,
        }


@dataclass(frozen=True, slots=True)
class GroundedAnswer:
    """The outcome of :func:`grounded_answer`: ``text`` is the answer (None when the evidence does not support
    the model's reply), ``evidence`` the quoted sentences (the ones holding the answer first), ``reply`` the
    model's raw reply (unsupported replies stay here only, never in ``text``)."""

    question: str
    text: str | None
    evidence: tuple[Evidence, ...]
    reply: str
    constrained: bool = False
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def supported(self) -> bool:
        return self.text is not None

    def format(self) -> str:
        """The answer and its quoted, cited evidence, or "not stated" and the closest evidence (each quote on one
        line: the text's line breaks are shown as spaces)."""
        quotes = "\n".join(f"  “{' '.join(e.quote.split())}” ({e.citation()})" for e in self.evidence)
        if self.text is None:
            head = "The retrieved text does not state an answer to this question."
            return f"{head}\nClosest passages:\n{quotes}" if quotes else head
        return f"{self.text}\n\nEvidence:\n{quotes}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "answer": self.text,
            "supported": self.supported,
            "reply": self.reply,
            "constrained": self.constrained,
            "evidence": [e.as_dict() for e in self.evidence],
        }


def _fragments(hits: Sequence[ScoredFragment | Fragment | str]) -> list[Fragment]:
    if isinstance(hits, str):
        raise TypeError("hits must be a list of retrieved fragments (ScoredFragment, Fragment or str), not one str")
    out = []
    for i, h in enumerate(hits):
        if isinstance(h, ScoredFragment):
            out.append(h.fragment)
        elif isinstance(h, Fragment):
            out.append(h)
        elif isinstance(h, str):
            out.append(Fragment(h, "text", i))
        else:
            raise TypeError(f"hits[{i}] must be a ScoredFragment, Fragment or str, got {type(h).__name__}")
    return out


def _candidates(fragments: list[Fragment]) -> list[tuple[Fragment, int, int, int]]:
    """(fragment, sentence number, start, end) of every sentence with at least one word token."""
    out = []
    for f in fragments:
        for n, (a, b) in enumerate(split_sentences(f.text)):
            if tokenize(f.text[a:b]):
                out.append((f, n, a, b))
    return out


def _evidence_steps(
    question: str,
    fragments: list[Fragment],
    embedder: Embedder | None,
    max_sentences: int,
) -> Steps[list[Evidence]]:
    sentences = _candidates(fragments)
    if not sentences:
        return []
    texts = [f.text[a:b] for f, _, a, b in sentences]
    if embedder is None:
        scores = make_scorer("bm25", texts)(question)
    else:
        vectors = yield CallStep(embed_documents, (embedder, texts))
        dense = DenseScorer(vectors, embedder)
        scores = yield CallStep(make_scorer("hybrid", texts, dense=lambda: dense), (question,))
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")[:max_sentences]
    return [
        Evidence(texts[i], sentences[i][0].doc_id, sentences[i][0].position, sentences[i][1], sentences[i][2],
                 float(scores[i]))
        for i in order
    ]  # fmt: skip


def select_evidence(
    question: str,
    hits: Sequence[ScoredFragment | Fragment | str],
    *,
    embedder: Embedder | None = None,
    max_sentences: int = 3,
) -> list[Evidence]:
    """The ``max_sentences`` sentences of ``hits`` that best match ``question``, best first: hybrid score with
    ``embedder`` (0.5 min-max BM25 + 0.5 min-max cosine), BM25 alone when it is None.

    >>> [e.quote for e in select_evidence("Who fed the cat?", ["It rained. Tom fed the cat."], max_sentences=1)]
    ['Tom fed the cat.']
    """
    _check_question(question)
    check_positive_int(max_sentences, "max_sentences")
    return drive(_evidence_steps(question, _fragments(hits), embedder, max_sentences))


def answer_messages(question: str, evidence: Sequence[str]) -> list[dict[str, str]]:
    """The chat request for an answer from the evidence sentences (best first).

    >>> print(answer_messages("Who came?", ["Ann came."])[1]["content"])
    Text: Ann came.
    <BLANKLINE>
    Question: Who came?
    """
    return [
        {"role": "system", "content": ANSWER_PROMPT},
        {"role": "user", "content": f"Text: {' '.join(s.strip() for s in evidence)}\n\nQuestion: {question}"},
    ]


def _gbnf_literal(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def span_grammar(sentences: Sequence[str], *, max_words: int = 8, question: str = "") -> str:
    """A llama.cpp GBNF grammar whose strings are runs of 1 to ``max_words`` consecutive words of one of
    ``sentences`` (a word's surrounding punctuation optional), so a constrained reply is a quote. A quote starts
    at a content word that is not in ``question`` (a function word or the question's own words start none),
    unless no word qualifies.

    >>> print(span_grammar(["Call him Friday."], max_words=2, question="What did I call him?"))
    root ::= s0w2
    s0w2 ::= "Friday" "."?
    s0w1x1 ::= "him"
    s0w2x1 ::= "Friday" "."?
    """
    check_positive_int(max_words, "max_words")
    asked = {_norm(t) for t in tokenize(question)}
    parsed = [[w for w in (_split_word(t) for t in _WORD.findall(s)) if w[1]] for s in sentences]
    if not any(parsed):
        raise ValueError("the evidence has no words to quote")

    def opens(core: str) -> bool:
        low = core.lower()
        return low not in _FUNCTION_WORDS and _norm(low) not in asked

    if not any(opens(w[1]) for words in parsed for w in words):
        opens = bool  # no content word to start at: any word may
    starts: list[str] = []
    rules: list[str] = []
    tails: list[str] = []
    for j, words in enumerate(parsed):
        for i in range(len(words)):
            if opens(words[i][1]):
                starts.append(f"s{j}w{i}")
                rules.append(f"s{j}w{i} ::= " + _word_rule(words, j, i, 1, max_words))
        for i in range(1, len(words)):  # continuation rules: word i as the (depth + 1)-th word of a quote
            for depth in range(1, min(i, max_words - 1) + 1):
                tails.append(f"s{j}w{i}x{depth} ::= " + _word_rule(words, j, i, depth + 1, max_words))
    return "\n".join([f"root ::= {' | '.join(starts)}", *rules, *tails])


def _split_word(token: str) -> tuple[str, str, str]:
    """(leading punctuation, core, trailing punctuation) of a whitespace token."""
    core = token.strip(_PUNCT)
    if not core:
        return token, "", ""
    a = token.index(core)
    return token[:a], core, token[a + len(core) :]


def _word_rule(words: list[tuple[str, str, str]], j: int, i: int, length: int, max_words: int) -> str:
    """The rule body for word ``i`` as the ``length``-th word of a quote."""
    lead, core, trail = words[i]
    body = (f"{_gbnf_literal(lead)}? " if lead and length == 1 else "") + _gbnf_literal(core)
    if trail:
        body += f" {_gbnf_literal(trail)}?"
    if i + 1 < len(words) and length < max_words:
        body += f' (" " s{j}w{i + 1}x{length})?'
    return body


#: Words a reply may use without the evidence holding them: function words (pronouns, auxiliaries, articles,
#: prepositions, question words) and words about answering.
_FUNCTION_WORD_TEXT = """
    a about above after again against all am an and any are as at be been before being below between both but by
    can could did do does doing down during each few for from further had has have having he her here hers herself
    him himself his how i if in into is it its itself just me more most my myself no nor not now of off on once
    only or other our ours ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were what when where
    which while who whom why will with would you your yours yourself yourselves also called named name s t
    answer question text passage context says said stated state mentioned
"""
_FUNCTION_WORDS = frozenset(_FUNCTION_WORD_TEXT.split())


def _norm(token: str) -> str:
    """A light stem: plural and possessive endings off."""
    for end in ("'s", "’s", "es", "s"):
        if token.endswith(end) and len(token) - len(end) >= 3:
            return token[: -len(end)]
    return token


def supported_by(reply: str, evidence: Sequence[str], question: str = "") -> int | None:
    """The index of the evidence sentence that best supports ``reply``, or None when the evidence does not.

    The reply's content words are its words less function words and the question's own words (lower-cased,
    plural endings ignored). Supported: at least half of them occur in the evidence, and every name or number
    among them (a capitalised word not starting the reply, a word with a digit) does; a reply with no content
    word is not supported. The sentence holding most of them is returned.

    >>> supported_by("His name was Friday.", ["I called him Friday, the day I saved him."], "What was his name?")
    0
    >>> supported_by("Saber", ["I called him Friday."], "What was his name?") is None
    True
    """
    asked = {_norm(t) for t in tokenize(question)}
    tokens = _WORD_TOKEN.findall(reply)
    words = {_norm(t.lower()) for t in tokens if t.lower() not in _FUNCTION_WORDS} - asked
    if not words:
        return None
    names = {_norm(t.lower()) for i, t in enumerate(tokens) if (i and t[0].isupper()) or any(c.isdigit() for c in t)}
    sets = [{_norm(t) for t in tokenize(s)} for s in evidence]
    found = words & set().union(*sets) if sets else set()
    if 2 * len(found) < len(words) or not (names & words) <= found:
        return None
    return max(range(len(sets)), key=lambda i: (len(words & sets[i]), -i))


def _fit(question: str, quotes: list[str], model: Any, max_tokens: int) -> list[str]:
    """The quotes that fit the model's context window (if it says one) beside the prompt and the reply."""
    window = context_window(model)
    if window is None:
        return quotes
    room = window - max_tokens - count_message_tokens(model, answer_messages(question, [])) - 8
    kept = fit_texts(quotes, room, model) if room > 0 else []
    if not kept:
        raise ValueError(
            f"the model's context window ({window} tokens) leaves no room for evidence after a reply of "
            f"{max_tokens} tokens: lower max_tokens or use a larger context window"
        )
    return kept


def _clean(reply: str) -> str:
    """The first line of the reply without a leading "The answer (to this question) is:" and outer quotes."""
    text = reply.strip().splitlines()[0] if reply.strip() else ""
    text = _ANSWER_LEAD.sub("", text.strip())
    return text.strip().strip("\"'“”‘’ ").strip()


def grounded_answer_steps(
    question: str,
    hits: Sequence[ScoredFragment | Fragment | str],
    model: Any,
    *,
    embedder: Embedder | None = None,
    max_sentences: int = 3,
    max_tokens: int = 48,
    constrain: bool = False,
    options: dict[str, Any] | None = None,
) -> Steps[GroundedAnswer]:
    """The workflow of :func:`grounded_answer` (run it with :func:`~.steps.drive` or :func:`~.steps.adrive`)."""
    _check_question(question)
    check_answer_settings(
        {"max_sentences": max_sentences, "max_tokens": max_tokens, "constrain": constrain, "options": options}
    )
    fragments = _fragments(hits)
    evidence = yield from _evidence_steps(question, fragments, embedder, max_sentences)
    if not evidence:
        return GroundedAnswer(question, None, (), "", details={"reason": "no text retrieved"})
    quotes = _fit(question, [e.quote for e in evidence], model, max_tokens)
    evidence = evidence[: len(quotes)]
    kwargs: dict[str, Any] = {}
    if constrain:
        kwargs = format_kwargs(model, ReplyFormat.grammar(span_grammar(quotes, question=question), name="quote"))
    params = {"temperature": 0.0, "max_tokens": max_tokens, **(options or {}), **kwargs}
    reply = yield ChatStep(model, answer_messages(question, quotes), params)
    if not isinstance(reply, str):
        reply = str(getattr(reply, "content", reply))
    text = _clean(reply)
    hit = supported_by(text, quotes, question)
    if hit is None:
        return GroundedAnswer(question, None, tuple(evidence), reply, bool(kwargs))
    ordered = (evidence[hit], *(e for i, e in enumerate(evidence) if i != hit))
    return GroundedAnswer(question, text, ordered, reply, bool(kwargs))


class AnswerSettings(TypedDict, total=False):
    """The keyword settings of :func:`grounded_answer` and :func:`agrounded_answer` (the keyword parameters of
    :func:`grounded_answer_steps`, with their defaults there)."""

    embedder: Embedder | None
    max_sentences: int
    max_tokens: int
    constrain: bool
    options: dict[str, Any] | None


def check_answer_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` (:class:`AnswerSettings`) checked before any call, e.g. when a chain is built: an unknown name
    is a TypeError listing the settings, a bad value a ValueError / TypeError naming it. Returns a copy.

    >>> check_answer_settings({"max_tokens": 32})
    {'max_tokens': 32}
    """
    known = sorted(AnswerSettings.__optional_keys__)
    unknown = sorted(set(settings) - set(known))
    if unknown:
        raise TypeError(f"unexpected keyword argument(s) {unknown}: the answer settings are {known}")
    for name in ("max_sentences", "max_tokens"):
        if name in settings:
            check_positive_int(settings[name], name)
    if not isinstance(settings.get("constrain", False), bool):
        raise TypeError(f"constrain must be True or False, got {settings['constrain']!r}")
    if not isinstance(settings.get("options") or {}, Mapping):
        raise TypeError(f"options must be a dict of keyword arguments for model.invoke, got {settings['options']!r}")
    return dict(settings)


def grounded_answer(
    question: str, hits: Sequence[ScoredFragment | Fragment | str], model: Any, **settings: Unpack[AnswerSettings]
) -> GroundedAnswer:
    """Answer ``question`` from the retrieved ``hits`` with ``model`` (anything with ``invoke(messages, ...)``),
    returning only an answer the evidence supports (see the module docstring).

    ``embedder`` ranks sentences with the hybrid score (None, the default: BM25 alone); ``max_sentences`` (3)
    evidence sentences go to the model, which may reply ``max_tokens`` (48) tokens; ``constrain=True`` asks a
    model that enforces llama.cpp grammars for a quote of the evidence (:func:`span_grammar`; off by default: with
    SmolLM2-135M it quoted the wrong words and took several times longer, benchmarks/results/book_answers.md);
    ``options`` are more keyword arguments for ``model.invoke`` (e.g. ``seed``). An unknown setting is a TypeError.
    """
    return drive(grounded_answer_steps(question, hits, model, **settings))


async def agrounded_answer(
    question: str, hits: Sequence[ScoredFragment | Fragment | str], model: Any, **settings: Unpack[AnswerSettings]
) -> GroundedAnswer:
    """Async :func:`grounded_answer` (the model by ``ainvoke``, the embedder in a worker thread)."""
    return await adrive(grounded_answer_steps(question, hits, model, **settings))


def _check_question(question: object) -> None:
    if not isinstance(question, str):
        raise TypeError(f"question must be str, got {type(question).__name__}")
    if not question.strip():
        raise ValueError("question is empty: ask something")
