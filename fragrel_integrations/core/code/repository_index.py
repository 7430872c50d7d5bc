"""``from_repository``: a FragRelIndex over a code repository (RepoCoder windows + the code-structure relation).

The one entry point that builds a code index is ``FragRelIndex.from_repository``; :func:`from_repository` is
its function form. (:meth:`.CodeRelation.from_repository` builds only the relation, and
:meth:`.CodeGraph.from_repository` only the graph.)
"""

from __future__ import annotations

import os
from typing import Any

from ..index import FragRelIndex

__all__ = ["from_repository"]


def from_repository(path: str | os.PathLike[str] | None = None, **options: Any) -> FragRelIndex:
    """A :class:`FragRelIndex` over the code of ``path``: ``FragRelIndex.from_repository(path, **options)``.

    ``options``: ``relation``, ``scorer`` (``"jaccard"``, ``"bm25"``, ``"dense"``, ``"hybrid"`` or a callable),
    ``embedder``, ``alpha``, ``threshold``, ``fragment_lines``, ``stride``, ``cache``, ``show_progress``,
    ``batch_size`` and the loader's options.

    >>> index = from_repository("path/to/repo", cache="repo.fragrel.sqlite")  # doctest: +SKIP
    >>> hits = index.retrieve(code_before_the_cursor, k=10)                   # doctest: +SKIP
    """
    return FragRelIndex.from_repository(path, **options)
