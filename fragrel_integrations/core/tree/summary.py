"""The summary-and-surprise prompt (one LLM call per chunk and per cluster) and its tolerant parser.

The model is asked for two labelled sections, ``(Summary): ...`` and ``(Surprise): ...``. :func:`parse_summary`
never raises on model output: when a section is missing or empty, the whole reply (labels removed) becomes the
summary, there is no surprise, and ``ok`` is False so the builder can count it.

>>> parse_summary("(Summary): Tom buys a boat.\\n(Surprise): The boat is made of glass.")
ParsedSummary(summary='Tom buys a boat.', surprise='The boat is made of glass.', ok=True)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "PROMPT_VERSION",
    "SUMMARY_SYSTEM_PROMPT",
    "ParsedSummary",
    "parse_summary",
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

_LABEL = re.compile(
    r"^[ \t>*#_\-]*(?:\(\s*)?(?P<name>summary|surprises?|surprising facts?)(?:\s*\))?[ \t*_]*:[ \t*_]*",
    re.IGNORECASE | re.MULTILINE,
)
_NONE = re.compile(r"^\W*(?:none|n/?a|nothing|no surprises?(?: found)?|-+)\W*$", re.IGNORECASE)


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
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    if isinstance(summary_tokens, bool) or not isinstance(summary_tokens, int) or summary_tokens < 1:
        raise ValueError(f"summary_tokens must be a positive int, got {summary_tokens!r}")
    words = max(5, summary_tokens * 3 // 4)
    return [
        {"role": "system", "content": SUMMARY_SYSTEM_PROMPT},
        {"role": "user", "content": _USER_TEMPLATE.format(text=text, summary_words=words)},
    ]


def _clean(text: str) -> str:
    return " ".join(text.split()).strip(" *_")


def parse_summary(output: object) -> ParsedSummary:
    """Split a model reply into summary and surprise; never raises on a string.

    Labels may be bracketed or not, in any case, decorated with Markdown, in either order; when a label repeats
    (small models loop) the first section of each kind wins. A surprise of "None" / "N/A" means no surprise.

    >>> parse_summary("**Summary:** A dog barks. Surprise: None")
    ParsedSummary(summary='A dog barks. Surprise: None', surprise='', ok=False)
    >>> parse_summary("**Summary:** A dog barks.\\nSurprise: None")
    ParsedSummary(summary='A dog barks.', surprise='', ok=True)
    >>> parse_summary("Just some text.")
    ParsedSummary(summary='Just some text.', surprise='', ok=False)
    """
    if not isinstance(output, str):
        raise TypeError(f"a model reply must be str, got {type(output).__name__}")
    labels = list(_LABEL.finditer(output))
    sections: dict[str, str] = {}
    for i, m in enumerate(labels):
        kind = "summary" if m.group("name").lower() == "summary" else "surprise"
        end = labels[i + 1].start() if i + 1 < len(labels) else len(output)
        sections.setdefault(kind, output[m.end() : end])
    summary = _clean(sections.get("summary", ""))
    surprise = _clean(sections.get("surprise", "")) if "surprise" in sections else None
    if summary and surprise is not None:
        return ParsedSummary(summary, "" if _NONE.match(surprise) else surprise, True)
    whole = _clean(_LABEL.sub(" ", output))
    return ParsedSummary(whole, "", False)
