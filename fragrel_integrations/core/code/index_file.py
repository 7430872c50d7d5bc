"""The code index's SQLite file format: what a CodeRelation holds, in one file.

A :class:`~fragrel_integrations._sqlite.SavedFormat` (its header, atomic replace and damage rule). The header
holds the settings, the root and the tree-sitter and grammar versions (what built it); tables: ``files``
(per-file parse results: JSON records plus an ``.npz`` blob of the node arrays), ``skipped`` (what the loader
left out), ``fragments`` (the windows, with text and span) and ``relation`` (the sparse matrix as an ``.npz``
blob). Arrays are read with ``allow_pickle=False``; nothing is pickled.
"""

from __future__ import annotations

import io
import json
import logging
import os
import sqlite3
import stat
import zipfile
from collections.abc import Callable
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import scipy.sparse as sp

from ..._sqlite import SavedFormat
from ..fragments import Fragment
from .graph import CodeGraph, EdgeWeights, FileSyntax
from .loader import SkippedFile

if TYPE_CHECKING:
    from .code_relation import CodeRelation

__all__ = ["FORMAT", "grammar_versions", "is_code_index", "read_index", "write_index"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: The header's ``format`` value of a code index file.
FORMAT = "fragrel-code-index"
_PACKAGES = ("tree-sitter", *(f"tree-sitter-{lang}" for lang in ("python", "javascript", "typescript", "java", "go")))
_FORMAT = SavedFormat(
    FORMAT,
    1,
    "FragRel code index",
    (
        "CREATE TABLE files (path TEXT PRIMARY KEY, records TEXT NOT NULL, arrays BLOB NOT NULL)",
        "CREATE TABLE skipped (path TEXT NOT NULL, reason TEXT NOT NULL)",
        "CREATE TABLE fragments (idx INTEGER PRIMARY KEY, doc_id TEXT NOT NULL, position INTEGER NOT NULL, "
        "text TEXT NOT NULL, metadata TEXT NOT NULL)",
        "CREATE TABLE relation (name TEXT PRIMARY KEY, value BLOB NOT NULL)",
    ),
    earlier=(("meta", "fragrel-code-index/1"),),
)


def grammar_versions() -> dict[str, str | None]:
    """Installed versions of tree-sitter and the grammar wheels (a stored index records them)."""
    out: dict[str, str | None] = {}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def is_code_index(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a FragRel code index (sound or damaged); False when it does not exist or is empty
    (a new cache). Raises ValueError for anything else (a folder, a FIFO, a user's file, another SQLite
    database, a truncated index whose header cannot be read): such a file is never overwritten or deleted.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise ValueError(f"{str(path)!r} cannot be read ({exc.strerror or exc}): give another cache path") from exc
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{str(path)!r} is not a regular file: give a file path for the index, e.g. index.sqlite")
    if st.st_size == 0 or _FORMAT.owns(path):
        return st.st_size > 0
    raise ValueError(
        f"{str(path)!r} exists and is not a FragRel code index: refusing to overwrite it; "
        "give another cache path (e.g. repo.fragrel.sqlite), or delete the file if it is a broken index"
    )


def _npz(**arrays: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _unnpz(blob: bytes) -> dict[str, np.ndarray]:
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (OSError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"a stored array cannot be read ({type(exc).__name__}: {exc})") from exc


def write_index(index: CodeRelation, path: str | os.PathLike[str]) -> None:
    """Write ``index`` to the SQLite file ``path`` (replaced atomically)."""
    is_code_index(path)  # raises rather than replace a file that is not an index
    g = index.graph
    w = sp.csr_array(index.weights)
    header = {
        "threshold": index.threshold,
        "fragment_lines": index.fragment_lines,
        "stride": index.stride,
        "edge_weights": asdict(g.weights),
        "root": str(index.root) if index.root is not None else None,
        "root_name": g.root_name,
        "content_hash": g.content_hash(),
    }
    try:
        fragments = [
            (i, f.doc_id, f.position, f.text, json.dumps(dict(f.metadata))) for i, f in enumerate(index.fragments)
        ]
    except TypeError as exc:
        raise TypeError(f"fragment metadata must be JSON-serialisable to be stored: {exc}") from exc

    def fill(conn: sqlite3.Connection) -> None:
        conn.executemany(
            "INSERT INTO files VALUES (?, ?, ?)",
            [(f.path, json.dumps(f.records()), _npz(**f.arrays())) for f in g.files],
        )
        conn.executemany("INSERT INTO skipped VALUES (?, ?)", [(s.path, s.reason) for s in index.skipped])
        conn.executemany("INSERT INTO fragments VALUES (?, ?, ?, ?, ?)", fragments)
        conn.execute(
            "INSERT INTO relation VALUES (?, ?)",
            ("weights", _npz(data=w.data, indices=w.indices, indptr=w.indptr, shape=np.array(w.shape))),
        )

    _FORMAT.write(path, header, built_by={"grammars": grammar_versions()}, fill=fill)


def read_index(path: str | os.PathLike[str], build: Callable[..., T]) -> T:
    """Read an index written by :func:`write_index` and return ``build(versions, **stored)``: the grammar
    versions it was built with, and the CodeRelation arguments (``graph``, ``fragments``, ``weights``,
    ``threshold``, ``fragment_lines``, ``stride``, ``root``, ``skipped``).

    The stored relation matrix is used as is (no graph search). ``build`` runs inside the damage rule, so a
    stored value it rejects reads as a damaged index. Raises ValueError for a file that is not such an index.
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{str(path)!r} is not a file: build the index first (CodeRelation.from_repository)")
    if not is_code_index(p):
        raise ValueError(f"{str(path)!r} is empty: build the index first (CodeRelation.from_repository)")
    built, versions = _FORMAT.read(p, lambda conn, meta: _read(conn, meta, build))
    if versions != (installed := grammar_versions()):
        logger.warning(
            "%s was built with %s; installed: %s (rebuild for exact parse results)", path, versions, installed
        )
    return built


def _read(conn: sqlite3.Connection, meta: dict[str, Any], build: Callable[..., T]) -> tuple[T, object]:
    rows = conn.execute("SELECT records, arrays FROM files ORDER BY path")
    files = [FileSyntax.from_records(json.loads(rec), _unnpz(blob)) for rec, blob in rows]
    skipped = [SkippedFile(a, b) for a, b in conn.execute("SELECT path, reason FROM skipped")]
    rows = conn.execute("SELECT doc_id, position, text, metadata FROM fragments ORDER BY idx")
    fragments = [Fragment(text, doc_id, position, json.loads(m)) for doc_id, position, text, m in rows]
    (blob,) = conn.execute("SELECT value FROM relation WHERE name = 'weights'").fetchone()
    w = _unnpz(blob)
    weights = sp.csr_array((w["data"], w["indices"], w["indptr"]), shape=tuple(int(x) for x in w["shape"]))
    graph = CodeGraph(files, weights=EdgeWeights(**meta["edge_weights"]), root_name=meta.get("root_name"))
    if graph.content_hash() != meta.get("content_hash"):
        raise ValueError("its content hash differs from its files")
    versions = meta["built_by"].get("grammars")
    settings = {k: meta[k] for k in ("threshold", "fragment_lines", "stride")}
    built = build(
        versions, graph=graph, fragments=fragments, weights=weights, root=meta.get("root"), skipped=skipped, **settings
    )
    return built, versions
