"""Split texts into fragments: word windows (stories), line windows (code), turns (dialogue)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._validation import check_positive_int, check_type
from .fragments import Fragment

__all__ = ["split_lines", "split_turns", "split_words"]


def _check_window(size: int, stride: int | None, what: str) -> int:
    check_positive_int(size, what)
    stride = size if stride is None else stride
    if isinstance(stride, bool) or not isinstance(stride, int) or not 0 < stride <= size:
        raise ValueError(f"stride must be an int in [1, {what}={size}], got {stride!r}")
    return stride


def _starts(n: int, size: int, stride: int) -> range:
    """Window starts over ``n`` items: every ``stride`` until a window of ``size`` reaches the end."""
    return range(0, max(n - size, 0) + stride, stride) if n else range(0)


def split_words(
    text: str,
    *,
    fragment_words: int = 500,
    stride: int | None = None,
    doc_id: str = "0",
    metadata: Mapping[str, Any] | None = None,
) -> list[Fragment]:
    """Split ``text`` into windows of ``fragment_words`` words (LongBench-style: 500 or 800).

    Whitespace is normalised to single spaces. Positions count windows from 0.

    >>> [f.text for f in split_words("a b c d e", fragment_words=2)]
    ['a b', 'c d', 'e']
    """
    check_type(text, str, "text must be str")
    stride = _check_window(fragment_words, stride, "fragment_words")
    words = text.split()
    meta = dict(metadata or {})
    starts = _starts(len(words), fragment_words, stride)
    return [Fragment(" ".join(words[s : s + fragment_words]), doc_id, pos, dict(meta)) for pos, s in enumerate(starts)]


def split_lines(
    text: str,
    *,
    fragment_lines: int = 20,
    stride: int | None = 10,
    doc_id: str = "0",
    metadata: Mapping[str, Any] | None = None,
) -> list[Fragment]:
    """Split code into windows of ``fragment_lines`` lines every ``stride`` lines (RepoCoder: 20 / 10).

    ``metadata`` gains ``start_line`` and ``end_line`` (1-based, inclusive).

    >>> [f.metadata["start_line"] for f in split_lines("\\n".join("abcde"), fragment_lines=2, stride=2)]
    [1, 3, 5]
    """
    check_type(text, str, "text must be str")
    stride = _check_window(fragment_lines, stride, "fragment_lines")
    lines = text.splitlines()
    out: list[Fragment] = []
    for pos, start in enumerate(_starts(len(lines), fragment_lines, stride)):
        chunk = lines[start : start + fragment_lines]
        meta = {**(metadata or {}), "start_line": start + 1, "end_line": start + len(chunk)}
        out.append(Fragment("\n".join(chunk), doc_id, pos, meta))
    return out


def split_turns(
    turns: Sequence[str | Mapping[str, Any]], *, doc_id: str = "0", text_key: str = "text", speaker_key: str = "speaker"
) -> list[Fragment]:
    """One fragment per dialogue turn, in order.

    A turn is a string or a mapping with ``text`` (and optionally ``speaker``, rendered as ``"speaker: text"``);
    other keys of a mapping go into the fragment's metadata.

    >>> [f.text for f in split_turns([{"speaker": "Ann", "text": "Hi"}, "Hello"])]
    ['Ann: Hi', 'Hello']
    """
    out: list[Fragment] = []
    for pos, turn in enumerate(turns):
        if isinstance(turn, str):
            out.append(Fragment(turn, doc_id, pos))
            continue
        if not isinstance(turn, Mapping) or text_key not in turn:
            raise TypeError(f"turn {pos} must be a str or a mapping with a {text_key!r} key, got {turn!r:.80}")
        text = str(turn[text_key])
        speaker = turn.get(speaker_key)
        meta = {k: v for k, v in turn.items() if k != text_key}
        out.append(Fragment(f"{speaker}: {text}" if speaker else text, doc_id, pos, meta))
    return out
