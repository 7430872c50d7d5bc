"""Building a FragRel index over a code repository (RepoCoder windows + the code-structure relation).

:func:`build_code_index` takes the index class to build, so that ``FragRelIndex.from_repository`` can call it
without this module importing :mod:`..index` (no import cycle); :func:`.index.from_repository` is the
function form.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from ...models.base import Embedder
from ..scorers import DenseScorer, Scorer, check_scorer, make_scorer, tokenize
from .relation import CodeRelation
from .scorers import JaccardScorer

__all__ = ["CODE_SCORER_NAMES", "CodeScorerName", "build_code_index", "code_scorer"]

IndexT = TypeVar("IndexT")  # FragRelIndex or a subclass (not imported here: no import cycle)

CodeScorerName = Literal["jaccard", "bm25", "dense", "hybrid"]

logger = logging.getLogger(__name__)


#: The code index's scorers by name (:func:`code_scorer`).
CODE_SCORER_NAMES = ("jaccard", "bm25", "dense", "hybrid")


def code_scorer(
    name: CodeScorerName | Scorer,
    texts: list[str],
    *,
    embeddings: Any = None,
    embedder: Embedder | None = None,
) -> Scorer:
    """The independent scorer for code fragments.

    ``"jaccard"`` (RepoCoder's sparse retriever), ``"bm25"`` (bm25s over ``\\w+`` tokens, no stopword list: in
    code, ``if``/``for``/``in`` are keywords), ``"dense"`` (cosine of ``embeddings``, needs ``embedder``),
    ``"hybrid"`` (0.5 min-max Jaccard + 0.5 min-max dense), or a callable ``query -> scores``.
    """
    if callable(name):
        return name
    check_scorer(name, CODE_SCORER_NAMES)
    if name == "jaccard":
        return JaccardScorer(texts)
    if name == "bm25" and not any(tokenize(t) for t in texts):
        logger.warning("no fragment holds a word token: every BM25 score is 0")
    if name in ("dense", "hybrid") and (embedder is None or embeddings is None):
        raise ValueError(f"scorer={name!r} needs an embedder (and the fragment embeddings)")
    return make_scorer(
        name,
        texts,
        dense=lambda: DenseScorer(embeddings, embedder),
        lexical=lambda: JaccardScorer(texts),
        stopwords=(),
    )


def _nothing_to_index(relation: CodeRelation) -> str:
    """Why a repository gave no fragment, naming what was left out (the fix depends on it)."""
    if not relation.skipped:
        return (
            "the repository has no source code to index: give the root folder of a repository holding "
            "Python, JavaScript, TypeScript, Java or Go files"
        )
    counts = Counter(s.reason.split(":")[0].split("=")[0].strip() for s in relation.skipped)
    shown = ", ".join(f"{s.path} ({s.reason})" for s in relation.skipped[:5])
    more = f" and {len(relation.skipped) - 5} more" if len(relation.skipped) > 5 else ""
    reasons = "; ".join(f"{n} {r}" for r, n in counts.most_common())
    return (
        f"the repository has no source code to index; left out ({reasons}): {shown}{more}; "
        "fix those files, or raise max_file_bytes / max_file_lines when the files are too large"
    )


def build_code_index(
    index_type: Callable[..., IndexT],
    path: str | os.PathLike[str] | None = None,
    *,
    relation: CodeRelation | None = None,
    scorer: CodeScorerName | Scorer = "jaccard",
    embedder: Embedder | None = None,
    alpha: float = 0.5,
    threshold: float = 0.01,
    fragment_lines: int = 20,
    stride: int = 10,
    cache: str | os.PathLike[str] | None = None,
    show_progress: bool = True,
    batch_size: int = 64,
    **load_kwargs: Any,
) -> IndexT:
    """An ``index_type`` (:class:`~..index.FragRelIndex`) over the code of ``path``: fragments are RepoCoder
    sliding windows (``fragment_lines`` lines every ``stride``; ``fragment.metadata`` holds ``path``,
    ``start_line``, ``end_line``, ``language``), related by :class:`CodeRelation` (eq. 8), scored by ``scorer``
    (see :func:`code_scorer`).

    ``cache`` stores the index in a SQLite file and later brings it up to date file by file; ``relation``
    reuses an already built :class:`CodeRelation` (then ``path`` and the index settings are not needed).
    To add the context relation, build the index yourself:
    ``FragRelIndex(rel.fragments, relation=CompositeRelation([(rel, 1.0), (ContextRelation(0.3), 1.0)]), ...)``.

    Needs the ``[code]`` extra. ``scorer="dense"``/``"hybrid"`` need an ``embedder``.
    """
    if relation is None:
        if path is None:
            raise ValueError("give the repository path (or an already built relation=CodeRelation)")
        relation = CodeRelation.from_repository(
            path,
            threshold=threshold,
            fragment_lines=fragment_lines,
            stride=stride,
            cache=cache,
            show_progress=show_progress,
            **load_kwargs,
        )
    elif not isinstance(relation, CodeRelation):
        raise TypeError(f"relation must be a CodeRelation, got {type(relation).__name__}")
    fragments = relation.fragments
    if not fragments:
        raise ValueError(_nothing_to_index(relation))
    texts = [f.text for f in fragments]
    embeddings = None
    if scorer in ("dense", "hybrid"):
        if embedder is None:
            raise ValueError(f"scorer={scorer!r} needs an embedder (e.g. models.local.default_embedder())")
        from ...models.base import embed_documents

        embeddings = embed_documents(embedder, texts, batch_size=batch_size, show_progress=show_progress)
    built = code_scorer(scorer, texts, embeddings=embeddings, embedder=embedder)
    return index_type(
        fragments,
        relation=relation,
        alpha=alpha,
        scorer=built,
        embedder=embedder,
        embeddings=embeddings,
        show_progress=show_progress,
    )
