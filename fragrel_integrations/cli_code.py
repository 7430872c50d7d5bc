"""``fragrel retrieve-code``: its options and what it does, without printing (:mod:`.cli` prints the text)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from .core.code.loader import DEFAULT_MAX_FILE_BYTES, DEFAULT_MAX_FILE_LINES
from .core.fragments import ScoredFragment
from .core.scorers import CODE_SCORER_NAMES

__all__ = [
    "INDEX_OPTIONS",
    "add_retrieve_code_arguments",
    "code_hit_dict",
    "format_code_hits",
    "read_context",
    "retrieve_code",
    "score_dict",
    "terminal_safe",
]

#: The ``retrieve-code`` options passed to :func:`~.core.code.index.from_repository` as they are (each
#: option's ``dest`` is the parameter's name).
INDEX_OPTIONS = (
    "scorer", "alpha", "threshold", "fragment_lines", "stride", "cache", "languages", "max_file_bytes", "max_file_lines"
)  # fmt: skip
#: Control characters (C0, DEL, C1) other than newline and tab: ESC, BEL, CR, CSI ... drive or overwrite a terminal.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_safe(text: str) -> str:
    """``text`` with every control character but newline and tab replaced by U+FFFD, for printing: an ESC or BEL
    sequence in a book, a repository or a model's reply cannot move the cursor, recolour or retitle the terminal.

    >>> terminal_safe("ok\\x1b[2Jgone\\x07\\tkept\\n") == "ok\\ufffd[2Jgone\\ufffd\\tkept\\n"
    True
    """
    return _CONTROL.sub("\ufffd", text)


def add_retrieve_code_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``fragrel retrieve-code``."""
    parser.add_argument("repo", help="root folder of the repository")
    parser.add_argument("context", help="the code before the cursor; '-' reads it from stdin, '@FILE' from a file")
    parser.add_argument("-k", type=int, default=10, help="number of fragments (default 10)")
    parser.add_argument("--alpha", type=float, default=0.5, help="environment weight (default 0.5)")
    parser.add_argument(
        "--threshold", type=float, default=0.01, help="node relations below this count as 0 (default 0.01)"
    )
    parser.add_argument(
        "--scorer",
        choices=CODE_SCORER_NAMES,
        default="jaccard",
        help="independent score (default jaccard, RepoCoder's; dense/hybrid use the embedded MiniLM)",
    )
    parser.add_argument("--fragment-lines", type=int, default=20, help="lines per window (default 20)")
    parser.add_argument("--stride", type=int, default=10, help="lines between window starts (default 10)")
    parser.add_argument(
        "--language", action="append", dest="languages", help="index only this language (repeatable; default all)"
    )
    parser.add_argument(
        "--cache",
        help="SQLite file to store the index in and reuse (an existing file that is not such an index is refused)",
    )
    parser.add_argument(
        "--max-file-lines",
        type=int,
        default=DEFAULT_MAX_FILE_LINES,
        help=f"skip (and report) source files with more lines (default {DEFAULT_MAX_FILE_LINES})",
    )
    parser.add_argument(
        "--max-file-bytes",
        type=int,
        default=DEFAULT_MAX_FILE_BYTES,
        help=f"skip (and report) larger source files (default {DEFAULT_MAX_FILE_BYTES})",
    )
    parser.add_argument("--prompt", action="store_true", help="print a RepoCoder-format completion prompt")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def read_context(value: str) -> str:
    """The code context argument: literal text, ``-`` for stdin, ``@FILE`` for a file."""
    if value == "-":
        return sys.stdin.read()
    if value.startswith("@"):
        p = Path(value[1:])
        if not p.is_file():
            raise ValueError(f"{value[1:]!r} is not a regular file (a context starting with '@' names a file)")
        try:
            return p.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise ValueError(f"cannot read the context file {value[1:]!r}: {exc.strerror or exc}") from exc
    return value


def score_dict(hit: ScoredFragment) -> dict[str, float]:
    """The three scores of ``hit``, as ``--json`` prints them."""
    return {name: getattr(hit, name) for name in ("score", "independent_score", "environment_score")}


def code_hit_dict(hit: ScoredFragment) -> dict:
    m = hit.fragment.metadata
    return {
        "path": m.get("path", hit.fragment.doc_id),
        "start_line": m.get("start_line"),
        "end_line": m.get("end_line"),
        **score_dict(hit),
        "text": hit.fragment.text,
    }


def format_ranked(
    hits: Sequence[ScoredFragment], label: Callable[[ScoredFragment], str], preview: str, width: int
) -> str:
    """One entry per hit: rank, ``label(hit)``, the three scores, then the ``preview`` text cut to ``width``:
    ``"text"`` (the whole text on one line) or ``"first_line"`` (the first non-blank line)."""
    lines = []
    for rank, h in enumerate(hits, 1):
        if preview == "first_line":
            text = next((ln.strip() for ln in h.fragment.text.split("\n") if ln.strip()), "")
        else:
            text = " ".join(h.fragment.text.split())
        text = text if len(text) <= width else text[: width - 3] + "..."
        lines.append(
            f"#{rank} {label(h)}  score={h.score:.4f}  "
            f"independent={h.independent_score:.4f}  environment={h.environment_score:.4f}\n    {text}"
        )
    return "\n".join(lines)


def format_code_hits(hits: Sequence[ScoredFragment], width: int = 160) -> str:
    """One entry per hit: rank, ``path:start-end``, the three scores, the first line of code."""
    label = "{path}:{start_line}-{end_line}".format_map
    return format_ranked(hits, lambda h: label(code_hit_dict(h)), "first_line", width)


def retrieve_code(args: argparse.Namespace) -> str:
    """Index ``args.repo`` (or reuse ``args.cache``), retrieve for the context, return the text to print."""
    from .core.code.prompt import build_prompt
    from .core.code.repository_index import from_repository

    if args.k < 1:
        raise ValueError(f"-k must be >= 1, got {args.k}")
    context = read_context(args.context)
    if not context.strip():
        raise ValueError(
            f"the code context is {'empty' if not context else 'blank'}: give the code before the cursor (the text, "
            "'-' to read it from stdin or '@FILE' to read it from a file)"
        )
    embedder = None
    if args.scorer in ("dense", "hybrid"):
        from .models.local import default_embedder

        embedder = default_embedder()
    options = {name: getattr(args, name) for name in INDEX_OPTIONS}
    index = from_repository(args.repo, embedder=embedder, show_progress=not args.quiet, **options)
    hits = index.retrieve(context, k=args.k)
    if args.prompt:
        return build_prompt(context, hits)
    if args.json:
        return json.dumps([code_hit_dict(h) for h in hits], indent=2)
    return format_code_hits(hits)
