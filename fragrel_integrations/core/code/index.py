"""``from_repository``: a FragRelIndex over a code repository (RepoCoder windows + the code-structure relation)."""

from __future__ import annotations

import os
from typing import Any

from ..index import FragRelIndex
from .build import CodeScorerName, build_code_index, code_scorer

__all__ = ["CodeScorerName", "code_scorer", "from_repository"]


def from_repository(path: str | os.PathLike[str] | None = None, **options: Any) -> FragRelIndex:
    """A :class:`FragRelIndex` over the code of ``path``; the same as ``FragRelIndex.from_repository(path, ...)``.

    ``options`` are those of :func:`~.build.build_code_index`: ``relation``, ``scorer`` (``"jaccard"``,
    ``"bm25"``, ``"dense"``, ``"hybrid"`` or a callable), ``embedder``, ``alpha``, ``threshold``,
    ``fragment_lines``, ``stride``, ``cache``, ``show_progress``, ``batch_size`` and the loader's options.
    """
    return build_code_index(FragRelIndex, path, **options)
