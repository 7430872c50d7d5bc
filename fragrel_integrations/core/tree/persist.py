"""Save and load a :class:`~fragrel_integrations.core.tree.summary_tree.SurpriseTree` as SQLite (default) or JSON.

No pickle: nodes and the summary cache are rows (or JSON objects), vectors are float32 blobs (or float lists).
Writes are transactional: an SQLite save replaces the file's content in one transaction; a JSON save writes a
temporary file and renames it. A SQLite save refuses (ValueError) to write into an existing file that is not a
saved tree. The models are not saved: pass them to :func:`load_tree`, which validates what it reads.

>>> import os, tempfile
>>> from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel
>>> from fragrel_integrations.core.tree import SurpriseTree
>>> tree = SurpriseTree(ScriptedChatModel(lambda m: "(Summary): s\\n(Surprise): t"), HashingEmbedder(dim=32),
...                     show_progress=False)
>>> _ = tree.build(["One. Two."])
>>> path = os.path.join(tempfile.mkdtemp(), "tree.sqlite")
>>> save_tree(tree, path)
>>> load_tree(path, embedder=HashingEmbedder(dim=32)).to_state() == tree.to_state()
True
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ..._sqlite import connect
from ...models.base import Embedder
from .summary_tree import SurpriseTree, check_state

__all__ = ["load_tree", "save_tree"]

_NODE_COLUMNS = (
    "id",
    "layer",
    "summary",
    "surprise",
    "text",
    "children",
    "doc_id",
    "position",
    "metadata",
    "parsed",
    "failed",
)


_TABLES = ("meta", "nodes", "vectors", "cache")


def _is_json(path: Path, fmt: str | None) -> bool:
    if fmt not in (None, "json", "sqlite"):
        raise ValueError(f"format must be 'json', 'sqlite' or None (from the file suffix), got {fmt!r}")
    return fmt == "json" or (fmt is None and path.suffix.lower() == ".json")


def save_tree(tree: SurpriseTree, path: str | Path, *, format: str | None = None) -> None:
    """Write ``tree`` to ``path``: JSON when the suffix is ``.json`` (or ``format="json"``), else SQLite."""
    if not isinstance(tree, SurpriseTree):
        raise TypeError(f"tree must be a SurpriseTree, got {type(tree).__name__}")
    path = Path(path).expanduser()
    as_json = _is_json(path, format)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = tree.to_state()
    try:
        json.dumps(state["nodes"], ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(
            "cannot save the tree: node metadata must be JSON-serialisable (str, numbers, lists, dicts) and all "
            f"text valid Unicode (no lone surrogates): {exc}"
        ) from exc
    if as_json:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(state, fh, ensure_ascii=False)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return
    _check_overwrite(path)
    conn = connect(path)
    try:
        with conn:
            conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS nodes (id INTEGER PRIMARY KEY, layer INTEGER, summary TEXT, "
                "surprise TEXT, text TEXT, children TEXT, doc_id TEXT, position INTEGER, metadata TEXT, "
                "parsed INTEGER, failed INTEGER)"
            )
            conn.execute(
                "CREATE TABLE IF NOT EXISTS vectors (node INTEGER, field TEXT, vector BLOB, PRIMARY KEY (node, field))"
            )
            conn.execute("CREATE TABLE IF NOT EXISTS cache (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            for table in _TABLES:
                conn.execute(f"DELETE FROM {table}")  # fixed table names
            meta = {k: state[k] for k in ("format", "version", "embedder", "config", "next_id")}
            conn.executemany("INSERT INTO meta VALUES (?, ?)", [(k, json.dumps(v)) for k, v in meta.items()])
            conn.executemany(
                f"INSERT INTO nodes VALUES ({', '.join('?' * len(_NODE_COLUMNS))})",
                [
                    tuple(
                        json.dumps(n[c], ensure_ascii=False) if c in ("children", "metadata") else n[c]
                        for c in _NODE_COLUMNS
                    )
                    for n in state["nodes"]
                ],
            )
            conn.executemany(
                "INSERT INTO vectors VALUES (?, ?, ?)",
                [(i, f, np.asarray(v, dtype="<f4").tobytes()) for (i, f), v in sorted(tree.vectors.items())],
            )
            conn.executemany("INSERT INTO cache VALUES (?, ?)", [(k, json.dumps(v)) for k, v in state["cache"].items()])
    finally:
        conn.close()


def _check_overwrite(path: Path) -> None:
    """Refuse to write a tree into a file that holds something else (a SQLite save empties its tables)."""
    if not path.exists() or (path.is_file() and path.stat().st_size == 0):
        return
    if not path.is_file():
        raise ValueError(f"cannot save the tree to {str(path)!r}: it is not a regular file")
    try:
        conn = connect(path, read_only=True)
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            fmt = None
            if "meta" in tables:
                row = conn.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
                fmt = None if row is None else row[0]
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise ValueError(
            f"refusing to overwrite {str(path)!r}: it is not a SQLite file ({exc}); choose another path, or a "
            "'.json' one for a JSON save"
        ) from exc
    if tables and (not tables <= set(_TABLES) or fmt != json.dumps("fragrel-surprise-tree")):
        raise ValueError(
            f"refusing to overwrite {str(path)!r}: it is a SQLite database but not a saved surprise tree (tables "
            f"{sorted(tables)[:5]}); choose another path"
        )


def load_tree(
    path: str | Path,
    *,
    chat_model: Any = None,
    embedder: Embedder | None = None,
    format: str | None = None,
    **kwargs: Any,
) -> SurpriseTree:
    """Read a tree written by :func:`save_tree`. ``chat_model`` is needed only to insert more documents;
    ``embedder`` must be the one the tree was built with (its recorded identity is checked: another model,
    other settings or another fingerprint is a ValueError naming the file). ``kwargs`` go to the SurpriseTree
    constructor.

    A file that is not a saved tree, or one that is corrupt or was edited into an inconsistent tree (duplicate
    ids, ``next_id`` not above every id, missing children, cycles, layers out of range, bad vectors), raises a
    ValueError naming the file and the problem (see :func:`~.summary_tree.check_state`)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ValueError(f"no saved surprise tree at {str(path)!r}")
    try:
        state = _read_json(path) if _is_json(path, format) else _read_sqlite(path)
        parts = check_state(state)
    except (ValueError, TypeError, KeyError, RecursionError, OverflowError, sqlite3.DatabaseError) as exc:
        # json/numpy/sqlite errors and check_state's findings, all named with the file
        raise ValueError(f"{str(path)!r} is not a saved surprise tree or is damaged: {exc}") from exc
    return SurpriseTree.from_checked_state(parts, chat_model, embedder, where=repr(str(path)), **kwargs)


def _read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def _read_sqlite(path: Path) -> dict[str, Any]:
    conn = connect(path, read_only=True)
    try:
        meta = {k: json.loads(v) for k, v in conn.execute("SELECT key, value FROM meta")}
        nodes = []
        for row in conn.execute(f"SELECT {', '.join(_NODE_COLUMNS)} FROM nodes ORDER BY id"):
            node = dict(zip(_NODE_COLUMNS, row, strict=True))
            node["children"] = json.loads(node["children"])
            node["metadata"] = json.loads(node["metadata"])
            for flag in ("parsed", "failed"):
                if node[flag] not in (0, 1):
                    raise ValueError(f"node {node['id']}: {flag} must be 0 or 1, got {node[flag]!r}")
                node[flag] = bool(node[flag])
            nodes.append(node)
        vectors = []
        for i, f, blob in conn.execute("SELECT node, field, vector FROM vectors ORDER BY node, field"):
            if not isinstance(blob, bytes) or not blob or len(blob) % 4:
                raise ValueError(f"the vector of node {i!r}, field {f!r} is not a float32 blob")
            vectors.append([i, f, np.frombuffer(blob, dtype="<f4").tolist()])
        cache = {k: json.loads(v) for k, v in conn.execute("SELECT key, value FROM cache")}
    finally:
        conn.close()
    return {**meta, "nodes": nodes, "vectors": vectors, "cache": cache}
