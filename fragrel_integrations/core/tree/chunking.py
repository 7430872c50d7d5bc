"""Sentence-aware chunking under a token limit (ILM-TR uses 600 tokens per chunk)."""

from __future__ import annotations

import re
from collections.abc import Callable

from ..._validation import check_positive_int, check_type
from ...models.tokens import estimate_tokens
from ..token_budget import truncate_to_tokens
from .clustering import pack_by_tokens

__all__ = ["chunk_text", "split_sentences"]

#: Latin sentence ends (followed by whitespace), blank lines, and the full-width ends of Chinese and Japanese
#: text (``。！？``, which need no space after them; a closing quote or bracket right after one stays with it).
_BOUNDARY = re.compile(
    r"(?<=[.!?])[\"'\)\]]*\s+|\n\s*\n|(?<=[\u3002\uff01\uff1f])(?![\u201d\u2019\u300d\u300f\uff09])\s*"
    r"|(?<=[\u3002\uff01\uff1f][\u201d\u2019\u300d\u300f\uff09])\s*"
)


def split_sentences(text: str) -> list[str]:
    """Split ``text`` after ``.``, ``!`` or ``?`` followed by whitespace, after ``。``, ``！`` or ``？`` (no space
    needed), and at blank lines; whitespace is normalised inside each sentence.

    >>> split_sentences("One. Two!  Three?\\n\\nFour")
    ['One.', 'Two!', 'Three?', 'Four']
    >>> split_sentences("\u4f60\u597d\u3002\u518d\u89c1\uff01")
    ['\u4f60\u597d\u3002', '\u518d\u89c1\uff01']
    """
    check_type(text, str, "text must be str")
    parts = (" ".join(p.split()) for p in _BOUNDARY.split(text) if p)
    return [p for p in parts if p]


def _split_long(sentence: str, max_tokens: int, count: Callable[[str], int]) -> list[tuple[str, int]]:
    """Cut one over-long sentence into word runs that each fit; a word longer than the limit on its own (text
    without spaces: Chinese, emoji, one long token) is cut by characters. Each run comes with its token count, so
    no text is counted twice (the counter may be a model's tokenizer)."""
    out: list[tuple[str, int]] = []
    rest = sentence
    while rest:
        n = count(rest)
        if n <= max_tokens:
            out.append((rest, n))
            break
        head = truncate_to_tokens(rest, max_tokens, count)
        if not head:  # a first character that alone costs more than the limit: keep it, to move on
            head = rest[0]
        out.append((head, count(head)))
        rest = rest[len(head) :].strip()
    return out


def chunk_text(text: str, max_tokens: int = 600, counter: Callable[[str], int] | None = None) -> list[str]:
    """Pack whole sentences into chunks of at most ``max_tokens`` tokens, in order.

    A sentence that would push a chunk over the limit starts the next chunk; a single sentence longer than the
    limit is cut at word boundaries, and a word longer than the limit by characters, so every chunk fits (text
    without spaces or sentence ends included). ``counter`` maps text to a token count (default: the offline estimate).
    The limit is checked on the sum of sentence counts.

    >>> chunk_text("Alpha beta. Gamma delta. Epsilon.", max_tokens=9)
    ['Alpha beta. Gamma delta.', 'Epsilon.']
    """
    check_positive_int(max_tokens, "max_tokens")
    count = estimate_tokens if counter is None else counter
    pieces = [p for sentence in split_sentences(text) for p in _split_long(sentence, max_tokens, count)]
    groups = pack_by_tokens(range(len(pieces)), [n for _, n in pieces], max_tokens)
    return [" ".join(pieces[i][0] for i in group) for group in groups]
