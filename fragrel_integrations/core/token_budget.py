"""Texts cut to a token budget: prompts fitted to a context window, model output capped before it is parsed or stored.

>>> truncate_to_tokens("one two three four", 2)
'one two'
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from .._validation import check_min_int, check_positive_int, check_type
from ..models.tokens import TokenCounter, count_tokens, estimate_tokens

__all__ = ["OUTPUT_CHARS_PER_TOKEN", "cap_output", "fit_texts", "storable_text", "truncate_to_tokens"]


#: Characters of model output kept per token asked for (``max_tokens``) before a reply is parsed or stored: 4x
#: the ~4 characters an English token averages, so a model that honours ``max_tokens`` is never cut, while one
#: that ignores it (a 10 MB reply) cannot fill a store. See :func:`cap_output`.
OUTPUT_CHARS_PER_TOKEN = 16


def _counter(counter: object | None) -> Callable[[str], int]:
    if counter is None:
        return estimate_tokens
    if callable(counter) and not isinstance(counter, TokenCounter):
        return counter  # type: ignore[return-value]
    return lambda text: count_tokens(counter, text)


def truncate_to_tokens(text: str, max_tokens: int, counter: object | None = None) -> str:
    """The longest word-prefix of ``text`` that fits in ``max_tokens`` (binary search over words).

    When not even the first word fits (text without spaces: Chinese, a run of emoji, one long token) the
    longest character prefix of that word that fits is returned instead, so the result is empty only for
    ``max_tokens=0`` or a first character that alone costs more than ``max_tokens``. The character search looks
    at most :data:`OUTPUT_CHARS_PER_TOKEN` characters per token, so a 2 MB word costs no more than a short one.

    ``counter`` is a model/object with ``count_tokens``, a function ``text -> int``, or None for the estimate.

    >>> truncate_to_tokens("one two three four", 2)
    'one two'
    >>> truncate_to_tokens("x" * 100, 2)  # one word longer than the budget: cut by characters
    'xxxxxxxx'
    """
    check_min_int(max_tokens, "max_tokens", 0)
    count = _counter(counter)
    if count(text) <= max_tokens:
        return text
    words = text.split()
    lo, hi = 0, len(words)  # the answer lies in [lo, hi); words[:lo] fits
    if hi > max_tokens + 1 and count(" ".join(words[: max_tokens + 1])) > max_tokens:
        hi = max_tokens + 1  # words cost a token or more: a 2 MB text is searched in its first words only
    lo = _longest(lo, hi, lambda mid: count(" ".join(words[:mid])) <= max_tokens)
    if lo == 0 and words and max_tokens > 0:
        return _char_prefix(words[0], max_tokens, count)
    return " ".join(words[:lo])


def _char_prefix(word: str, max_tokens: int, count: Callable[[str], int]) -> str:
    """The longest prefix of ``word`` (at most ``OUTPUT_CHARS_PER_TOKEN * max_tokens`` characters) that fits."""
    head = word[: OUTPUT_CHARS_PER_TOKEN * max_tokens]
    # head[:0] fits; head[:len(head) + 1] is past the end
    return head[: _longest(0, len(head) + 1, lambda mid: count(head[:mid]) <= max_tokens)]


def _longest(lo: int, hi: int, fits: Callable[[int], bool]) -> int:
    """Binary search: the largest ``n`` in ``[lo, hi)`` that ``fits``, given that ``lo`` fits and ``hi`` does not."""
    while lo < hi - 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


def cap_output(text: str, max_tokens: int) -> tuple[str, bool]:
    """``text`` cut to ``OUTPUT_CHARS_PER_TOKEN * max_tokens`` characters (at the last whitespace in the final
    quarter, when there is one), and whether it was cut. Linear time; for model output before it is stored.

    >>> cap_output("short reply", 4)
    ('short reply', False)
    >>> text, cut = cap_output("word " * 100, 2)
    >>> len(text) <= 32, cut
    (True, True)
    """
    check_type(text, str, "text must be str")
    check_positive_int(max_tokens, "max_tokens")
    limit = OUTPUT_CHARS_PER_TOKEN * max_tokens
    if len(text) <= limit:
        return text, False
    head = text[:limit]
    space = max(head.rfind(" "), head.rfind("\n"))
    if space >= limit * 3 // 4:
        head = head[:space]
    return head.rstrip(), True


_SURROGATE = re.compile(r"[\ud800-\udfff]")


def storable_text(text: str) -> str:
    """``text`` with lone surrogates (which no UTF-8 store or file accepts) replaced by U+FFFD; for model output.

    >>> storable_text("ok \\ud800!") == "ok \\ufffd!"
    True
    """
    return _SURROGATE.sub("\ufffd", text)


def fit_texts(
    texts: Sequence[str],
    max_tokens: int,
    counter: object | None = None,
    *,
    separator_tokens: int = 2,
    min_truncated_tokens: int = 16,
) -> list[str]:
    """Keep texts in the given order while they fit in ``max_tokens`` (each also costs ``separator_tokens``).

    The first text that does not fit is cut to the remaining room if at least ``min_truncated_tokens`` remain
    (pass a huge value to never cut); everything after it is dropped.

    >>> fit_texts(["aaaa bbbb", "cccc dddd eeee"], 3, separator_tokens=0, min_truncated_tokens=1)
    ['aaaa bbbb', 'cccc']
    """
    check_min_int(max_tokens, "max_tokens", 0)
    count = _counter(counter)
    out: list[str] = []
    room = max_tokens
    for text in texts:
        need = count(text) + separator_tokens
        if need <= room:
            out.append(text)
            room -= need
            continue
        if room - separator_tokens >= max(1, min_truncated_tokens):
            cut = truncate_to_tokens(text, room - separator_tokens, count)
            if cut:
                out.append(cut)
        break
    return out
