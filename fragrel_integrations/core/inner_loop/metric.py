"""The LCS similarity of two memories: the inner loop stops when consecutive memories reach its threshold."""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence

from ..._validation import check_type

__all__ = ["lcs_length", "lcs_similarity", "lcs_tokens"]

_WORD = re.compile(r"\w+", re.UNICODE)


def lcs_length(a: Sequence[Hashable], b: Sequence[Hashable]) -> int:
    """Length of the longest common subsequence of two token sequences (O(len(a)·len(b)) time, O(len(b)) memory).

    >>> lcs_length("ABCBDAB", "BDCABA")
    4
    >>> lcs_length([], ["x"])
    0
    """
    if len(a) < len(b):
        a, b = b, a
    row = [0] * (len(b) + 1)
    for x in a:
        diagonal = 0  # row[j - 1] of the previous row
        for j, y in enumerate(b, start=1):
            above = row[j]
            row[j] = diagonal + 1 if x == y else max(above, row[j - 1])
            diagonal = above
    return row[-1]


def lcs_tokens(text: str) -> list[str]:
    """The tokens memories are compared on: lower-cased runs of letters and digits (punctuation is ignored).

    >>> lcs_tokens("The apple is in the Garden.")
    ['the', 'apple', 'is', 'in', 'the', 'garden']
    """
    check_type(text, str, "text must be str")
    return _WORD.findall(text.lower())


def lcs_similarity(a: str, b: str) -> float:
    """Normalised LCS similarity of two texts: ``LCS(tokens(a), tokens(b)) / max(len(tokens(a)), len(tokens(b)))``.

    1.0 for identical token sequences (two texts without tokens count as identical), 0.0 when one is empty.
    Tokens are :func:`lcs_tokens`.

    >>> lcs_similarity("the apple is in the garden", "The apple is in the kitchen.")
    0.8333333333333334
    >>> lcs_similarity("", "anything")
    0.0
    """
    ta, tb = lcs_tokens(a), lcs_tokens(b)
    longest = max(len(ta), len(tb))
    return lcs_length(ta, tb) / longest if longest else 1.0
