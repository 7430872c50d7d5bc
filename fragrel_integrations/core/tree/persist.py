"""Save and load a :class:`~fragrel_integrations.core.tree.tree.SurpriseTree` as SQLite (default) or JSON.

No pickle: nodes and the summary cache are rows (or JSON objects), vectors are float32 blobs (or float lists).
Writes are transactional: an SQLite save replaces the file's content in one transaction; a JSON save writes a
temporary file and renames it. The models are not saved: pass them to :func:`load_tree`.

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

from ...models.base import Embedder
from .tree import SurpriseTree

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
        json.dumps(state["nodes"])
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"cannot save the tree: node metadata must be JSON-serialisable (str, numbers, lists, dicts): {exc}"
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
    conn = sqlite3.connect(path)
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
            for table in ("meta", "nodes", "vectors", "cache"):
                conn.execute(f"DELETE FROM {table}")  # fixed table names
            meta = {k: state[k] for k in ("format", "version", "config", "next_id")}
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


def load_tree(
    path: str | Path,
    *,
    chat_model: Any = None,
    embedder: Embedder | None = None,
    format: str | None = None,
    **kwargs: Any,
) -> SurpriseTree:
    """Read a tree written by :func:`save_tree`. ``chat_model`` is needed only to insert more documents;
    ``embedder`` must be the one the tree was built with. ``kwargs`` go to the SurpriseTree constructor."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ValueError(f"no saved surprise tree at {str(path)!r}")
    if _is_json(path, format):
        with open(path, encoding="utf-8") as fh:
            state = json.load(fh)
        return SurpriseTree.from_state(state, chat_model, embedder, **kwargs)
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        meta = {k: json.loads(v) for k, v in conn.execute("SELECT key, value FROM meta")}
        nodes = []
        for row in conn.execute(f"SELECT {', '.join(_NODE_COLUMNS)} FROM nodes ORDER BY id"):
            node = dict(zip(_NODE_COLUMNS, row, strict=True))
            node["children"] = json.loads(node["children"])
            node["metadata"] = json.loads(node["metadata"])
            node["parsed"], node["failed"] = bool(node["parsed"]), bool(node["failed"])
            nodes.append(node)
        vectors = [
            [i, f, np.frombuffer(blob, dtype="<f4").tolist()]
            for i, f, blob in conn.execute("SELECT node, field, vector FROM vectors ORDER BY node, field")
        ]
        cache = {k: json.loads(v) for k, v in conn.execute("SELECT key, value FROM cache")}
    except sqlite3.DatabaseError as exc:
        raise ValueError(f"{str(path)!r} is not a saved surprise tree: {exc}") from exc
    finally:
        conn.close()
    state = {**meta, "nodes": nodes, "vectors": vectors, "cache": cache}
    return SurpriseTree.from_state(state, chat_model, embedder, **kwargs)
