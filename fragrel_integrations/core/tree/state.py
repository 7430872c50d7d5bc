"""Validation of saved surprise-tree data (:meth:`~.tree.SurpriseTree.to_state`): a tampered or corrupt save
raises a ValueError naming the problem before any of it is used."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields

import numpy as np

from ..._validation import MAX_JSON_DEPTH, json_depth_ok
from .summariser import SummaryResult
from .tree_nodes import FIELDS, TreeConfig, TreeNode

__all__ = ["MAX_METADATA_DEPTH", "check_state"]


#: Deepest nesting of a node's metadata accepted from a saved tree (deeper data would fail later with a
#: RecursionError when the tree is copied or saved).
MAX_METADATA_DEPTH = MAX_JSON_DEPTH

_STATE_NODE_FIELDS = {f.name for f in fields(TreeNode)}
_RESULT_FIELDS = {"summary": str, "surprise": str, "parsed": bool, "failed": bool}


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_node(raw: object, config: TreeConfig, n: int) -> TreeNode:
    where = f"nodes[{n}]"
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} must be an object, got {type(raw).__name__}")
    unknown = set(raw) - _STATE_NODE_FIELDS
    missing = {"id", "layer", "summary"} - set(raw)
    if unknown or missing:
        raise ValueError(f"{where} has unknown fields {sorted(unknown)} or lacks {sorted(missing)}")
    node_id, layer = raw["id"], raw["layer"]
    if not _is_int(node_id) or node_id < 0:
        raise ValueError(f"{where}: id must be an int >= 0, got {node_id!r}")
    where = f"node {node_id}"
    if not _is_int(layer) or not 0 <= layer <= config.max_layers:
        raise ValueError(f"{where}: layer must be an int in [0, max_layers={config.max_layers}], got {layer!r}")
    for name in ("summary", "surprise", "text", "doc_id"):
        if not isinstance(raw.get(name, ""), str):
            raise ValueError(f"{where}: {name} must be a string, got {type(raw[name]).__name__}")
    for name in ("parsed", "failed"):
        if not isinstance(raw.get(name, False), bool):
            raise ValueError(f"{where}: {name} must be true or false, got {raw[name]!r}")
    if not _is_int(raw.get("position", -1)):
        raise ValueError(f"{where}: position must be an int, got {raw['position']!r}")
    children = raw.get("children", [])
    if not isinstance(children, list | tuple) or not all(_is_int(c) for c in children):
        raise ValueError(f"{where}: children must be a list of node ids, got {children!r:.80}")
    if len(set(children)) != len(children):
        raise ValueError(f"{where} lists a child twice")
    if (layer == 0) != (not children):
        raise ValueError(f"{where}: a leaf (layer 0) has no children and every upper-layer node has some")
    metadata = raw.get("metadata", {})
    if not isinstance(metadata, Mapping) or not json_depth_ok(metadata, MAX_METADATA_DEPTH):
        raise ValueError(f"{where}: metadata must be an object nested at most {MAX_METADATA_DEPTH} levels deep")
    return TreeNode(**{**raw, "children": tuple(children), "metadata": dict(metadata)})


def check_state(
    state: object,
) -> tuple[TreeConfig, list[TreeNode], dict[tuple[int, str], np.ndarray], dict[str, SummaryResult], int, dict | None]:
    """Validate :meth:`SurpriseTree.to_state` data and return its parts (config, nodes, vectors, cache, next id,
    the recorded embedder identity or None for a state saved before it was recorded).

    Checks: the format and version; the config; every node's fields and types; unique ids and ``next_id`` above
    all of them (else the next insert would overwrite a node); children that exist, one layer at least below
    their parent (so no cycles) and layers within ``max_layers``; exactly one vector per non-empty text, all of
    one dimension, finite; the summary cache entries. Any problem raises a ValueError naming it.

    >>> check_state({"format": "fragrel-surprise-tree", "version": 1, "config": {}, "next_id": 0, "nodes": [],
    ...              "vectors": [], "cache": {}})[4]
    0
    """
    if not isinstance(state, Mapping) or state.get("format") != "fragrel-surprise-tree":
        raise ValueError("not a saved surprise tree (missing format 'fragrel-surprise-tree')")
    if state.get("version") != 1:
        raise ValueError(f"unsupported surprise tree version {state.get('version')!r}; expected 1")
    missing = {"config", "next_id", "nodes", "vectors", "cache"} - set(state)
    if missing:
        raise ValueError(f"the saved tree lacks {sorted(missing)}")
    raw_config = state["config"]
    known = {f.name for f in fields(TreeConfig)}
    if not isinstance(raw_config, Mapping) or not set(raw_config) <= known:
        raise ValueError(f"config must be an object with fields among {sorted(known)}, got {raw_config!r:.200}")
    if "summariser" not in raw_config:  # saved before the field existed: every such tree was built by the LLM
        raw_config = {**raw_config, "summariser": "llm"}
    try:
        config = TreeConfig(**raw_config)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"bad config: {exc}") from exc
    if not isinstance(state["nodes"], list | tuple):
        raise ValueError(f"nodes must be a list, got {type(state['nodes']).__name__}")
    nodes = [_check_node(raw, config, n) for n, raw in enumerate(state["nodes"])]
    by_id: dict[int, TreeNode] = {}
    for node in nodes:
        if node.id in by_id:
            raise ValueError(f"node id {node.id} appears twice")
        by_id[node.id] = node
    for node in nodes:
        for c in node.children:
            child = by_id.get(c)
            if child is None:
                raise ValueError(f"node {node.id} has child {c}, which is not in the tree")
            if child.layer >= node.layer:
                raise ValueError(f"node {node.id} (layer {node.layer}) has child {c} on layer {child.layer}")
    next_id = state["next_id"]
    top = max(by_id, default=-1)
    if not _is_int(next_id) or next_id <= top:
        raise ValueError(
            f"next_id must be an int above every node id (the largest is {top}), got {next_id!r}: the save was "
            "edited or is corrupt (an insert would overwrite nodes)"
        )
    vectors = _check_vectors(state["vectors"], by_id)
    raw_cache = state["cache"]
    if not isinstance(raw_cache, Mapping):
        raise ValueError(f"cache must be an object, got {type(raw_cache).__name__}")
    cache: dict[str, SummaryResult] = {}
    for key, value in raw_cache.items():
        if (
            not isinstance(key, str)
            or not isinstance(value, Mapping)
            or set(value) != set(_RESULT_FIELDS)
            or not all(isinstance(value[k], t) for k, t in _RESULT_FIELDS.items())
        ):
            raise ValueError(f"cache entry {key!r:.80} must be an object with {sorted(_RESULT_FIELDS)} of their types")
        cache[key] = SummaryResult(**value)
    identity = state.get("embedder")
    if identity is not None and not isinstance(identity, Mapping):
        raise ValueError(f"embedder must be an object (the recorded embedder identity), got {type(identity).__name__}")
    return config, nodes, vectors, cache, next_id, None if identity is None else dict(identity)


def _check_vectors(raw: object, by_id: Mapping[int, TreeNode]) -> dict[tuple[int, str], np.ndarray]:
    if not isinstance(raw, list | tuple):
        raise ValueError(f"vectors must be a list, got {type(raw).__name__}")
    out: dict[tuple[int, str], np.ndarray] = {}
    dims: set[int] = set()
    for n, entry in enumerate(raw):
        if not isinstance(entry, list | tuple) or len(entry) != 3:
            raise ValueError(f"vectors[{n}] must be [node id, field, vector]")
        node_id, name, values = entry
        node = by_id.get(node_id) if _is_int(node_id) else None
        if node is None or name not in FIELDS or not node.field_text(name):
            raise ValueError(f"vectors[{n}] is for ({node_id!r:.40}, {name!r:.40}), which is not a text of the tree")
        if (node_id, name) in out:
            raise ValueError(f"vectors[{n}]: node {node_id} has two {name!r} vectors")
        try:
            array = np.asarray(values) if isinstance(values, list | tuple) else None
        except (TypeError, ValueError, OverflowError):  # ragged lists, huge ints
            array = None
        if array is None or array.ndim != 1 or array.dtype.kind not in "iuf":
            raise ValueError(f"vectors[{n}] (node {node_id}, {name!r}) must be a flat list of numbers")
        with np.errstate(over="ignore"):
            vector = array.astype(np.float32)
        if vector.size == 0 or not np.all(np.isfinite(vector)):
            raise ValueError(f"vectors[{n}] (node {node_id}, {name!r}) must be non-empty and finite")
        dims.add(vector.size)
        out[(node_id, name)] = vector
    if len(dims) > 1:
        raise ValueError(f"the tree's vectors have different dimensions {sorted(dims)}")
    missing = [(i, f) for i, node in by_id.items() for f in FIELDS if node.field_text(f) and (i, f) not in out]
    if missing:
        raise ValueError(f"{len(missing)} node texts have no vector, e.g. node {missing[0][0]}'s {missing[0][1]!r}")
    return out
