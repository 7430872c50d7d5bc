"""The lenient fallback parser of the triplet memory controller: triplets a weak model wrote without the
``[MEM_WRITE{..}]`` wrapper, one ``a >> b >> c`` per line. One left-to-right pass, linear in the text's length.
"""

from __future__ import annotations

from ..._validation import check_type
from .facts import Triplet
from .text_api import SkippedCall, term_problem

__all__ = ["DEFAULT_MAX_TERM_CHARS", "lenient_scan", "lenient_triplets"]

#: longest term the controller stores from model output (names and short phrases)
DEFAULT_MAX_TERM_CHARS = 200

_BULLETS = ("-", "*", "\u2022")


def _strip_marker(line: str) -> str:
    """``line`` without a leading list marker (``-``, ``*``, ``\u2022``, ``1.``, ``2)``)."""
    if line.startswith(_BULLETS):
        return line[1:].lstrip()
    i = len(line) - len(line.lstrip("0123456789"))
    if i and line[i : i + 1] in (".", ")"):
        return line[i + 1 :].lstrip()
    return line


def lenient_scan(text: str, max_term_chars: int | None) -> tuple[list[tuple[Triplet, int]], list[SkippedCall]]:
    """Triplets from ``a >> b >> c`` lines (with their offsets) and the triplet-like lines skipped; one pass."""
    found: list[tuple[Triplet, int]] = []
    skipped: list[SkippedCall] = []
    offset = 0
    for raw in text.split("\n"):
        start, offset = offset, offset + len(raw) + 1
        if ">>" not in raw:
            continue
        line = _strip_marker(raw.strip()).removeprefix("{").removesuffix("}")
        if any(ch in line for ch in "{}[]"):
            continue  # a (malformed) call or other markup, not a plain triplet line
        parts = [p.strip() for p in line.split(">>")]
        if len(parts) != 3 or not all(parts):
            continue
        reason = next(filter(None, (term_problem(p, max_term_chars) for p in parts)), None)
        if reason is None:  # the checks Triplet makes: every part is non-empty, stripped and checked here
            found.append((Triplet(*parts), start))
        else:
            skipped.append(SkippedCall(start, raw[:200], reason))
    return found, skipped


def lenient_triplets(text: str, *, max_term_chars: int | None = DEFAULT_MAX_TERM_CHARS) -> list[Triplet]:
    """Triplets a weak model wrote without the call wrapper: one ``a >> b >> c`` (optionally ``{..}``, after an
    optional list marker) per line. Lines with brackets, braces, a bad term or not three terms are skipped.
    Linear in ``len(text)``.

    >>> lenient_triplets("1. Dan >> works at >> Google")
    [Triplet(t1='Dan', t2='works at', t3='Google')]
    """
    check_type(text, str, "text must be str")
    return [t for t, _ in lenient_scan(text, max_term_chars)[0]]
