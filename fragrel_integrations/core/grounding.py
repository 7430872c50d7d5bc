"""Grounded answers: a short answer the retrieved text supports, with the quoted evidence, or an honest "not stated".

:func:`grounded_answer` takes a question and the retrieved fragments and

1. splits the fragments into sentences (:func:`split_sentences`: Unicode sentence ends, long sentences again at
   ``;`` and ``:``, text without sentence ends in windows of :data:`MAX_QUOTE_WORDS` words), ranks all of them by
   BM25, embeds only the best :data:`MAX_EMBEDDED_SENTENCES` and ranks those by the hybrid score (0.5 min-max
   BM25 + 0.5 min-max dense cosine, as the index ranks fragments): the best ``max_sentences`` are the evidence,
   each cited by its document, fragment position and sentence number;
2. asks the model to answer from the evidence alone (with ``constrain=True``, a model that enforces a llama.cpp
   grammar may only copy a run of words from the evidence, :func:`span_grammar`; the check below never relies on
   it);
3. checks the reply against the evidence (:func:`answer_span`): after a leading label ("Answer:", on its line or
   the line before), the whole reply must be a contiguous run of the words of ONE evidence sentence, with a word
   that is not a function word or a word of the question, and the negations around it must agree with the
   question. An unsupported reply is never returned as the answer: :attr:`GroundedAnswer.text` is None and
   :meth:`GroundedAnswer.format` says the text does not state an answer and prints the evidence instead. The
   answer printed is the span as the sentence writes it, and that sentence is cited first.

"Supported" is lexical grounding, not proof of truth: the words printed are words of the quoted sentence, in its
order, with no negation of that sentence dropped and no number cut; the sentence may still be about something
else than the question asks (a span can be the wrong part of the right sentence).

>>> from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel
>>> text = "Ann lived by the sea. Her parrot was called Poll. It rained all winter."
>>> result = grounded_answer("What was the parrot called?", [text], ScriptedChatModel(["Answer: Poll."]),
...                          embedder=HashingEmbedder(), max_sentences=1)
>>> result.text, result.evidence[0].quote
('Poll', 'Her parrot was called Poll.')
>>> grounded_answer("What was the parrot called?", [text], ScriptedChatModel(["Poll lived by the sea"]),
...                 embedder=HashingEmbedder()).text is None
True
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from typing import Any, TypedDict, Unpack

import numpy as np

from .._validation import check_positive_int, check_type
from ..models.chat import context_window
from ..models.embedder import Embedder, embed_documents
from ..models.structured import ReplyFormat, format_kwargs
from ..models.tokens import count_message_tokens
from .fragments import Fragment, ScoredFragment
from .scorers import DenseScorer, make_scorer, minmax, tokenize
from .steps import CallStep, ChatStep, Steps, adrive, drive
from .token_budget import fit_texts

__all__ = [
    "ANSWER_PROMPT",
    "MAX_ANSWER_WORDS",
    "MAX_EMBEDDED_SENTENCES",
    "MAX_QUOTE_WORDS",
    "MAX_REPLY_CHARS",
    "AnswerSettings",
    "Evidence",
    "GroundedAnswer",
    "agrounded_answer",
    "answer_messages",
    "answer_span",
    "check_answer_settings",
    "grounded_answer",
    "grounded_answer_steps",
    "reply_answer",
    "select_evidence",
    "span_grammar",
    "split_sentences",
    "supported_by",
    "word_units",
]

#: The instruction the model gets (short: the embedded model has 135M parameters).
ANSWER_PROMPT = "Answer the question with a few words from the text."

#: Sentences longer than this many words are split again at ``;`` and ``:``.
LONG_SENTENCE_WORDS = 40

#: No quote is longer than this many word units: a longer sentence, or text without sentence ends, is cut into
#: windows of this many words (so no prompt grows with the fragment).
MAX_QUOTE_WORDS = 80

#: At most this many sentences are embedded per question: all sentences are ranked by BM25 first and only the
#: best ones are embedded for the hybrid score (the others keep their BM25 rank, after them).
MAX_EMBEDDED_SENTENCES = 64

#: A reply longer than this many characters is not read (it is unsupported): the check stays bounded.
MAX_REPLY_CHARS = 4000

#: An answer is at most this many word units (a longer reply is unsupported).
MAX_ANSWER_WORDS = MAX_QUOTE_WORDS

# Characters of scripts written without spaces: each one is a word unit (Han, kana, Thai, Lao, Khmer, Myanmar).
_NO_SPACE = (
    "\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3005-\u3007\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f"
)
# Combining marks that belong to a word (Python's ``\w`` leaves them out; Indic vowel signs, Hebrew points, ...).
_MARKS = "\u0300-\u036f\u0483-\u0489\u0591-\u05c7\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06ed\u0900-\u0963" \
    "\u0966-\u0dff\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"  # fmt: skip
_LETTER = rf"(?:(?![{_NO_SPACE}])[^\W_]|[{_MARKS}])"
_UNIT = re.compile(
    rf"(?<![\w.,])[-\u2212+]?\d+(?:[.,:]\d+)*%?|[{_NO_SPACE}]|{_LETTER}+(?:['\u2019]{_LETTER}+)*", re.UNICODE
)
_CLOSERS = "\"'”’)\\]_»」』）】〉》"
_LATIN_END = "[.!?\u203c\u2047-\u2049]"
_OTHER_END = "[\u3002\uff01\uff1f\uff61\uff0e\u061f\u06d4\u0964\u0965\u1362\u0589\u17d4\u104b]"
_SENTENCE_END = re.compile(
    rf"(?<={_LATIN_END})[{_CLOSERS}]*\s+|(?P<other>{_OTHER_END}+)[{_CLOSERS}]*\s*|\n[^\S\n]*\n\s*"
)
_NON_BLANK = re.compile(r"\S(?:.*\S)?", re.DOTALL)
_CLAUSE_END = re.compile(r"(?<=[;:])\s+|(?<=[\uff1b\uff1a])\s*")
_TITLE_TEXT = "mr. mrs. ms. dr. st. messrs. mme. mlle. capt. col. gen. rev. sr. jr. mt."
_TITLES = frozenset(_TITLE_TEXT.split())
_INITIALS = re.compile(r"(?:[a-z]\.)+")
#: What the answer functions take as retrieved text.
_Hits = Sequence[ScoredFragment | Fragment | str]
_PUNCT = "\"'“”‘’()[]_*,.;:!?-—"


def word_units(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, normalised)`` of the word units of ``text``: words of spaced scripts (inner apostrophes
    kept: ``didn't`` is one word), numbers (``1,200``, ``3.5``, ``-5``, ``12%`` are one unit each), and one unit
    per character of scripts written without spaces (Chinese, Japanese, Thai, ...). Normalised: NFKC, case-folded,
    ``’`` as ``'``; punctuation and quotes are no units.

    >>> [w for _, _, w in word_units("“Didn't” Friday pay 1,200 £? 星期五。")]
    ["didn't", 'friday', 'pay', '1,200', '星', '期', '五']
    """
    return [
        (m.start(), m.end(), unicodedata.normalize("NFKC", m.group()).casefold().replace("\u2019", "'"))
        for m in _UNIT.finditer(text)
    ]


def split_sentences(
    text: str, *, long_words: int = LONG_SENTENCE_WORDS, max_words: int = MAX_QUOTE_WORDS
) -> list[tuple[int, int]]:
    """``(start, end)`` character spans of the sentences of ``text``.

    A sentence ends after ``.``, ``!`` or ``?`` and whitespace, after the sentence ends of other scripts (``。！？``
    ``．｡`` ``؟`` ``۔`` ``।`` ``॥`` ``።`` ``។`` ``။``, no space needed), and at a blank line; a closing quote or
    bracket stays with it. Titles (Mr., Mrs., St., ...) and initials end no sentence. A sentence of more than
    ``long_words`` word units is split again after ``;`` and ``:``, and a piece of more than ``max_words`` units
    (text without sentence ends) is cut into windows of ``max_words`` units (:func:`word_units`).

    >>> t = "Mr. Rochester ran. She said: “Stop!” Then it rained."
    >>> [t[a:b] for a, b in split_sentences(t)]
    ['Mr. Rochester ran.', 'She said: “Stop!”', 'Then it rained.']
    >>> t = "他叫星期五。「好！」她说"
    >>> [t[a:b] for a, b in split_sentences(t)]
    ['他叫星期五。', '「好！」', '她说']
    """
    check_type(text, str, "text must be str")
    check_positive_int(max_words, "max_words")
    sentences, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        if m.group("other") is None and text[m.start() - 1 : m.start()] == ".":
            word = (text[start : m.start()].rsplit(None, 1) or [""])[-1].lstrip(_PUNCT[:8]).lower()
            if word in _TITLES or (word != "i." and _INITIALS.fullmatch(word)):
                continue
        sentences.append((start, m.start() + len(m.group(0).rstrip())))
        start = m.end()
    sentences.append((start, len(text)))
    return [c for a, b in sentences if text[a:b].strip() for c in _clauses(text, a, b, long_words, max_words)]


def _clauses(text: str, start: int, end: int, long_words: int, max_words: int) -> list[tuple[int, int]]:
    """The sentence ``text[start:end]``, split after ``;`` and ``:`` when it is long, each piece in windows."""
    ends = _CLAUSE_END.finditer(text, start, end) if len(word_units(text[start:end])) > long_words else ()
    bounds = [start, *(i for m in ends for i in m.span()), end]  # (start, end) of each piece, flat
    return [w for a, b in zip(bounds[::2], bounds[1::2], strict=True) for w in _windows(text, a, b, max_words)]


def _windows(text: str, start: int, end: int, max_words: int) -> list[tuple[int, int]]:
    """``text[start:end]`` in runs of at most ``max_words`` word units, without surrounding blanks (blank runs
    dropped)."""
    units = word_units(text[start:end])
    cuts = [start + units[i][0] for i in range(max_words, len(units), max_words)]
    return [m.span() for a, b in pairwise([start, *cuts, end]) if (m := _NON_BLANK.search(text, a, b))]


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
        return asdict(self)


@dataclass(frozen=True, slots=True)
class GroundedAnswer:
    """The outcome of :func:`grounded_answer`: ``text`` is the answer, the span of the first evidence sentence that
    the reply is (as that sentence writes it; None when the evidence does not support the reply, :func:`answer_span`),
    ``evidence`` the quoted sentences (the one holding the answer first), ``reply`` the model's raw reply
    (unsupported replies stay here only, never in ``text``)."""

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


def _sentences(hits: _Hits) -> list[tuple[Fragment, int, int, int]]:
    """(fragment, sentence number, start, end) of every sentence of ``hits`` with at least one word unit."""
    if isinstance(hits, str):
        raise TypeError("hits must be a list of retrieved fragments (ScoredFragment, Fragment or str), not one str")
    out = []
    for i, hit in enumerate(hits):
        if isinstance(hit, ScoredFragment):
            hit = hit.fragment
        elif isinstance(hit, str):
            hit = Fragment(hit, "text", i)
        elif not isinstance(hit, Fragment):
            raise TypeError(f"hits[{i}] must be a ScoredFragment, Fragment or str, got {type(hit).__name__}")
        out += [(hit, n, a, b) for n, (a, b) in enumerate(split_sentences(hit.text)) if _UNIT.search(hit.text, a, b)]
    return out


def _bm25_text(text: str) -> str:
    """``text`` as its word units separated by spaces (so BM25 sees one token per Chinese character)."""
    return " ".join(w for _, _, w in word_units(text))


def _evidence_steps(question: str, hits: _Hits, embedder: Embedder | None, max_sentences: int) -> Steps[list[Evidence]]:
    sentences = _sentences(hits)
    if not sentences:
        return []
    texts = [f.text[a:b] for f, _, a, b in sentences]
    scores = np.array(make_scorer("bm25", [_bm25_text(t) for t in texts])(_bm25_text(question)), dtype=np.float64)
    order = np.argsort(-scores, kind="stable")
    if embedder is not None:  # the hybrid score over the BM25-best MAX_EMBEDDED_SENTENCES only
        best = order[:MAX_EMBEDDED_SENTENCES]
        vectors = yield CallStep(embed_documents, (embedder, [texts[i] for i in best]))
        dense = yield CallStep(DenseScorer(vectors, embedder), (question,))
        hybrid = 0.5 * minmax(scores[best]) + 0.5 * minmax(np.asarray(dense, dtype=np.float64))
        scores[best] = hybrid
        order = np.concatenate([best[np.argsort(-hybrid, kind="stable")], order[MAX_EMBEDDED_SENTENCES:]])
    picked = [(sentences[i], float(scores[i])) for i in order[:max_sentences]]
    return [Evidence(f.text[a:b], f.doc_id, f.position, n, a, score) for (f, n, a, b), score in picked]


def select_evidence(
    question: str, hits: _Hits, *, embedder: Embedder | None = None, max_sentences: int = 3
) -> list[Evidence]:
    """The ``max_sentences`` sentences of ``hits`` that best match ``question``, best first. All sentences are
    ranked by BM25 over word units; with ``embedder`` the :data:`MAX_EMBEDDED_SENTENCES` best of them are embedded
    and re-ranked by the hybrid score (0.5 min-max BM25 + 0.5 min-max cosine, the score of those sentences), the
    rest follow in BM25 order (never embedded). Each quote has at most :data:`MAX_QUOTE_WORDS` word units.

    >>> [e.quote for e in select_evidence("Who fed the cat?", ["It rained. Tom fed the cat."], max_sentences=1)]
    ['Tom fed the cat.']
    """
    _check_question(question)
    check_positive_int(max_sentences, "max_sentences")
    return drive(_evidence_steps(question, hits, embedder, max_sentences))


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
    parsed = [[w for w in (_split_word(t) for t in s.split()) if w[1]] for s in sentences]
    if not any(parsed):
        raise ValueError("the evidence has no words to quote")

    places = [(j, i, word[1].lower()) for j, words in enumerate(parsed) for i, word in enumerate(words)]
    heads = [(j, i) for j, i, low in places if low not in _FUNCTION_WORDS and _norm(low) not in asked]
    heads = heads or [(j, i) for j, i, _ in places]  # no content word to start at: any word may
    rules = [f"s{j}w{i} ::= " + _word_rule(parsed[j], j, i, 1, max_words) for j, i in heads]
    tails = [  # continuation rules: word i as the (depth + 1)-th word of a quote
        f"s{j}w{i}x{depth} ::= " + _word_rule(words, j, i, depth + 1, max_words)
        for j, words in enumerate(parsed)
        for i in range(1, len(words))
        for depth in range(1, min(i, max_words - 1) + 1)
    ]
    return "\n".join([f"root ::= {' | '.join(f's{j}w{i}' for j, i in heads)}", *rules, *tails])


def _split_word(token: str) -> tuple[str, str, str]:
    """(leading punctuation, core, trailing punctuation) of a whitespace token."""
    core = token.strip(_PUNCT)
    return token.partition(core) if core else (token, "", "")


def _word_rule(words: list[tuple[str, str, str]], j: int, i: int, length: int, max_words: int) -> str:
    """The rule body for word ``i`` as the ``length``-th word of a quote."""
    lead, core, trail = words[i]
    body = (f"{_gbnf_literal(lead)}? " if lead and length == 1 else "") + _gbnf_literal(core)
    if trail:
        body += f" {_gbnf_literal(trail)}?"
    if i + 1 < len(words) and length < max_words:
        body += f' (" " s{j}w{i + 1}x{length})?'
    return body


#: Words that alone make no answer: function words (pronouns, auxiliaries, articles, prepositions, question words,
#: Chinese and Japanese particles) and words about answering.
_FUNCTION_WORD_TEXT = """
    a about above after again against all am an and any are as at be been before being below between both but by
    can could did do does doing down during each few for from further had has have having he her here hers herself
    him himself his how i if in into is it its itself just me more most my myself no nor not now of off on once
    only or other our ours ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were what when where
    which while who whom why will with would you your yours yourself yourselves also called named name s t
    answer question text passage context says said stated state mentioned
    的 了 是 在 和 与 及 也 就 都 而 之 其 这 那 個 个 们 們 吗 嗎 呢 吧 啊 谁 誰 什 么 麼 哪 何
    の は が を に で と も へ や か ね よ だ す ま
"""
_FUNCTION_WORDS = frozenset(_FUNCTION_WORD_TEXT.split())

#: Negation words (one word unit each); a word ending in ``n't`` is one too, a Korean word starting with 않 or 없,
#: and the kana pairs ない/なく/なか/せん (Japanese verb endings), see :func:`_negations`.
_NEGATION_TEXT = """
    not no nor never none neither nobody nothing nowhere noone cannot without ain't nay
    ne pas jamais aucun aucune personne rien ni nicht kein keine keinen keiner keines nie niemals nichts
    nunca jamás nada nadie ninguno ninguna non mai nessuno niente nem não nenhum
    не нет ни никогда ничего никто لا لم لن ليس ما नहीं न मत 안 못 않 아니 없
    不 没 沒 无 無 未 非 别 別 莫 勿 否 毋
"""
_NEGATIONS = frozenset(_NEGATION_TEXT.split())
_KANA_NEGATION = {("な", "い"), ("な", "く"), ("な", "か"), ("せ", "ん")}

#: Number words (digits are numbers by themselves): a span may not cut a number ("five" of "twenty-five").
_NUMBER_TEXT = """
    zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen
    eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred thousand million billion
    trillion dozen half first second third fourth fifth sixth seventh eighth ninth tenth
    〇 零 一 二 三 四 五 六 七 八 九 十 百 千 万 萬 亿 億 两 兩
"""
_NUMBER_WORDS = frozenset(_NUMBER_TEXT.split())


def _norm(token: str) -> str:
    """A light stem: plural and possessive endings off."""
    for end in ("'s", "’s", "es", "s"):
        if token.endswith(end) and len(token) - len(end) >= 3:
            return token[: -len(end)]
    return token


def _is_number(word: str) -> bool:
    return word.rstrip("%")[-1:].isdigit() or word in _NUMBER_WORDS


def _negations(words: Sequence[str]) -> list[tuple[int, int]]:
    """The unit ranges of the negations in ``words`` (normalised word units)."""
    out = []
    for i, w in enumerate(words):
        if w in _NEGATIONS or w.endswith("n't") or w.startswith(("않", "없")):
            out.append((i, i + 1))
        elif i + 1 < len(words) and (w, words[i + 1]) in _KANA_NEGATION:
            out.append((i, i + 2))
    return out


_LABEL = re.compile(
    r"^\W*(?:(?:the\s+)?(?:final\s+|short\s+)?answer\b(?:\s+to\s+(?:this|the)\s+question)?(?:\s+is)?\s*[:：,\-–—]?"
    r"|a\s*[:：]|(?:答案|回答|解答|答え|答)\s*(?:[:：]|是|は))\W*",
    re.IGNORECASE,
)


#: A sentence that ends as a question (it states nothing, so it supports no answer).
_ASKS = re.compile(rf"[?\uff1f\u061f\u2047\u2048][{_CLOSERS}\s]*$")

#: A line that only echoes the prompt (it may come before the answer's label).
_ECHO = re.compile(r"^\W*(?:question|text|context|passage|q)\s*[:：]", re.IGNORECASE)


def reply_answer(reply: str) -> str | None:
    """The part of a model's ``reply`` that is read as its answer, or None when it is too long to read
    (:data:`MAX_REPLY_CHARS`). When a line starts with a label ("Answer:", "The answer is", "A:", "答案：",
    "答え：", ...) and the lines before it, if any, only echo the prompt ("Question: ...", "Text: ..."), the
    answer is everything after the label (on its line and the lines after: a reply on the line after "Answer:"
    is read); otherwise it is the whole reply. Nothing else is dropped.

    >>> reply_answer("Question: Who came?\\nAnswer:\\n  Ann.")
    'Ann.'
    >>> reply_answer("The answer is: Poll")
    'Poll'
    >>> reply_answer("Tom came.\\nAnswer: Ann")  # a label after other words: the whole reply
    'Tom came.\\nAnswer: Ann'
    """
    check_type(reply, str, "reply must be str")
    if len(reply) > MAX_REPLY_CHARS:
        return None
    offset = 0
    for line in reply.splitlines(keepends=True):
        if m := _LABEL.match(line):
            rest = reply[offset + m.end() :].lstrip()
            return _LABEL.sub("", rest, count=1).strip()  # "Answer: The answer is ..." reads after both labels
        if line.strip() and not _ECHO.match(line):
            break
        offset += len(line)
    return reply.strip()


#: Korean case particles a word of the evidence may carry where the reply's word has none ("프라이데이가").
_KOREAN_PARTICLE_TEXT = "이 가 은 는 을 를 의 에 에서 에게 께서 로 으로 와 과 도 만 이다 입니다"
_KOREAN_PARTICLES = frozenset(_KOREAN_PARTICLE_TEXT.split())


def _same(reply_word: str, word: str) -> bool:
    """Whether a reply's word unit is the evidence's (equal, or a Korean word without its case particle)."""
    return reply_word == word or (
        "\uac00" <= word[:1] <= "\ud7a3"
        and word.startswith(reply_word)
        and word[len(reply_word) :] in _KOREAN_PARTICLES
    )


def _span_in(answer: list[str], sentence: list[tuple[int, int, str]], asked: bool) -> tuple[int, int] | None:
    """The unit range of the first occurrence of ``answer`` in ``sentence`` that passes the negation and number
    rules (``asked``: the question holds a negation), or None."""
    words = [w for _, _, w in sentence]
    m = len(answer)
    negations = _negations(words)
    if asked and not negations:
        return None  # a negative question answered from a positive sentence
    for i in range(len(words) - m + 1):
        if not all(_same(a, w) for a, w in zip(answer, words[i : i + m], strict=True)):
            continue
        if not asked and any(a < i or b > i + m for a, b in negations):
            continue  # the sentence denies what the span would state ("did not kill the captain")
        if (i and _is_number(words[i - 1]) and _is_number(answer[0])) or (
            i + m < len(words) and _is_number(words[i + m]) and _is_number(answer[-1])
        ):
            continue  # the span cuts a number ("five" of "twenty five")
        return i, i + m
    return None


def answer_span(reply: str, evidence: Sequence[str], question: str = "") -> tuple[int, int, int] | None:
    """``(i, start, end)`` when ``reply`` is supported by the evidence: its answer is ``evidence[i][start:end]``;
    None when it is not.

    Supported means, by construction: the reply's answer (:func:`reply_answer`: after a leading label) is, word
    unit by word unit (:func:`word_units`: case, punctuation and quotes ignored), exactly a contiguous run of ONE
    sentence of ``evidence`` (each item is split by :func:`split_sentences`; words of two sentences never combine);
    it has at most :data:`MAX_ANSWER_WORDS` units and at least one that is neither a function word nor a word of
    ``question``; the sentence is not a question (no ``?`` at its end: it states nothing); the sentence holds no
    negation outside the run unless the question holds one, and a negative question needs a negative sentence;
    the run does not cut a number (``five`` of ``twenty-five``). The numbers and negations of the answer are then
    the sentence's own. The first sentence (in evidence order) that qualifies is the one returned.

    >>> answer_span("Answer: with a knife.", ["Friday killed the captain with a knife."], "How was he killed?")
    (0, 26, 38)
    >>> ev = ["Friday killed the captain with a knife."]
    >>> [answer_span(r, ev, "Who killed the captain?") for r in ("Atkins, with a knife", "the captain")]
    [None, None]
    """
    check_type(question, str, "question must be str")
    if isinstance(evidence, str):
        raise TypeError("evidence must be a list of sentences (str), not one str")
    answer = [w for _, _, w in word_units(reply_answer(reply) or "")]
    asked = [w for _, _, w in word_units(question)]
    stems = {_norm(w) for w in asked}
    if not answer or len(answer) > MAX_ANSWER_WORDS or all(w in _FUNCTION_WORDS or _norm(w) in stems for w in answer):
        return None  # no answer: nothing, too long, or only question words and function words
    negative = bool(_negations(asked))
    for i, item in enumerate(evidence):
        check_type(item, str, f"evidence[{i}] must be str")
        for a, b in split_sentences(item):
            if _ASKS.search(item, a, b):
                continue  # a question in the text states nothing
            units = word_units(item[a:b])
            hit = _span_in(answer, units, negative)
            if hit is not None:
                return i, a + units[hit[0]][0], a + units[hit[1] - 1][1]
    return None


def supported_by(reply: str, evidence: Sequence[str], question: str = "") -> int | None:
    """The index of the evidence item that supports ``reply`` (:func:`answer_span`), or None.

    >>> supported_by("Friday", ["He was kind.", "I called him Friday, the day I saved him."], "What was his name?")
    1
    >>> supported_by("His name was Saber", ["I called him Friday."], "What was his name?") is None
    True
    """
    hit = answer_span(reply, evidence, question)
    return None if hit is None else hit[0]


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


def grounded_answer_steps(
    question: str,
    hits: _Hits,
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
    evidence = yield from _evidence_steps(question, hits, embedder, max_sentences)
    if not evidence:
        return GroundedAnswer(question, None, (), "", details={"reason": "no text retrieved"})
    quotes = _fit(question, [e.quote for e in evidence], model, max_tokens)
    evidence = evidence[: len(quotes)]
    grammar = span_grammar(quotes, question=question) if constrain else None
    kwargs = format_kwargs(model, ReplyFormat.grammar(grammar, name="quote")) if grammar else {}
    params = {"temperature": 0.0, "max_tokens": max_tokens, **(options or {}), **kwargs}
    reply = yield ChatStep(model, answer_messages(question, quotes), params)
    if not isinstance(reply, str):
        reply = str(getattr(reply, "content", reply))
    hit = answer_span(reply, quotes, question)
    if hit is None:
        return GroundedAnswer(question, None, tuple(evidence), reply, bool(kwargs))
    i, a, b = hit
    ordered = (evidence[i], *(e for j, e in enumerate(evidence) if j != i))
    return GroundedAnswer(question, quotes[i][a:b], ordered, reply, bool(kwargs), {"answer_span": (a, b)})


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


def grounded_answer(question: str, hits: _Hits, model: Any, **settings: Unpack[AnswerSettings]) -> GroundedAnswer:
    """Answer ``question`` from the retrieved ``hits`` with ``model`` (anything with ``invoke(messages, ...)``),
    returning only an answer the evidence supports (see the module docstring).

    ``embedder`` ranks sentences with the hybrid score (None, the default: BM25 alone); ``max_sentences`` (3)
    evidence sentences go to the model, which may reply ``max_tokens`` (48) tokens; ``constrain=True`` asks a
    model that enforces llama.cpp grammars for a quote of the evidence (:func:`span_grammar`, through
    :class:`~fragrel_integrations.models.structured.ReplyFormat`; off by default, the support check is the same
    either way); ``options`` are more keyword arguments for ``model.invoke`` (e.g. ``seed``). An unknown setting
    is a TypeError.
    """
    return drive(grounded_answer_steps(question, hits, model, **settings))


async def agrounded_answer(
    question: str, hits: _Hits, model: Any, **settings: Unpack[AnswerSettings]
) -> GroundedAnswer:
    """Async :func:`grounded_answer` (the model by ``ainvoke``, the embedder in a worker thread)."""
    return await adrive(grounded_answer_steps(question, hits, model, **settings))


def _check_question(question: object) -> None:
    check_type(question, str, "question must be str")
    if not question.strip():
        raise ValueError("question is empty: ask something")
