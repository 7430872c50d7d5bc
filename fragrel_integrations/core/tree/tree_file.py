"""Save and load a :class:`~fragrel_integrations.core.tree.summary_tree.SurpriseTree` as one SQLite file.

The file is a :class:`~fragrel_integrations._sqlite.SavedFormat` (its header, atomic replace and damage rule):
the header holds the config, the next node id and the embedder's identity; nodes and the summary cache are
rows, vectors float32 blobs. No pickle. The models are not saved: pass them to :func:`load_tree`, which
validates what it reads (:meth:`~fragrel_integrations.core.tree.summary_tree.SurpriseTree.to_state` gives the same data
in memory, as JSON-compatible values).

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
import sqlite3
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np

from ..._sqlite import SavedFormat
from ..._validation import check_type
from ...models.embedder import Embedder
from .summary_tree import SurpriseTree, check_state
from .tree_nodes import TreeNode

__all__ = ["load_tree", "save_tree"]

_NODE_COLUMNS = tuple(f.name for f in fields(TreeNode))
_FORMAT = SavedFormat(
    "fragrel-surprise-tree",
    1,
    "saved surprise tree",
    (
        "CREATE TABLE nodes (id INTEGER PRIMARY KEY, layer INTEGER, summary TEXT, surprise TEXT, text TEXT, "
        "children TEXT, doc_id TEXT, position INTEGER, metadata TEXT, parsed INTEGER, failed INTEGER)",
        "CREATE TABLE vectors (node INTEGER, field TEXT, vector BLOB, PRIMARY KEY (node, field))",
        "CREATE TABLE cache (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    ),
)


def save_tree(tree: SurpriseTree, path: str | Path) -> None:
    """Write ``tree`` to the SQLite file ``path`` (replaced in one step; a file that is not a saved tree is
    refused with a ValueError)."""
    check_type(tree, SurpriseTree, "tree must be a SurpriseTree")
    state = tree.to_state()
    try:
        nodes = [
            tuple(
                json.dumps(n[c], ensure_ascii=False) if c in ("children", "metadata") else n[c] for c in _NODE_COLUMNS
            )
            for n in state["nodes"]
        ]
        json.dumps(nodes, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(
            "cannot save the tree: node metadata must be JSON-serialisable (str, numbers, lists, dicts) and all "
            f"text valid Unicode (no lone surrogates): {exc}"
        ) from exc

    def fill(conn: sqlite3.Connection) -> None:
        conn.executemany(f"INSERT INTO nodes VALUES ({', '.join('?' * len(_NODE_COLUMNS))})", nodes)
        conn.executemany(
            "INSERT INTO vectors VALUES (?, ?, ?)",
            [(i, f, np.asarray(v, dtype="<f4").tobytes()) for (i, f), v in sorted(tree.vectors.items())],
        )
        conn.executemany("INSERT INTO cache VALUES (?, ?)", [(k, json.dumps(v)) for k, v in state["cache"].items()])

    _FORMAT.write(
        Path(path).expanduser(),
        {"config": state["config"], "next_id": state["next_id"]},
        built_by={"embedder": state["embedder"]},
        fill=fill,
    )


def load_tree(
    path: str | Path, *, chat_model: Any = None, embedder: Embedder | None = None, **kwargs: Any
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
        raise ValueError(f"no saved surprise tree at {path}")
    parts = _FORMAT.read(path, lambda conn, header: check_state(_read_state(conn, header)))
    return SurpriseTree.from_checked_state(parts, chat_model, embedder, where=str(path), **kwargs)


def _read_state(conn: sqlite3.Connection, header: dict[str, Any]) -> dict[str, Any]:
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
    return {
        "format": _FORMAT.name,
        "version": _FORMAT.version,
        "embedder": header["built_by"].get("embedder"),
        "config": header.get("config"),
        "next_id": header.get("next_id"),
        "nodes": nodes,
        "vectors": vectors,
        "cache": cache,
    }
