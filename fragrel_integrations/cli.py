"""``fragrel`` command line: the main job on embedded defaults.

    fragrel retrieve BOOK.txt "Who was shipwrecked?" --budget-words 2000
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from .core import CompositeRelation, ContextRelation, FragRelIndex, ScoredFragment, SemanticRelation
from .core.relations import Relation

__all__ = ["build_parser", "main"]


def _relation(name: str, w_rel: float) -> Relation:
    if name == "context":
        return ContextRelation(w_rel)
    if name == "semantic":
        return SemanticRelation()
    return CompositeRelation([(ContextRelation(w_rel), 1.0), (SemanticRelation(), 1.0)])


def _read(path: str) -> str:
    p = Path(path)
    if not p.is_file():
        raise SystemExit(f"fragrel: {path}: no such file")
    return p.read_text(encoding="utf-8", errors="replace")


def add_index_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared by every command that builds a FragRelIndex over a text file."""
    parser.add_argument("file", help="a UTF-8 text file (a book, a transcript)")
    parser.add_argument("question", help="the query")
    parser.add_argument("--alpha", type=float, default=0.5, help="environment weight (default 0.5)")
    parser.add_argument("--w-rel", type=float, default=0.3, help="context decay per position (default 0.3)")
    parser.add_argument(
        "--relation", choices=("context", "semantic", "both"), default="context", help="fragment relation"
    )
    parser.add_argument("--scorer", choices=("dense", "bm25", "hybrid"), default="dense", help="independent score")
    parser.add_argument("--fragment-words", type=int, default=500, help="words per fragment (default 500)")
    parser.add_argument("-k", type=int, default=None, help="number of fragments (default 5 without a budget)")
    parser.add_argument("--budget-words", type=int, default=None, help="fill this many words of context")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def build_index(args: argparse.Namespace) -> FragRelIndex:
    return FragRelIndex.from_texts(
        [_read(args.file)],
        doc_ids=[Path(args.file).name],
        fragment_words=args.fragment_words,
        relation=_relation(args.relation, args.w_rel),
        alpha=args.alpha,
        scorer=args.scorer,
        show_progress=not args.quiet,
    )


def hit_dict(hit: ScoredFragment) -> dict:
    f = hit.fragment
    return {
        "doc_id": f.doc_id,
        "position": f.position,
        "score": hit.score,
        "independent_score": hit.independent_score,
        "environment_score": hit.environment_score,
        "text": f.text,
    }


def format_hits(hits: Sequence[ScoredFragment], width: int = 240) -> str:
    lines = []
    for rank, h in enumerate(hits, 1):
        text = " ".join(h.fragment.text.split())
        text = text if len(text) <= width else text[: width - 3] + "..."
        lines.append(
            f"#{rank} {h.fragment.doc_id}[{h.fragment.position}]  score={h.score:.4f}  "
            f"independent={h.independent_score:.4f}  environment={h.environment_score:.4f}\n    {text}"
        )
    return "\n".join(lines)


def _cmd_retrieve(args: argparse.Namespace) -> int:
    index = build_index(args)
    hits = index.retrieve(args.question, k=args.k, budget_words=args.budget_words)
    if args.json:
        print(json.dumps([hit_dict(h) for h in hits], indent=2))
    else:
        print(format_hits(hits))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fragrel", description="Relation-aware fragment retrieval (FragRel).")
    sub = parser.add_subparsers(dest="command", required=True)
    retrieve = sub.add_parser("retrieve", help="print the fragments FragRel selects for a question")
    add_index_arguments(retrieve)
    retrieve.add_argument("--json", action="store_true", help="print JSON")
    retrieve.set_defaults(func=_cmd_retrieve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (ValueError, TypeError, ImportError) as exc:
        print(f"fragrel: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
