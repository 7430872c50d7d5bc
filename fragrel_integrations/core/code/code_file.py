"""Store a :class:`~.code_relation.CodeRelation` in one SQLite file: index once, query many, update file by file.

The file format lives in :mod:`.index_file`; this module keeps the public entry points.
"""

from __future__ import annotations

import os

from .code_relation import CodeRelation
from .index_file import FORMAT, grammar_versions, is_code_index

__all__ = ["FORMAT", "grammar_versions", "is_code_index", "load_relation", "save_relation"]


def save_relation(relation: CodeRelation, path: str | os.PathLike[str]) -> None:
    """Write ``relation`` to the SQLite file ``path`` (replaced atomically)."""
    relation.save(path)


def load_relation(path: str | os.PathLike[str], *, root: str | os.PathLike[str] | None = None) -> CodeRelation:
    """Read a relation written by :func:`save_relation`. ``root`` overrides the stored repository folder.

    The stored relation matrix is used as is (no graph search). Raises ValueError for a file that is not such
    an index.
    """
    return CodeRelation.load(path, root=root)
