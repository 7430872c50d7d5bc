"""The code index's SQLite file format: a :class:`StoredIndex` (what a CodeRelation holds) in one file.

Tables: ``meta`` (format, settings, tree-sitter and grammar versions, root), ``files`` (per-file parse results:
JSON records plus an ``.npz`` blob of the node arrays), ``skipped`` (what the loader left out), ``fragments``
(the windows, with text and span) and ``relation`` (the sparse matrix as an ``.npz`` blob). Arrays are read with
``allow_pickle=False``; nothing is pickled. A save writes a new file next to the target and renames it over
the target, so a reader never sees a half-written index.
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
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TypeVar

import numpy as np
import scipy.sparse as sp

from ..._sqlite import connect
from ..fragments import Fragment
from .graph import CodeGraph, EdgeWeights, FileSyntax
from .loader import SkippedFile

__all__ = ["FORMAT", "StoredIndex", "grammar_versions", "is_code_index", "read_index", "write_index"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

FORMAT = "fragrel-code-index/1"
_FORMAT_FAMILY = "fragrel-code-index/"
_SQLITE_MAGIC = b"SQLite format 3\x00"
_PACKAGES = (
    "tree-sitter",
    "tree-sitter-python",
    "tree-sitter-javascript",
    "tree-sitter-typescript",
    "tree-sitter-java",
    "tree-sitter-go",
)
_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE files (path TEXT PRIMARY KEY, records TEXT NOT NULL, arrays BLOB NOT NULL);
CREATE TABLE skipped (path TEXT NOT NULL, reason TEXT NOT NULL);
CREATE TABLE fragments (
    idx INTEGER PRIMARY KEY, doc_id TEXT NOT NULL, position INTEGER NOT NULL, text TEXT NOT NULL,
    metadata TEXT NOT NULL
);
CREATE TABLE relation (name TEXT PRIMARY KEY, value BLOB NOT NULL);
"""


def grammar_versions() -> dict[str, str | None]:
    """Installed versions of tree-sitter and the grammar wheels (a stored index records them)."""
    out: dict[str, str | None] = {}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


@dataclass
class StoredIndex:
    """What one index file holds: the graph, the windows, their relation matrix and the index settings."""

    graph: CodeGraph
    fragments: list[Fragment]
    weights: sp.csr_array
    threshold: float
    fragment_lines: int
    stride: int
    root: str | None
    skipped: list[SkippedFile]
    versions: dict[str, str | None] | None = None


class _StaleIndex(Exception):
    """An index of ours that is out of date (another format version, other file contents)."""


def is_code_index(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a FragRel code index (of any format version); False when it does not exist or is
    empty (a new cache). Raises ValueError for anything else (a folder, a FIFO, a user's file, another SQLite
    database, a truncated index whose tables cannot be read): such a file is never overwritten or deleted.
    """
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise ValueError(f"{str(path)!r} cannot be read ({exc.strerror or exc}): give another cache path") from exc
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{str(path)!r} is not a regular file: give a file path for the index, e.g. index.sqlite")
    if st.st_size == 0:
        return False
    foreign = (
        f"{str(path)!r} exists and is not a FragRel code index: refusing to overwrite it; "
        "give another cache path (e.g. repo.fragrel.sqlite), or delete the file if it is a broken index"
    )
    try:
        with open(p, "rb") as fh:
            head = fh.read(len(_SQLITE_MAGIC))
    except OSError as exc:
        raise ValueError(f"{str(path)!r} cannot be read ({exc.strerror or exc}): give another cache path") from exc
    if head != _SQLITE_MAGIC:
        raise ValueError(foreign)
    try:
        conn = connect(p, read_only=True)
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
        finally:
            conn.close()
        fmt = json.loads(row[0]) if row else None
    except (sqlite3.Error, ValueError, TypeError, RecursionError) as exc:
        raise ValueError(f"{foreign} ({exc})") from exc
    if not (isinstance(fmt, str) and fmt.startswith(_FORMAT_FAMILY)):
        raise ValueError(foreign)
    return True


def _npz(**arrays: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _unnpz(blob: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(blob), allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def write_index(index: StoredIndex, path: str | os.PathLike[str]) -> None:
    """Write ``index`` to the SQLite file ``path`` (replaced atomically)."""
    target = Path(path)
    if target.exists() and target.is_dir():
        raise ValueError(f"{str(path)!r} is a folder: give a file path for the index, e.g. index.sqlite")
    is_code_index(target)  # raises rather than replace a file that is not an index
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    if tmp.exists():
        tmp.unlink()
    g = index.graph
    w = sp.csr_array(index.weights)
    meta = {
        "format": FORMAT,
        "threshold": index.threshold,
        "fragment_lines": index.fragment_lines,
        "stride": index.stride,
        "edge_weights": {
            "syntax": g.weights.syntax,
            "directory": g.weights.directory,
            "file_root": g.weights.file_root,
            "call": g.weights.call,
        },
        "root": str(index.root) if index.root is not None else None,
        "root_name": g.root_name,
        "versions": grammar_versions(),
        "content_hash": g.content_hash(),
    }
    conn = connect(tmp)
    try:
        with conn:
            conn.executescript(_SCHEMA)
            conn.executemany("INSERT INTO meta VALUES (?, ?)", [(k, json.dumps(v)) for k, v in meta.items()])
            conn.executemany(
                "INSERT INTO files VALUES (?, ?, ?)",
                [(f.path, json.dumps(f.records()), _npz(**f.arrays())) for f in g.files],
            )
            conn.executemany("INSERT INTO skipped VALUES (?, ?)", [(s.path, s.reason) for s in index.skipped])
            try:
                conn.executemany(
                    "INSERT INTO fragments VALUES (?, ?, ?, ?, ?)",
                    [
                        (i, f.doc_id, f.position, f.text, json.dumps(dict(f.metadata)))
                        for i, f in enumerate(index.fragments)
                    ],
                )
            except TypeError as exc:
                raise TypeError(f"fragment metadata must be JSON-serialisable to be stored: {exc}") from exc
            conn.execute(
                "INSERT INTO relation VALUES (?, ?)",
                ("weights", _npz(data=w.data, indices=w.indices, indptr=w.indptr, shape=np.array(w.shape))),
            )
    finally:
        conn.close()
    os.replace(tmp, target)


#: What reading a damaged index file raises (RecursionError: JSON nested deeper than the decoder goes).
_DAMAGE = (
    ValueError,
    sqlite3.Error,
    KeyError,
    TypeError,
    IndexError,
    OSError,
    EOFError,
    zipfile.BadZipFile,
    RecursionError,
)


def read_index(path: str | os.PathLike[str], build: Callable[[StoredIndex], T]) -> T:
    """Read an index written by :func:`write_index` and return ``build(stored)``.

    The stored relation matrix is used as is (no graph search). ``build`` runs inside the error handling, so
    a stored value it rejects reads as a damaged index. Raises ValueError for a file that is not such an index.
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{str(path)!r} is not a file: build the index first (CodeRelation.from_repository)")
    if not is_code_index(p):
        raise ValueError(f"{str(path)!r} is empty: build the index first (CodeRelation.from_repository)")
    corrupt = f"{str(path)!r} is a damaged FragRel code index: delete it and build the index again"
    try:
        conn = connect(p, read_only=True)
        try:
            meta = {k: json.loads(v) for k, v in conn.execute("SELECT key, value FROM meta")}
            if meta.get("format") != FORMAT:
                raise _StaleIndex(f"{str(path)!r} has format {meta.get('format')!r}, expected {FORMAT!r}: rebuild it")
            files = [
                FileSyntax.from_records(json.loads(rec), _unnpz(blob))
                for _, rec, blob in conn.execute("SELECT path, records, arrays FROM files ORDER BY path")
            ]
            skipped = [SkippedFile(a, b) for a, b in conn.execute("SELECT path, reason FROM skipped")]
            fragments = [
                Fragment(text, doc_id, position, json.loads(m))
                for doc_id, position, text, m in conn.execute(
                    "SELECT doc_id, position, text, metadata FROM fragments ORDER BY idx"
                )
            ]
            (blob,) = conn.execute("SELECT value FROM relation WHERE name = 'weights'").fetchone()
        finally:
            conn.close()
        arrays = _unnpz(blob)
        weights = sp.csr_array(
            (arrays["data"], arrays["indices"], arrays["indptr"]), shape=tuple(int(x) for x in arrays["shape"])
        )
        graph = CodeGraph(files, weights=EdgeWeights(**meta["edge_weights"]), root_name=meta.get("root_name"))
        if graph.content_hash() != meta.get("content_hash"):
            raise _StaleIndex(f"{str(path)!r} is inconsistent (content hash differs): rebuild it")
        built = build(
            StoredIndex(
                graph=graph,
                fragments=fragments,
                weights=weights,
                threshold=meta["threshold"],
                fragment_lines=meta["fragment_lines"],
                stride=meta["stride"],
                root=meta.get("root"),
                skipped=skipped,
                versions=meta.get("versions"),
            )
        )
    except _StaleIndex as exc:
        raise ValueError(str(exc)) from None
    except _DAMAGE as exc:
        raise ValueError(f"{corrupt} ({type(exc).__name__}: {exc})") from exc
    if meta.get("versions") != grammar_versions():
        logger.warning(
            "%s was built with %s; installed: %s (rebuild for exact parse results)",
            path,
            meta.get("versions"),
            grammar_versions(),
        )
    return built
