"""Retrieval over a surprise tree: collapsed tree or tree traversal, optionally with FragRel over the tree
(:class:`TreeRetrieval`, a part of :class:`~.tree.SurpriseTree`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from ..._validation import check_positive_int, check_query, check_type
from ...models.embedder import embed_query
from ..relation_aware import check_alpha, relation_aware_scores
from ..selection import check_k, select
from .tree_nodes import FIELDS, TreeHit, TreeNode, check_search
from .tree_relation import TreeRelation

__all__ = ["TreeRetrieval"]


class TreeRetrieval:
    """:meth:`retrieve` and what it needs; the nodes and vectors live in :class:`~.tree.SurpriseTree`."""

    nodes: dict[int, TreeNode]
    vectors: dict[tuple[int, str], np.ndarray]

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
        check_query(query)  # str, and not empty or blank (ValueError)
        k = check_k(k)
        budget_tokens = check_k(budget_tokens, "budget_tokens")
        if k is None and budget_tokens is None:
            raise ValueError("give k or budget_tokens (or both) to bound the result")
        wanted = set(check_search(mode, fields))
        if relation is not None:
            check_type(relation, TreeRelation, "relation must be a TreeRelation or None")
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
