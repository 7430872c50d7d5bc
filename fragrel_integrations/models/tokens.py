"""Offline token counting: the model's own tokenizer when it has one, else a word-based estimate that mostly
overcounts (``tiktoken`` is not used: it downloads its encodings).

>>> estimate_tokens("Hello, world!")  # real tokenizers: 4
6
"""

from __future__ import annotations

import math
import re
from typing import Protocol, runtime_checkable

from .._validation import check_type
from .chat import Messages, to_messages

__all__ = ["MESSAGE_OVERHEAD_TOKENS", "TokenCounter", "count_message_tokens", "count_tokens", "estimate_tokens"]

_PIECE = re.compile(r"[^\W_]+|[^\w\s]|_", re.UNICODE)
_CHARS_PER_TOKEN = 4

#: Tokens a chat template adds around each message (ChatML adds 5, Gemma 5-6).
MESSAGE_OVERHEAD_TOKENS = 8


@runtime_checkable
class TokenCounter(Protocol):
    """Anything with ``count_tokens(text) -> int``."""

    def count_tokens(self, text: str) -> int: ...


def estimate_tokens(text: str) -> int:
    """``ceil(len/4)`` tokens per run of letters/digits, 1 per other symbol.

    >>> estimate_tokens("internationalization")  # 20 letters -> 5
    5
    >>> estimate_tokens("")
    0
    """
    check_type(text, str, "text must be str")
    pieces = _PIECE.findall(text)
    return sum(max(1, math.ceil(len(p) / _CHARS_PER_TOKEN)) if p[0].isalnum() else 1 for p in pieces)


def count_tokens(model: object | None, text: str) -> int:
    """Tokens in ``text``: the model's ``count_tokens`` if it has one, else :func:`estimate_tokens`."""
    fn = getattr(model, "count_tokens", None)
    return int(fn(text)) if callable(fn) else estimate_tokens(text)


def count_message_tokens(model: object | None, messages: Messages) -> int:
    """The model's ``count_message_tokens`` if it has one, else content tokens plus the overhead per message."""
    msgs = to_messages(messages)
    fn = getattr(model, "count_message_tokens", None)
    if callable(fn):
        return int(fn(msgs))
    return sum(count_tokens(model, m["content"]) + MESSAGE_OVERHEAD_TOKENS for m in msgs) + MESSAGE_OVERHEAD_TOKENS
