"""FragRel for code repositories: a tree-sitter code graph, the code-structure relation (eq. 8) and retrieval.

Parsing needs the ``[code]`` extra (tree-sitter and the per-language grammar wheels); importing this package
does not import tree-sitter. Modules: :mod:`.loader` (files), :mod:`.syntax` (per-file syntax records),
:mod:`.parse` (tree-sitter), :mod:`.resolve` (cross-language call resolution), :mod:`.graph` (the code graph),
:mod:`.code_relation` (eq. 8), :mod:`.index_file` (the SQLite file), :mod:`.index_cache` (reusing it),
:mod:`.code_file` (save / load), :mod:`.repository_index` (:func:`from_repository`: ``FragRelIndex.from_repository``,
the one entry point that builds a code index, whose body is :mod:`.build`) and :mod:`.prompt` (RepoCoder).
The code scorers (Jaccard, ``code_scorer``) are the core's :mod:`fragrel_integrations.core.scorers`.

>>> from fragrel_integrations.core.code import from_repository            # doctest: +SKIP
>>> index = from_repository("path/to/repo", cache="repo.fragrel.sqlite")  # doctest: +SKIP
>>> hits = index.retrieve(code_before_the_cursor, k=10)                   # doctest: +SKIP
"""

from ..scorers import JaccardScorer, code_scorer, code_tokens
from .code_file import load_relation, save_relation
from .code_relation import CodeRelation, UpdateReport, code_lines, fragment_relation, split_code
from .graph import CallSite, CodeGraph, Definition, EdgeWeights, FileSyntax, parse_source
from .loader import (
    DEFAULT_EXCLUDE_DIRS,
    LANGUAGES,
    Repository,
    SkippedFile,
    SourceFile,
    language_for_path,
    load_repository,
)
from .prompt import build_prompt
from .repository_index import from_repository

__all__ = [
    "DEFAULT_EXCLUDE_DIRS", "LANGUAGES", "CallSite", "CodeGraph", "CodeRelation", "Definition", "EdgeWeights",
    "FileSyntax", "JaccardScorer", "Repository", "SkippedFile", "SourceFile", "UpdateReport", "build_prompt",
    "code_lines", "code_scorer", "code_tokens", "fragment_relation", "from_repository", "language_for_path",
    "load_relation", "load_repository", "parse_source", "save_relation", "split_code"
]  # fmt: skip
