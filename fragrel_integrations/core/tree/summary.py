"""The summary-and-surprise prompt (one LLM call per chunk and per cluster) and its tolerant parser.

The model is asked for two labelled sections, ``(Summary): ...`` and ``(Surprise): ...``. :func:`parse_summary`
never raises on model output: when a section is missing or empty, the whole reply (labels removed) becomes the
summary, there is no surprise, and ``ok`` is False so the builder can count it. A surprise that says "None",
"N/A", "nothing" or has no letters or digits at all means no surprise. The parser runs in linear time (no
pattern with nested or adjacent overlapping quantifiers); the builder caps each section before storing it
(:class:`~fragrel_integrations.core.tree.summariser.Summariser`).

>>> parse_summary("(Summary): Tom buys a boat.\\n(Surprise): The boat is made of glass.")
ParsedSummary(summary='Tom buys a boat.', surprise='The boat is made of glass.', ok=True)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..._validation import check_positive_int, check_type
from ...models.structured import ReplyFormat

__all__ = [
    "PROMPT_VERSION",
    "SUMMARY_SYSTEM_PROMPT",
    "ParsedSummary",
    "parse_summary",
    "summary_format",
    "summary_messages",
]

#: Bump when the prompt changes: it is part of the summary cache key.
PROMPT_VERSION = "surprise-tree-v1"

SUMMARY_SYSTEM_PROMPT = (
    "You condense passages for a search index. Write a faithful summary that keeps names, numbers, places and "
    "events. Then note the facts in the passage that a reader would not expect: odd details, twists, exceptions, "
    "specific claims that run against common sense. Use only what the passage says."
)

_USER_TEMPLATE = (
    "Passage:\n{text}\n\n"
    "Reply in exactly this format, nothing before or after:\n"
    "(Summary): <the summary, at most {summary_words} words>\n"
    "(Surprise): <the unexpected facts, separated by semicolons, or None>"
)

_NAMES = r"summary|surprises?|surprising facts?"
#: A section label, three ways (linear time: every branch is anchored at a label word and no two quantifiers next
#: to each other can match the same characters): (a) at a line start, bracketed or not, Markdown-decorated,
#: followed by a colon or alone on its line; (b) ``(Summary)`` anywhere, colon optional (the one-line
#: ``(Summary): ... (Surprise): ...`` layout); (c) ``Surprise:`` in mid-line right after a sentence's end.
_LABEL = re.compile(
    rf"^[ \t>*#_\-]*(?:\(\s*)?(?P<a>{_NAMES})(?:\s*\))?[ \t*_]*(?::[ \t*_]*|(?=\r?$))"
    rf"|\(\s*(?P<b>{_NAMES})\s*\)[ \t*_]*(?::[ \t*_]*)?"
    rf"|(?<=[.!?])[ \t]+[*_]*(?P<c>{_NAMES})[*_]*:[ \t*_]*",
    re.IGNORECASE | re.MULTILINE,
)
_WORD_CHAR = re.compile(r"\w")
#: What a surprise section says when there is none (compared after trimming non-word characters at both ends).
_NONE_WORDS = frozenset(
    {"none", "n/a", "na", "nothing", "no surprise", "no surprises", "no surprise found", "no surprises found"}
)


def _says_none(surprise: str) -> bool:
    """Whether a surprise section means "no surprise": a None/N/A-like phrase or no word character at all.
    Linear time (the old ``^\\W*(...|-+)\\W*$`` pattern backtracked cubically on a run of dashes)."""
    first = _WORD_CHAR.search(surprise)
    if first is None:
        return True
    last = _WORD_CHAR.search(surprise[::-1])
    core = surprise[first.start() : len(surprise) - last.start()]  # type: ignore[union-attr]
    return len(core) <= 20 and core.lower() in _NONE_WORDS


@dataclass(frozen=True, slots=True)
class ParsedSummary:
    """What a summary call produced: ``ok`` is False when the reply lacked a usable section."""

    summary: str
    surprise: str
    ok: bool


def summary_messages(text: str, summary_tokens: int = 300) -> list[dict[str, str]]:
    """The chat request that summarises ``text``; the summary is asked for in about ``0.75 * summary_tokens`` words.

    >>> summary_messages("Some passage.", 40)[1]["content"].splitlines()[-2]
    '(Summary): <the summary, at most 30 words>'
    """
    check_type(text, str, "text must be str")
    check_positive_int(summary_tokens, "summary_tokens")
    words = max(5, summary_tokens * 3 // 4)
    return [
        {"role": "system", "content": SUMMARY_SYSTEM_PROMPT},
        {"role": "user", "content": _USER_TEMPLATE.format(text=text, summary_words=words)},
    ]


#: Characters allowed per token of a section under :func:`summary_format` (below the ~4 characters of an English
#: token, so both sections fit in the ``summary_tokens + surprise_tokens`` the summariser asks for).
FORMAT_CHARS_PER_TOKEN = 3


def summary_format(summary_tokens: int = 300, surprise_tokens: int = 150) -> ReplyFormat:
    """The constrained layout of a summary reply: ``(Summary): <one line>`` then ``(Surprise): <one line>``,
    each at most :data:`FORMAT_CHARS_PER_TOKEN` characters per token of its budget (so a reply cut by
    ``max_tokens`` still has both labels). Backends that enforce it (llama.cpp, OpenAI-compatible servers) always
    return a reply :func:`parse_summary` splits; others are parsed leniently as before.

    >>> summary_format(10, 5).parse("(Summary): Tom buys a boat.\\n(Surprise): None") is not None
    True
    """
    summary = FORMAT_CHARS_PER_TOKEN * check_positive_int(summary_tokens, "summary_tokens")
    surprise = FORMAT_CHARS_PER_TOKEN * check_positive_int(surprise_tokens, "surprise_tokens")
    return ReplyFormat.regex(
        rf"\(Summary\): [^\n]{{1,{summary}}}\n\(Surprise\): [^\n]{{1,{surprise}}}", name="summary_surprise"
    )


def _clean(text: str) -> str:
    return " ".join(text.split()).strip(" *_")


def _kind(label: re.Match[str]) -> str:
    name = label.group("a") or label.group("b") or label.group("c")
    return "summary" if name.lower() == "summary" else "surprise"


def parse_summary(output: object, *, max_section_chars: int | None = None) -> ParsedSummary:
    """Split a model reply into summary and surprise; never raises on a string.

    Labels may be bracketed or not, in any case, decorated with Markdown, in either order, with or without the
    colon when bracketed or alone on their line, and on one line (``(Summary): ... (Surprise): ...``, or
    ``Surprise:`` right after a sentence); when a label repeats (small models loop) the first section of each
    kind wins. A surprise of "None" / "N/A" means no surprise.
    With ``max_section_chars`` each section (and the unlabelled fallback) is cut to that many characters before
    it is cleaned, so a huge reply costs one linear scan for the labels.

    >>> parse_summary("**Summary:** A dog barks. Surprise: None")
    ParsedSummary(summary='A dog barks.', surprise='', ok=True)
    >>> parse_summary("(Summary) Tom sails. (Surprise) The boat is glass.")
    ParsedSummary(summary='Tom sails.', surprise='The boat is glass.', ok=True)
    >>> parse_summary("**Summary:** A dog barks.\\nSurprise: None")
    ParsedSummary(summary='A dog barks.', surprise='', ok=True)
    >>> parse_summary("Just some text.")
    ParsedSummary(summary='Just some text.', surprise='', ok=False)
    """
    check_type(output, str, "a model reply must be str")
    cap = len(output)
    if max_section_chars is not None:
        cap = check_positive_int(max_section_chars, "max_section_chars", hint=" or None")
    sections: dict[str, str] = {}
    open_kind: str | None = None  # the section whose end is the next label
    open_start = 0
    for m in _LABEL.finditer(output):  # only the first label of each kind and the label after it matter
        if open_kind is not None:
            sections[open_kind] = output[open_start : min(m.start(), open_start + cap)]
            open_kind = None
        kind = _kind(m)
        if kind not in sections:
            sections[kind] = ""
            open_kind, open_start = kind, m.end()
        elif len(sections) == 2:
            break
    if open_kind is not None:
        sections[open_kind] = output[open_start : open_start + cap]
    summary = _clean(sections.get("summary", ""))
    surprise = _clean(sections.get("surprise", "")) if "surprise" in sections else None
    if summary and surprise is not None:
        return ParsedSummary(summary, "" if _says_none(surprise) else surprise, True)
    whole = _clean(_LABEL.sub(" ", output[: cap + 200]))  # + room for the labels removed
    return ParsedSummary(whole[:cap], "", False)
