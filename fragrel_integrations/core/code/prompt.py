"""Completion prompts in RepoCoder's format (FragRel paper, Prompt 2).

Retrieved fragments come first, each as a commented block that names the file it was found in, then the
unfinished code::

    # Here are some relevant code fragments from other files of the repo:
    # --------------------------------------------------
    # the below code fragment can be found in:
    # pkg/util.py
    # --------------------------------------------------
    # def helper(x):
    #     return x + 1
    # --------------------------------------------------
    <the code to complete>

Blocks are ordered so that the best-scored fragment sits last, nearest the code to complete. Blocks are taken
best first while they fit in ``max_context_tokens``; one that does not fit is skipped.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from ..._validation import check_min_int, check_type
from ..fragments import Fragment, ScoredFragment
from .languages import SPECS

__all__ = ["build_prompt", "count_code_tokens"]

_SEPARATOR_DASHES = 50
_TOKEN = re.compile(r"\w+|([^\w\s])\1*")


def count_code_tokens(text: str) -> int:
    """A rough token count (words, and runs of one punctuation mark); pass a model tokenizer for exact budgets.

    >>> count_code_tokens("return a + b  # ------")
    6
    """
    return sum(1 for _ in _TOKEN.finditer(text))


def _comment(language: str | None, comment: str | None) -> str:
    if comment is not None:
        if not isinstance(comment, str) or not comment.strip():
            raise ValueError(f"comment must be a non-empty comment marker such as '#' or '//', got {comment!r}")
        return comment
    return SPECS[language].comment_prefix if language in SPECS else "#"  # Python's by default


def _block(fragment: Fragment, mark: str, separator: str) -> str:
    path = fragment.metadata.get("path", fragment.doc_id)
    lines = [f"{mark} the below code fragment can be found in:", f"{mark} {path}", separator]
    lines += [f"{mark} {line}" if line else mark for line in fragment.text.split("\n")]
    return "\n".join([*lines, separator, ""])


def build_prompt(
    code: str,
    fragments: Sequence[ScoredFragment | Fragment],
    *,
    language: str | None = None,
    comment: str | None = None,
    max_context_tokens: int | None = 2000,
    max_fragments: int | None = None,
    count_tokens: Callable[[str], int] = count_code_tokens,
) -> str:
    """The completion prompt: retrieved ``fragments`` (best first, as retrieval returns them) as commented
    blocks, then ``code``.

    ``language`` picks the comment marker (``#`` for Python, ``//`` for JavaScript, TypeScript, Java and Go;
    default: the first fragment's ``language`` metadata, else ``#``); ``comment`` sets it directly.

    >>> print(build_prompt("x = helper(", [Fragment("def helper(x):", metadata={"path": "u.py"})]))
    # Here are some relevant code fragments from other files of the repo:
    # --------------------------------------------------
    # the below code fragment can be found in:
    # u.py
    # --------------------------------------------------
    # def helper(x):
    # --------------------------------------------------
    x = helper(
    """
    check_type(code, str, "code must be str")
    if max_context_tokens is not None:
        check_min_int(max_context_tokens, "max_context_tokens", 0, hint=" or None")
    plain = []
    for i, item in enumerate(fragments):
        f = item.fragment if isinstance(item, ScoredFragment) else item
        if not isinstance(f, Fragment):
            raise TypeError(f"fragments[{i}] must be a Fragment or ScoredFragment, got {type(item).__name__}")
        plain.append(f)
    if language is None and plain:
        language = plain[0].metadata.get("language")
    mark = _comment(language, comment)
    separator = f"{mark} " + "-" * _SEPARATOR_DASHES
    chosen: list[str] = []
    used = 0
    for f in plain:
        if max_fragments is not None and len(chosen) >= max_fragments:
            break
        block = _block(f, mark, separator)
        cost = count_tokens(block)
        if max_context_tokens is not None and used + cost > max_context_tokens:
            continue
        chosen.append(block)
        used += cost
    if not chosen:
        return code
    header = f"{mark} Here are some relevant code fragments from other files of the repo:\n{separator}\n"
    return header + "".join(reversed(chosen)) + code
