"""FragRel over a surprise tree: node texts related by the tree's structure and by position.

Retrieval scores every embedded text of the tree (a leaf chunk, a summary, a surprise list). With a
:class:`TreeRelation` each text's score becomes FragRel's ``s_ind + alpha * s_env`` (paper eq. 9-10), where the
environment averages the scores of the texts related to it:

* texts of one node (its chunk, summary and surprise facts) - ``w_node``;
* texts of a node and of its parents / children - ``w_tree`` (a summary is related to what it summarises);
* leaf texts of one document at chunk distance ``d`` - ``w_pos ** d`` (FragRel's context relation; pairs whose
  weight would fall below ``min_weight`` are left out, so the matrix stays sparse).

>>> from fragrel_integrations.core.tree import SurpriseTree
>>> from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel
>>> llm = ScriptedChatModel(lambda m: "(Summary): Pets.\\n(Surprise): None")
>>> tree = SurpriseTree(llm, HashingEmbedder(dim=64), show_progress=False, chunk_tokens=8)
>>> _ = tree.build(["Cats purr at night. Dogs bark at the moon. Birds sing at dawn."])
>>> hits = tree.retrieve("dogs bark", k=2, relation=TreeRelation(), alpha=0.5)
>>> [(h.node.position, h.field) for h in hits]
[(1, 'text'), (1, 'summary')]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import scipy.sparse as sp

from ..relations import check_unit
from .tree_nodes import TreeNode

__all__ = ["TreeRelation"]


class _Tree(Protocol):
    """What :meth:`TreeRelation.weights` reads of a :class:`~.tree.SurpriseTree` (no import: no cycle)."""

    @property
    def nodes(self) -> Mapping[int, TreeNode]: ...


@dataclass(frozen=True)
class TreeRelation:
    """Relation weights between the texts of a :class:`SurpriseTree` (see the module docstring).

    ``w_pos`` defaults to FragRel's story setting (0.3); ``w_tree`` and ``w_node`` to 0.5 (untuned). A weight of 0
    switches that part off; all zeros is plain collapsed-tree retrieval.
    """

    w_tree: float = 0.5
    w_pos: float = 0.3
    w_node: float = 0.5
    min_weight: float = 1e-3

    def __post_init__(self) -> None:
        for name in ("w_tree", "w_pos", "w_node"):
            object.__setattr__(self, name, check_unit(getattr(self, name), name))
        floor = check_unit(self.min_weight, "min_weight")
        if floor <= 0.0:
            raise ValueError("min_weight must be > 0 (it bounds how far the position relation reaches)")
        object.__setattr__(self, "min_weight", floor)

    @property
    def max_distance(self) -> int:
        """The largest chunk distance whose weight ``w_pos ** d`` is still at least ``min_weight``."""
        if self.w_pos <= 0.0 or self.w_pos < self.min_weight:
            return 0
        if self.w_pos >= 1.0:
            return 1 << 30
        return math.floor(math.log(self.min_weight) / math.log(self.w_pos) + 1e-9)

    def weights(self, tree: _Tree, keys: Sequence[tuple[int, str]]) -> sp.csr_array:
        """The symmetric ``len(keys) x len(keys)`` weights of the texts ``keys`` (``(node_id, field)`` pairs)."""
        rows: list[int] = []
        cols: list[int] = []
        vals: list[float] = []
        by_node: dict[int, list[int]] = {}
        for i, (node_id, _) in enumerate(keys):
            by_node.setdefault(node_id, []).append(i)

        def link(a: list[int], b: list[int], w: float) -> None:
            for i in a:
                for j in b:
                    if i != j:
                        rows.extend((i, j))
                        cols.extend((j, i))
                        vals.extend((w, w))

        if self.w_node > 0:
            for entries in by_node.values():
                for x, i in enumerate(entries):
                    link([i], entries[x + 1 :], self.w_node)
        if self.w_tree > 0:
            for node_id, entries in by_node.items():
                for child in tree.nodes[node_id].children:
                    if child in by_node:
                        link(entries, by_node[child], self.w_tree)
        reach = self.max_distance
        if reach > 0:
            docs: dict[str, list[tuple[int, int]]] = {}
            for node_id in by_node:
                node = tree.nodes[node_id]
                if node.is_leaf:
                    docs.setdefault(node.doc_id, []).append((node.position, node_id))
            for leaves in docs.values():
                leaves.sort()
                for x, (pos, node_id) in enumerate(leaves):
                    for other_pos, other in leaves[x + 1 :]:
                        d = other_pos - pos
                        if d > reach:
                            break
                        if d > 0:
                            link(by_node[node_id], by_node[other], self.w_pos**d)
        n = len(keys)
        if not vals:
            return sp.csr_array((n, n), dtype=np.float64)
        return sp.coo_array((vals, (rows, cols)), shape=(n, n), dtype=np.float64).tocsr()
