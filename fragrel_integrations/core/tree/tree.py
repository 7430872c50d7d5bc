"""The surprise tree: RAPTOR's recursive summary tree where every node also keeps the surprising facts.

Build: chunk each text (sentence-aware, ``chunk_tokens``), make one LLM call per chunk (summary + surprise), then
layer by layer cluster the node SUMMARIES (never the surprise facts) and make one LLM call per cluster on its
members' summaries. Every node's texts (leaf chunk, summary, surprise) are embedded; retrieval scores all of
them at once (collapsed tree) or walks down from the roots (tree traversal).

>>> from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel
>>> llm = ScriptedChatModel(lambda m: "(Summary): A short summary.\\n(Surprise): None")
>>> tree = SurpriseTree(llm, HashingEmbedder(dim=64), show_progress=False)
>>> report = tree.build(["Cats purr. Dogs bark.", "Stocks fell. Bonds rose."])
>>> report.llm_calls, len(tree.leaves()), tree.retrieve("cats", k=1)[0].field
(3, 2, 'text')
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

import numpy as np

from ..._validation import check_positive_int
from ...models.base import Embedder, embed_documents, embed_query
from ...models.chat import ChatModel
from ...models.convert import as_chat_model
from ...models.tokens import count_tokens
from ..scoring import check_alpha, relation_aware_scores
from ..selection import check_k, select
from .chunking import chunk_text
from .clustering import REDUCERS, cluster_embeddings
from .extractive import ExtractiveSummariser
from .relation import TreeRelation
from .summariser import BuildReport, Summariser, SummaryResult

__all__ = [
    "FIELDS",
    "MAX_METADATA_DEPTH",
    "SUMMARISERS",
    "BuildReport",
    "SummaryResult",
    "SurpriseTree",
    "TreeConfig",
    "TreeHit",
    "TreeNode",
    "check_search",
    "check_state",
]

logger = logging.getLogger(__name__)

#: Names of the summarisers a tree can use (:attr:`TreeConfig.summariser`).
SUMMARISERS = ("llm", "extractive")

#: The texts a node can contribute to retrieval: the leaf chunk, the summary and the surprise facts.
FIELDS = ("text", "summary", "surprise")

_Steps = Generator[list[str], list["SummaryResult"], None]


def check_search(mode: object, fields: Sequence[str]) -> tuple[str, ...]:
    """Validate a retrieval ``mode`` (``"collapsed"`` or ``"traversal"``) and ``fields`` (a non-empty subset of
    :data:`FIELDS`); returns the fields as a tuple."""
    wanted = tuple(fields)
    if not wanted or not set(wanted) <= set(FIELDS):
        raise ValueError(f"fields must be a non-empty subset of {FIELDS}, got {fields!r}")
    if mode not in ("collapsed", "traversal"):
        raise ValueError(f"mode must be 'collapsed' or 'traversal', got {mode!r}")
    return wanted


_POSITIVE_FIELDS = (
    "chunk_tokens",
    "summary_tokens",
    "surprise_tokens",
    "max_cluster_tokens",
    "reduction_dim",
    "max_clusters",
    "max_layers",
)


@dataclass(frozen=True, slots=True)
class TreeConfig:
    """Settings that shape a tree (persisted with it). Defaults follow ILM-TR (600-token chunks, 300-token
    summaries) and RAPTOR (10 reduced dimensions, soft threshold 0.1).

    ``summariser``: who writes the summaries and surprise notes, one of :data:`SUMMARISERS`: ``"llm"`` (the
    chat model, ILM-TR's prompt), ``"extractive"`` (no model: central and novel sentences, see
    :mod:`.extractive`), or None = ``"llm"`` when the tree gets a chat model, else ``"extractive"``
    (:class:`SurpriseTree` resolves it, so a saved tree records what built it).
    """

    chunk_tokens: int = 600
    summary_tokens: int = 300
    surprise_tokens: int = 150
    max_cluster_tokens: int = 3000
    reduction_dim: int = 10
    threshold: float = 0.1
    max_clusters: int = 50
    max_layers: int = 5
    reducer: str = "auto"
    seed: int = 0
    summariser: str | None = None

    def __post_init__(self) -> None:
        for name in _POSITIVE_FIELDS:
            check_positive_int(getattr(self, name), name)
        if not 0 < self.threshold <= 1:
            raise ValueError(f"threshold must be in (0, 1], got {self.threshold!r}")
        if self.reducer not in REDUCERS:
            raise ValueError(f"reducer must be one of {REDUCERS}, got {self.reducer!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise TypeError(f"seed must be an int, got {type(self.seed).__name__}")
        if self.summariser is not None and self.summariser not in SUMMARISERS:
            raise ValueError(
                f"summariser must be one of {SUMMARISERS} (or None: 'llm' with a chat model, else 'extractive'), "
                f"got {self.summariser!r}"
            )


@dataclass(slots=True)
class TreeNode:
    """One node. Leaves (layer 0) hold a chunk in ``text``; every node has a ``summary`` and maybe a ``surprise``.

    ``parsed`` is False when the model's reply lacked a section (the reply became the summary); ``failed`` is True
    when the call raised or returned nothing (the summary is then the start of the input text).
    """

    id: int
    layer: int
    summary: str
    surprise: str = ""
    text: str = ""
    children: tuple[int, ...] = ()
    doc_id: str = ""
    position: int = -1
    metadata: dict[str, Any] = field(default_factory=dict)
    parsed: bool = True
    failed: bool = False

    @property
    def is_leaf(self) -> bool:
        return self.layer == 0

    def field_text(self, name: str) -> str:
        """The text of ``name`` (one of :data:`FIELDS`); empty when the node has none."""
        if name not in FIELDS:
            raise ValueError(f"field must be one of {FIELDS}, got {name!r}")
        return getattr(self, name)


@dataclass(frozen=True, slots=True)
class TreeHit:
    """A retrieved text: which node and field it came from, and its cosine score."""

    node: TreeNode
    field: str
    text: str
    score: float

    @property
    def node_id(self) -> int:
        return self.node.id

    @property
    def layer(self) -> int:
        return self.node.layer


def _check_texts(texts: object, doc_ids: object, metadatas: object) -> tuple[list[str], list[str], list[dict]]:
    if isinstance(texts, str) or not isinstance(texts, Iterable):
        raise TypeError("texts must be a list of strings (wrap a single text in a list)")
    texts = list(texts)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"texts[{i}] must be str, got {type(t).__name__}")
        try:
            t.encode("utf-8")
        except UnicodeEncodeError as exc:  # found now, not when the tree is saved
            raise ValueError(
                f"texts[{i}] contains a lone surrogate at position {exc.start}, which cannot be saved: decode the "
                "input with errors='replace'"
            ) from None
    ids = [None] * len(texts) if doc_ids is None else list(doc_ids)  # type: ignore[call-overload]
    metas = [{}] * len(texts) if metadatas is None else [dict(m) for m in metadatas]  # type: ignore[union-attr]
    if len(ids) != len(texts) or len(metas) != len(texts):
        raise ValueError(f"doc_ids and metadatas must have one entry per text ({len(texts)})")
    return texts, [str(i) if i is not None else None for i in ids], metas  # type: ignore[return-value]


#: Deepest nesting of a node's metadata accepted from a saved tree (deeper data would fail later with a
#: RecursionError when the tree is copied or saved).
MAX_METADATA_DEPTH = 64

_STATE_NODE_FIELDS = {f.name for f in fields(TreeNode)}
_RESULT_FIELDS = {"summary": str, "surprise": str, "parsed": bool, "failed": bool}


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _depth_ok(value: object, limit: int) -> bool:
    """Whether ``value`` (JSON data) nests at most ``limit`` levels (iterative: no recursion on hostile data)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping | list | tuple):
            if depth > limit:
                return False
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, Mapping) else item))
    return True


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
    if not isinstance(metadata, Mapping) or not _depth_ok(metadata, MAX_METADATA_DEPTH):
        raise ValueError(f"{where}: metadata must be an object nested at most {MAX_METADATA_DEPTH} levels deep")
    return TreeNode(**{**raw, "children": tuple(children), "metadata": dict(metadata)})


def check_state(
    state: object,
) -> tuple[TreeConfig, list[TreeNode], dict[tuple[int, str], np.ndarray], dict[str, SummaryResult], int]:
    """Validate :meth:`SurpriseTree.to_state` data and return its parts (config, nodes, vectors, cache, next id).

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
    return config, nodes, vectors, cache, next_id


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


class SurpriseTree:
    """A RAPTOR tree of summaries with surprising facts; see the module docstring.

    Args:
        chat_model: writes the summaries (any ChatModel; LangChain / LlamaIndex models are wrapped). Needed to
            build and insert with ``summariser="llm"``, not to retrieve (pass None when only loading and querying).
        embedder: any Embedder (``embed_documents`` / ``embed_query``); None = the embedded offline MiniLM.
        config: a :class:`TreeConfig`, or its fields as keyword arguments, e.g. ``summariser="extractive"``
            for model-free summaries and surprise notes (:mod:`.extractive`). With ``summariser`` left None the
            tree uses the LLM when it has a ``chat_model`` and the extractive summariser when it has none; the
            choice is stored in ``tree.config`` and saved with the tree (a loaded LLM-built tree stays "llm",
            so inserting into it without a model raises instead of mixing in extractive nodes).
        max_concurrency: summary calls in flight at once.
        show_progress: a tqdm bar over the LLM calls (the sentence embedding for ``"extractive"``).
        counter: token counter (an object with ``count_tokens`` or a function); default: the chat model's.
    """

    def __init__(
        self,
        chat_model: Any = None,
        embedder: Embedder | None = None,
        *,
        config: TreeConfig | None = None,
        max_concurrency: int = 4,
        show_progress: bool = True,
        counter: Any = None,
        **config_fields: Any,
    ) -> None:
        if config is not None and config_fields:
            raise ValueError("pass either config=TreeConfig(...) or its fields as keywords, not both")
        self.config = config if config is not None else TreeConfig(**config_fields)
        self.chat_model: ChatModel | None = None if chat_model is None else as_chat_model(chat_model)
        if embedder is None:
            from ...models.local import default_embedder

            embedder = default_embedder()
        if not isinstance(embedder, Embedder):
            raise TypeError(
                f"embedder must have embed_documents(texts) and embed_query(text), got {type(embedder).__name__}"
            )
        self.embedder = embedder
        window = getattr(embedder, "max_input_tokens", None)
        if isinstance(window, int) and self.config.chunk_tokens > window:
            logger.warning(
                "chunk_tokens=%d but the embedder reads only %d tokens of a text: the end of every chunk is never "
                "embedded (needles there cannot be retrieved); use chunk_tokens <= %d or an embedder with a longer "
                "window",
                self.config.chunk_tokens,
                window,
                window,
            )
        self._counter = counter if counter is not None else self.chat_model
        if self.config.summariser is None:
            self.config = replace(self.config, summariser="llm" if self.chat_model is not None else "extractive")
        self.summariser: Summariser | ExtractiveSummariser
        if self.config.summariser == "extractive":
            self.summariser = ExtractiveSummariser(
                embedder,
                summary_tokens=self.config.summary_tokens,
                surprise_tokens=self.config.surprise_tokens,
                show_progress=show_progress,
                counter=self.count,
            )
            self._text_embedder: Embedder = self.summariser.cached_embedder
        else:
            self._text_embedder = embedder
            self.summariser = Summariser(
                self.chat_model,
                summary_tokens=self.config.summary_tokens,
                surprise_tokens=self.config.surprise_tokens,
                max_concurrency=max_concurrency,
                show_progress=show_progress,
                counter=self.count,
            )
        self.nodes: dict[int, TreeNode] = {}
        self.vectors: dict[tuple[int, str], np.ndarray] = {}
        self.report = BuildReport()
        self._next_id = 0
        self._matrix: tuple[list[tuple[int, str]], np.ndarray] | None = None
        self._relations: dict[TreeRelation, Any] = {}  # relation weights over the texts of self._matrix
        self._lengths: dict[tuple[int, str], int] = {}  # token counts of node texts, for budgets
        self._last_report = BuildReport()
        self._new_leaf_ids: list[int] = []

    # ------------------------------------------------------------------------------------------------ structure

    def count(self, text: str) -> int:
        """Tokens in ``text`` (the configured counter, else the chat model's tokenizer, else the estimate)."""
        if callable(self._counter) and not hasattr(self._counter, "count_tokens"):
            return int(self._counter(text))
        return count_tokens(self._counter, text)

    def leaves(self) -> list[TreeNode]:
        """Layer-0 nodes in insertion order."""
        return [n for n in self.nodes.values() if n.layer == 0]

    def layer(self, index: int) -> list[TreeNode]:
        """Nodes of one layer (0 = leaves) in creation order."""
        return [n for n in self.nodes.values() if n.layer == index]

    @property
    def n_layers(self) -> int:
        """Number of layers, leaves included (0 for an empty tree)."""
        return 1 + max((n.layer for n in self.nodes.values()), default=-1)

    def parents(self) -> dict[int, list[int]]:
        """child id -> parent ids (soft clustering lets a node have several parents)."""
        out: dict[int, list[int]] = {}
        for n in self.nodes.values():
            for c in n.children:
                out.setdefault(c, []).append(n.id)
        return out

    def roots(self) -> list[TreeNode]:
        """Nodes without a parent: where tree traversal starts."""
        has_parent = self.parents()
        return [n for n in self.nodes.values() if n.id not in has_parent]

    def __len__(self) -> int:
        return len(self.nodes)

    def __repr__(self) -> str:
        return f"SurpriseTree(nodes={len(self.nodes)}, layers={self.n_layers}, leaves={len(self.leaves())})"

    # ------------------------------------------------------------------------------------------------ summaries

    @property
    def summary_cache(self) -> dict[str, SummaryResult]:
        """Parsed summaries by content hash (model, prompt version, input); saved with the tree."""
        return self.summariser.cache

    @summary_cache.setter
    def summary_cache(self, value: dict[str, SummaryResult]) -> None:
        self.summariser.cache = value

    def _summarise(self, inputs: list[str]) -> list[SummaryResult]:
        results, report = self.summariser.summarise(inputs)
        self._last_report.add(report)
        return results

    async def _asummarise(self, inputs: list[str]) -> list[SummaryResult]:
        results, report = await self.summariser.asummarise(inputs)
        self._last_report.add(report)
        return results

    # ------------------------------------------------------------------------------------------------ embeddings

    def _embed(self, ids: Iterable[int]) -> None:
        keys = [(i, f) for i in ids for f in FIELDS if self.nodes[i].field_text(f)]
        if not keys:
            return
        # shortest first, so a batch holds texts of similar length: summaries are not padded to a chunk's length;
        # leaf chunks go to the embedder itself (never a summary's cached or composed vector of the same text)
        keys.sort(key=lambda key: (key[1] != "text", len(self.nodes[key[0]].field_text(key[1]))))
        n_text = sum(f == "text" for _, f in keys)
        texts = [self.nodes[i].field_text(f) for i, f in keys]
        parts = [embed_documents(self.embedder, texts[:n_text])] if n_text else []
        parts += [embed_documents(self._text_embedder, texts[n_text:])] if n_text < len(keys) else []
        vectors = np.concatenate(parts)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = vectors / np.where(norms > 0, norms, 1.0)
        for key, v in zip(keys, vectors, strict=True):
            self.vectors[key] = v
            self._lengths.pop(key, None)
        for i in {i for i, _ in keys}:
            for f in FIELDS:
                if not self.nodes[i].field_text(f):
                    self.vectors.pop((i, f), None)
        self._matrix = None

    def _summary_matrix(self, ids: Sequence[int]) -> np.ndarray:
        return np.stack([self.vectors[(i, "summary")] for i in ids])

    # ------------------------------------------------------------------------------------------------ building

    def _new_node(self, **kwargs: Any) -> TreeNode:
        if self._next_id in self.nodes:  # never overwrite a node (check_state keeps loaded trees consistent)
            raise ValueError(f"node id {self._next_id} is already taken: the tree's next_id is corrupt")
        node = TreeNode(id=self._next_id, **kwargs)
        self.nodes[node.id] = node
        self._next_id += 1
        return node

    def _cluster_input(self, ids: Sequence[int]) -> str:
        return "\n\n".join(self.nodes[i].summary for i in ids)

    def _apply(self, node: TreeNode, result: SummaryResult) -> None:
        node.summary, node.surprise = result.summary, result.surprise
        node.parsed, node.failed = result.parsed, result.failed

    def _cluster(self, ids: list[int]) -> list[list[int]]:
        c = self.config
        clusters = cluster_embeddings(
            self._summary_matrix(ids),
            [self.count(self.nodes[i].summary) for i in ids],
            max_cluster_tokens=c.max_cluster_tokens,
            dim=c.reduction_dim,
            threshold=c.threshold,
            max_clusters=c.max_clusters,
            seed=c.seed,
            method=c.reducer,  # type: ignore[arg-type]
        )
        return [[ids[j] for j in cluster] for cluster in clusters]

    def _grow(self, current: list[int], layer: int) -> _Steps:
        """Add layers above ``current`` (nodes at ``layer``) while clustering still merges nodes."""
        while len(current) >= 2 and layer < self.config.max_layers:
            clusters = self._cluster(current)
            if len(clusters) >= len(current):
                break
            results = yield [self._cluster_input(c) for c in clusters]
            parents = []
            for members, result in zip(clusters, results, strict=True):
                node = self._new_node(layer=layer + 1, summary="", children=tuple(members))
                self._apply(node, result)
                parents.append(node.id)
            self._last_report.nodes_added += len(parents)
            self._embed(parents)
            current, layer = parents, layer + 1

    def _add_leaves(self, texts: list[str], doc_ids: list[str | None], metadatas: list[dict]) -> _Steps:
        known = {n.doc_id for n in self.leaves()}
        base = len(known)
        chunks: list[tuple[str, str, int, dict]] = []
        for t, (text, doc_id, meta) in enumerate(zip(texts, doc_ids, metadatas, strict=True)):
            if doc_id is None:
                doc_id = str(base + t)
            if doc_id in known:
                raise ValueError(f"doc_id {doc_id!r} is already in the tree: give every document a new doc_id")
            known.add(doc_id)
            for pos, chunk in enumerate(chunk_text(text, self.config.chunk_tokens, self.count)):
                chunks.append((chunk, doc_id, pos, meta))
        results = yield [c[0] for c in chunks]
        ids = []
        for (chunk, doc_id, pos, meta), result in zip(chunks, results, strict=True):
            node = self._new_node(layer=0, summary="", text=chunk, doc_id=doc_id, position=pos, metadata=dict(meta))
            self._apply(node, result)
            ids.append(node.id)
        self._last_report.nodes_added += len(ids)
        self._embed(ids)
        self._new_leaf_ids = ids

    def _build_steps(self, texts: list[str], doc_ids: list, metadatas: list) -> _Steps:
        if self.nodes:
            raise ValueError("this tree is already built: use insert(texts) to add documents")
        yield from self._add_leaves(texts, doc_ids, metadatas)
        yield from self._grow(self._new_leaf_ids, 0)

    def _room(self, parent: TreeNode) -> int:
        used = sum(self.count(self.nodes[c].summary) for c in parent.children)
        return self.config.max_cluster_tokens - used

    def _insert_steps(self, texts: list[str], doc_ids: list, metadatas: list) -> _Steps:
        top = self.n_layers - 1
        yield from self._add_leaves(texts, doc_ids, metadatas)
        if top <= 0:  # no summary layers yet: build them over all leaves (unchanged calls hit the cache)
            yield from self._grow([n.id for n in self.leaves()], 0)
            return
        new, changed = self._new_leaf_ids, []
        for layer in range(top):
            parents = [n.id for n in self.layer(layer + 1)]
            up = self.parents()
            touched = sorted({p for c in changed for p in up.get(c, [])})
            orphans = []
            if new:
                sims = self._summary_matrix(new) @ self._summary_matrix(parents).T
                room = {p: self._room(self.nodes[p]) for p in parents}
                for row, nid in enumerate(new):
                    need = self.count(self.nodes[nid].summary)
                    for col in np.argsort(-sims[row], kind="stable"):
                        p = parents[int(col)]
                        if room[p] >= need:
                            self.nodes[p].children += (nid,)
                            room[p] -= need
                            touched = sorted({*touched, p})
                            break
                    else:
                        orphans.append(nid)
            clusters = self._cluster(orphans) if len(orphans) > 1 else [[o] for o in orphans]
            inputs = [self._cluster_input(self.nodes[p].children) for p in touched]
            results = yield inputs + [self._cluster_input(c) for c in clusters]
            for p, result in zip(touched, results, strict=False):
                self._apply(self.nodes[p], result)
            created = []
            for members, result in zip(clusters, results[len(touched) :], strict=True):
                node = self._new_node(layer=layer + 1, summary="", children=tuple(members))
                self._apply(node, result)
                created.append(node.id)
            self._last_report.nodes_resummarised += len(touched)
            self._last_report.nodes_added += len(created)
            self._embed([*touched, *created])
            new, changed = created, touched

    # ------------------------------------------------------------------------------------------------ drivers

    def _check_writer(self) -> None:
        """Fail before any work when the tree has no way to write summaries."""
        if self.config.summariser == "llm" and self.chat_model is None:
            raise ValueError(
                "this tree writes its summaries with an LLM (config.summariser='llm') but has no chat model: pass "
                "chat_model=... (to SurpriseTree or load_tree), or build a new tree with summariser='extractive'"
            )

    def _run(self, steps: _Steps) -> BuildReport:
        self._check_writer()
        self._last_report = BuildReport()
        saved = self._snapshot()
        try:
            request = next(steps)
            while True:
                request = steps.send(self._summarise(request) if request else [])
        except StopIteration:
            pass
        except BaseException:
            self._restore(saved)
            raise
        self.report.add(self._last_report)
        return self._last_report

    async def _arun(self, steps: _Steps) -> BuildReport:
        self._check_writer()
        self._last_report = BuildReport()
        saved = self._snapshot()
        try:
            request = next(steps)
            while True:
                request = steps.send(await self._asummarise(request) if request else [])
        except StopIteration:
            pass
        except BaseException:  # also a cancelled task: the tree must not keep half an insert
            self._restore(saved)
            raise
        self.report.add(self._last_report)
        return self._last_report

    def _snapshot(self) -> tuple[dict[int, TreeNode], dict[tuple[int, str], np.ndarray], int]:
        """What a build or insert may change (node copies; vectors are replaced, never written in place)."""
        nodes = {i: replace(n, metadata=dict(n.metadata)) for i, n in self.nodes.items()}
        return nodes, dict(self.vectors), self._next_id

    def _restore(self, saved: tuple[dict[int, TreeNode], dict[tuple[int, str], np.ndarray], int]) -> None:
        """Undo a failed build or insert (an embedder or model error half-way): the tree is as it was before;
        summaries already made stay in the cache, so a retry does not pay for them again."""
        self.nodes, self.vectors, self._next_id = saved
        self._matrix, self._lengths, self._new_leaf_ids = None, {}, []

    def build(
        self,
        texts: Sequence[str],
        *,
        doc_ids: Sequence[str] | None = None,
        metadatas: Sequence[Mapping[str, Any]] | None = None,
    ) -> BuildReport:
        """Build the tree from ``texts`` (one document each); returns what this build did.

        Safe inside a running event loop (calls run in threads); use :meth:`abuild` from async code.
        """
        return self._run(self._build_steps(*_check_texts(texts, doc_ids, metadatas)))

    async def abuild(
        self,
        texts: Sequence[str],
        *,
        doc_ids: Sequence[str] | None = None,
        metadatas: Sequence[Mapping[str, Any]] | None = None,
    ) -> BuildReport:
        """Async :meth:`build`: summary calls go through ``ainvoke``, at most ``max_concurrency`` at a time."""
        return await self._arun(self._build_steps(*_check_texts(texts, doc_ids, metadatas)))

    def insert(
        self,
        texts: Sequence[str],
        *,
        doc_ids: Sequence[str] | None = None,
        metadatas: Sequence[Mapping[str, Any]] | None = None,
    ) -> BuildReport:
        """Add documents to a built tree, re-summarising only the branches they join.

        Each new node joins the most similar parent (summary cosine) that still has room under
        ``max_cluster_tokens``; nodes that fit nowhere are clustered into new parents. The parents that gained
        a child, and their ancestors, get new summaries; the rest of the tree is untouched. A tree that has no
        summary layer yet gets them built over all leaves. All or nothing: when the embedder (or anything else)
        fails half-way, the tree is restored to what it was, and a retry reuses the cached summaries.
        """
        return self._run(self._insert_steps(*_check_texts(texts, doc_ids, metadatas)))

    async def ainsert(
        self,
        texts: Sequence[str],
        *,
        doc_ids: Sequence[str] | None = None,
        metadatas: Sequence[Mapping[str, Any]] | None = None,
    ) -> BuildReport:
        """Async :meth:`insert`."""
        return await self._arun(self._insert_steps(*_check_texts(texts, doc_ids, metadatas)))

    @classmethod
    def from_texts(
        cls, texts: Sequence[str], chat_model: Any, embedder: Embedder | None = None, **kwargs: Any
    ) -> SurpriseTree:
        """Make a tree (``kwargs`` as in the constructor) and build it from ``texts``."""
        tree = cls(chat_model, embedder, **kwargs)
        tree.build(texts)
        return tree

    # ------------------------------------------------------------------------------------------------ retrieval

    def _entries(self) -> tuple[list[tuple[int, str]], np.ndarray]:
        if self._matrix is None:
            keys = sorted(self.vectors)
            matrix = np.stack([self.vectors[k] for k in keys]) if keys else np.zeros((0, 1), np.float32)
            self._matrix = (keys, matrix)
            self._relations = {}
        return self._matrix

    def _query_vector(self, query: str, dim: int) -> np.ndarray:
        q = embed_query(self.embedder, query)
        if q.shape[0] != dim:
            raise ValueError(
                f"the embedder gives {q.shape[0]}-d vectors but the tree was built with {dim}-d ones: "
                "load the tree with the embedder it was built with"
            )
        norm = float(np.linalg.norm(q))
        return q / norm if norm > 0 else q

    def retrieve(
        self,
        query: str,
        *,
        k: int | None = 5,
        budget_tokens: int | None = None,
        mode: Literal["collapsed", "traversal"] = "collapsed",
        fields: Sequence[str] = FIELDS,
        width: int = 3,
        relation: TreeRelation | None = None,
        alpha: float = 0.5,
    ) -> list[TreeHit]:
        """The best node texts for ``query``, best first: at most ``k`` and within ``budget_tokens`` in total.

        ``mode="collapsed"`` scores every embedded text of every node (RAPTOR's collapsed tree).
        ``mode="traversal"`` starts at the roots, keeps the ``width`` best nodes of each level and descends into
        their children; the texts of the nodes it kept are then ranked. ``fields`` limits which texts count.
        ``relation``: FragRel over the tree (:class:`TreeRelation`): each candidate text scores
        ``cosine + alpha * s_env``, the environment taken over the candidate texts (those ``fields`` and ``mode``
        allow); :attr:`TreeHit.score` is then that relation-aware score.
        """
        if not isinstance(query, str):
            raise TypeError(f"query must be str, got {type(query).__name__}")
        k = check_k(k)
        budget_tokens = check_k(budget_tokens, "budget_tokens")
        if k is None and budget_tokens is None:
            raise ValueError("give k or budget_tokens (or both) to bound the result")
        wanted = set(check_search(mode, fields))
        if relation is not None and not isinstance(relation, TreeRelation):
            raise TypeError(f"relation must be a TreeRelation or None, got {type(relation).__name__}")
        alpha = check_alpha(alpha)
        keys, matrix = self._entries()
        if not keys:
            return []
        scores = matrix @ self._query_vector(query, matrix.shape[1])
        allowed = np.array([f in wanted for _, f in keys])
        if mode == "traversal":
            allowed &= np.isin([i for i, _ in keys], sorted(self._traverse(keys, scores, width)))
        idx = np.flatnonzero(allowed)
        candidate = scores[idx].astype(np.float64)
        if relation is not None and alpha > 0 and idx.size > 1:
            weights = self._relation_weights(relation)[idx][:, idx]
            candidate = relation_aware_scores(candidate, weights, alpha)
        lengths = [self._length(keys[i]) for i in idx] if budget_tokens else None
        chosen = select(candidate, k=k, budget=budget_tokens, lengths=lengths)
        out = []
        for j in chosen:
            node_id, name = keys[idx[j]]
            node = self.nodes[node_id]
            out.append(TreeHit(node, name, node.field_text(name), float(candidate[j])))
        return out

    def _relation_weights(self, relation: TreeRelation) -> Any:
        """The relation's weights over every embedded text, cached until the tree changes."""
        keys, _ = self._entries()
        cached = self._relations.get(relation)
        if cached is None:
            cached = self._relations[relation] = relation.weights(self, keys)
        return cached

    def _length(self, key: tuple[int, str]) -> int:
        if key not in self._lengths:
            self._lengths[key] = self.count(self.nodes[key[0]].field_text(key[1]))
        return self._lengths[key]

    def _traverse(self, keys: list[tuple[int, str]], scores: np.ndarray, width: int) -> set[int]:
        check_positive_int(width, "width")
        best: dict[int, float] = {}
        for (node_id, _), s in zip(keys, scores, strict=True):
            best[node_id] = max(best.get(node_id, -np.inf), float(s))
        kept: set[int] = set()
        frontier = sorted(n.id for n in self.roots())
        while frontier:
            ranked = sorted(frontier, key=lambda i: (-best.get(i, -np.inf), i))[:width]
            kept.update(ranked)
            frontier = sorted({c for i in ranked for c in self.nodes[i].children} - kept)
        return kept

    # ------------------------------------------------------------------------------------------------ persistence

    def to_state(self) -> dict[str, Any]:
        """Everything but the models, as JSON-compatible data (vectors as lists of floats)."""
        return {
            "format": "fragrel-surprise-tree",
            "version": 1,
            "config": asdict(self.config),
            "next_id": self._next_id,
            "nodes": [{**asdict(n), "children": list(n.children)} for n in self.nodes.values()],
            "vectors": [[i, f, v.tolist()] for (i, f), v in sorted(self.vectors.items())],
            "cache": {k: asdict(v) for k, v in sorted(self.summary_cache.items())},
        }

    @classmethod
    def from_state(
        cls, state: Mapping[str, Any], chat_model: Any = None, embedder: Embedder | None = None, **kwargs: Any
    ) -> SurpriseTree:
        """Rebuild a tree from :meth:`to_state` data; ``kwargs`` are constructor options (not config fields).

        The data is validated first (see :func:`check_state`): a tampered or corrupt state raises a ValueError
        naming the problem, never a numpy/json error, and never loads a tree that a later insert would damage.
        """
        return cls._from_checked(check_state(state), chat_model, embedder, **kwargs)

    @classmethod
    def _from_checked(
        cls, parts: tuple, chat_model: Any = None, embedder: Embedder | None = None, **kwargs: Any
    ) -> SurpriseTree:
        """A tree from :func:`check_state`'s parts."""
        config, nodes, vectors, cache, next_id = parts
        tree = cls(chat_model, embedder, config=config, **kwargs)
        tree.nodes = {n.id: n for n in nodes}
        tree.vectors = vectors
        tree.summary_cache = cache
        tree._next_id = next_id
        return tree
