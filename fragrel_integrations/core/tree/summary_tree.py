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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, replace
from typing import Any

import numpy as np

from ..._validation import check_type
from ...models.chat import ChatModel
from ...models.convert import as_chat_model
from ...models.embedder import Embedder, embed_documents
from ...models.tokens import count_tokens
from ..embedder_identity import check_identity, embedder_identity
from ..windows import embedder_window_tokens
from .building import TreeBuilding
from .extractive import ExtractiveSummariser
from .retrieval import TreeRetrieval
from .state import MAX_METADATA_DEPTH, check_state
from .summariser import BuildReport, Summariser, SummaryResult
from .tree_nodes import FIELDS, SUMMARISERS, TreeConfig, TreeHit, TreeNode, check_search, fitted_chunk_tokens
from .tree_relation import TreeRelation

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


class SurpriseTree(TreeBuilding, TreeRetrieval):
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
        check_type(embedder, Embedder, "embedder must have embed_documents(texts) and embed_query(text)")
        self.embedder = embedder
        window = embedder_window_tokens(embedder)
        if self.config.chunk_tokens is None:  # fit the embedder (saved trees record the number)
            self.config = replace(self.config, chunk_tokens=fitted_chunk_tokens(window))
        elif window is not None and self.config.chunk_tokens > window:
            logger.warning(
                "chunk_tokens=%d but the embedder reads only %d tokens of a text: the end of every chunk is never "
                "embedded (needles there cannot be retrieved); use chunk_tokens <= %d (or leave it out: it then "
                "fits the embedder) or an embedder with a longer window",
                self.config.chunk_tokens,
                window,
                fitted_chunk_tokens(window),
            )
        self._counter = counter if counter is not None else self.chat_model
        if self.config.summariser is None:
            self.config = replace(self.config, summariser="llm" if self.chat_model is not None else "extractive")
        budgets = {"summary_tokens": self.config.summary_tokens, "surprise_tokens": self.config.surprise_tokens}
        options = {**budgets, "show_progress": show_progress, "counter": self.count}
        self.summariser: Summariser | ExtractiveSummariser
        self._text_embedder: Embedder = embedder
        if self.config.summariser == "extractive":
            self.summariser = ExtractiveSummariser(embedder, **options)
            self._text_embedder = self.summariser.cached_embedder
        else:
            self.summariser = Summariser(self.chat_model, max_concurrency=max_concurrency, **options)
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
        return self.layer(0)

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

    @classmethod
    def from_texts(
        cls, texts: Sequence[str], chat_model: Any, embedder: Embedder | None = None, **kwargs: Any
    ) -> SurpriseTree:
        """Make a tree (``kwargs`` as in the constructor) and build it from ``texts``."""
        tree = cls(chat_model, embedder, **kwargs)
        tree.build(texts)
        return tree

    # ------------------------------------------------------------------------------------------------ persistence

    def embedder_identity(self) -> dict[str, Any]:
        """The identity of :attr:`embedder` that a save records (see
        :func:`~fragrel_integrations.core.embedder_identity.embedder_identity`; computed once per embedder)."""
        cached = getattr(self, "_identity", None)
        if cached is None or cached[0] is not self.embedder:
            self._identity = cached = (self.embedder, embedder_identity(self.embedder))
        return cached[1]

    def to_state(self) -> dict[str, Any]:
        """Everything but the models, as JSON-compatible data (vectors as lists of floats), with the identity of
        the embedder that made the vectors (a load with another model is refused)."""
        return {
            "format": "fragrel-surprise-tree",
            "version": 1,
            "embedder": self.embedder_identity(),
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
        A state recorded with another embedder (model, settings or fingerprint) than ``embedder`` is refused.
        """
        return cls.from_checked_state(check_state(state), chat_model, embedder, where="the tree state", **kwargs)

    @classmethod
    def from_checked_state(
        cls, parts: tuple, chat_model: Any = None, embedder: Embedder | None = None, *, where: str, **kwargs: Any
    ) -> SurpriseTree:
        """A tree from the parts :func:`check_state` returned (for loaders that validate first, as
        :func:`~.persist.load_tree` does); ``where`` (e.g. the file) names the save in warnings and errors."""
        config, nodes, vectors, cache, next_id, identity = parts
        tree = cls(chat_model, embedder, config=config, **kwargs)
        if identity is None:
            logger.warning(
                "%s does not record the embedder it was built with (saved by an earlier fragrel-integrations): "
                "make sure embedder= is that model, and save the tree again to record it",
                where,
            )
        else:
            check_identity(identity, tree.embedder, where)
            tree._identity = (tree.embedder, identity)
        tree.nodes = {n.id: n for n in nodes}
        tree.vectors = vectors
        tree.summary_cache = cache
        tree._next_id = next_id
        return tree
