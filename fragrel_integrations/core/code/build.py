"""The body of the one entry point that builds a code index, ``FragRelIndex.from_repository`` (also reachable as
:func:`fragrel_integrations.core.code.from_repository`): RepoCoder windows + the code-structure relation.

:func:`build_code_index` takes the index class to build, so that this module need not import :mod:`..index`
(no import cycle); call ``FragRelIndex.from_repository`` rather than this function.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

from ..._validation import check_type
from ...models.embedder import Embedder, embed_documents
from .. import scorers
from .code_relation import CodeRelation

__all__ = ["build_code_index"]

IndexT = TypeVar("IndexT")  # FragRelIndex or a subclass (not imported here: no import cycle)


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
    scorer: scorers.CodeScorerName | scorers.Scorer = "jaccard",
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
    (see :func:`~fragrel_integrations.core.scorers.code_scorer`).

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
    else:
        check_type(relation, CodeRelation, "relation must be a CodeRelation")
    fragments = relation.fragments
    if not fragments:
        raise ValueError(_nothing_to_index(relation))
    texts = [f.text for f in fragments]
    embeddings = None
    if scorer in ("dense", "hybrid"):
        if embedder is None:
            raise ValueError(f"scorer={scorer!r} needs an embedder (e.g. models.local.default_embedder())")
        embeddings = embed_documents(embedder, texts, batch_size=batch_size, show_progress=show_progress)
    built = scorers.code_scorer(scorer, texts, embeddings=embeddings, embedder=embedder)
    return index_type(
        fragments,
        relation=relation,
        alpha=alpha,
        scorer=built,
        embedder=embedder,
        embeddings=embeddings,
        show_progress=show_progress,
    )
