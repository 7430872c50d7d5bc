"""Building and growing a surprise tree: chunks become leaves, clustered summaries become parents, layer by
layer (:class:`TreeBuilding`, a part of :class:`~.tree.SurpriseTree`).

The steps are generators that yield the texts to summarise and receive the results, so the sync and async
drivers (:meth:`TreeBuilding.build` / :meth:`TreeBuilding.abuild`, and the inserts) share one code path.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import numpy as np

from ..._validation import check_type
from .chunking import chunk_text
from .clustering import cluster_embeddings
from .summariser import BuildReport, SummaryResult
from .tree_nodes import TreeConfig, TreeNode

__all__ = ["TreeBuilding"]

_Steps = Generator[list[str], list[SummaryResult], None]
#: ``doc_ids`` and ``metadatas`` of :meth:`TreeBuilding.build` and friends: one entry per text, or None.
_DocIds = Sequence[str] | None
_Metadatas = Sequence[Mapping[str, Any]] | None


def _check_texts(texts: object, doc_ids: object, metadatas: object) -> tuple[list[str], list[str], list[dict]]:
    if isinstance(texts, str) or not isinstance(texts, Iterable):
        raise TypeError("texts must be a list of strings (wrap a single text in a list)")
    texts = list(texts)
    for i, t in enumerate(texts):
        check_type(t, str, f"texts[{i}] must be str")
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


def _send(steps: _Steps, results: list[SummaryResult]) -> list[str] | None:
    """The next texts ``steps`` wants summarised after ``results``, or None when it is done."""
    try:
        return steps.send(results)
    except StopIteration:
        return None


class TreeBuilding:
    """Build, insert and their async twins; the tree's state (nodes, vectors, summariser) lives in
    :class:`~.tree.SurpriseTree`."""

    config: TreeConfig
    nodes: dict[int, TreeNode]
    vectors: dict[tuple[int, str], np.ndarray]
    report: BuildReport

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

    def _add_parents(self, clusters: list[list[int]], results: list[SummaryResult], layer: int) -> list[int]:
        """One node on ``layer`` per cluster, with its summary result; returns their ids."""
        ids = []
        for members, result in zip(clusters, results, strict=True):
            node = self._new_node(layer=layer, summary="", children=tuple(members))
            self._apply(node, result)
            ids.append(node.id)
        self._last_report.nodes_added += len(ids)
        return ids

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
            parents = self._add_parents(clusters, results, layer + 1)
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
            created = self._add_parents(clusters, results[len(touched) :], layer + 1)
            self._last_report.nodes_resummarised += len(touched)
            self._embed([*touched, *created])
            new, changed = created, touched

    # ------------------------------------------------------------------------------------------------ drivers

    @contextmanager
    def _all_or_nothing(self) -> Iterator[None]:
        """Run a build or insert on a fresh report: on any error (also a cancelled task) the tree is restored to
        what it was (summaries already made stay cached for a retry); on success the report is added to the tree's.
        """
        if self.config.summariser == "llm" and self.chat_model is None:  # fail before any work
            raise ValueError(
                "this tree writes its summaries with an LLM (config.summariser='llm') but has no chat model: pass "
                "chat_model=... (to SurpriseTree or load_tree), or build a new tree with summariser='extractive'"
            )
        self._last_report = BuildReport()
        # node copies; vectors are replaced, never written in place
        nodes = {i: replace(n, metadata=dict(n.metadata)) for i, n in self.nodes.items()}
        saved = nodes, dict(self.vectors), self._next_id
        try:
            yield
        except BaseException:
            self.nodes, self.vectors, self._next_id = saved
            self._matrix, self._lengths, self._new_leaf_ids = None, {}, []
            raise
        self.report.add(self._last_report)

    def _run(self, steps: _Steps) -> BuildReport:
        with self._all_or_nothing():
            request = next(steps, None)
            while request is not None:
                request = _send(steps, self._summarise(request) if request else [])
        return self._last_report

    async def _arun(self, steps: _Steps) -> BuildReport:
        with self._all_or_nothing():
            request = next(steps, None)
            while request is not None:
                request = _send(steps, await self._asummarise(request) if request else [])
        return self._last_report

    def build(self, texts: Sequence[str], *, doc_ids: _DocIds = None, metadatas: _Metadatas = None) -> BuildReport:
        """Build the tree from ``texts`` (one document each); returns what this build did.

        Safe inside a running event loop (calls run in threads); use :meth:`abuild` from async code.
        """
        return self._run(self._build_steps(*_check_texts(texts, doc_ids, metadatas)))

    async def abuild(
        self, texts: Sequence[str], *, doc_ids: _DocIds = None, metadatas: _Metadatas = None
    ) -> BuildReport:
        """Async :meth:`build`: summary calls go through ``ainvoke``, at most ``max_concurrency`` at a time."""
        return await self._arun(self._build_steps(*_check_texts(texts, doc_ids, metadatas)))

    def insert(self, texts: Sequence[str], *, doc_ids: _DocIds = None, metadatas: _Metadatas = None) -> BuildReport:
        """Add documents to a built tree, re-summarising only the branches they join.

        Each new node joins the most similar parent (summary cosine) that still has room under
        ``max_cluster_tokens``; nodes that fit nowhere are clustered into new parents. The parents that gained
        a child, and their ancestors, get new summaries; the rest of the tree is untouched. A tree that has no
        summary layer yet gets them built over all leaves. All or nothing: when the embedder (or anything else)
        fails half-way, the tree is restored to what it was, and a retry reuses the cached summaries.
        """
        return self._run(self._insert_steps(*_check_texts(texts, doc_ids, metadatas)))

    async def ainsert(
        self, texts: Sequence[str], *, doc_ids: _DocIds = None, metadatas: _Metadatas = None
    ) -> BuildReport:
        """Async :meth:`insert`."""
        return await self._arun(self._insert_steps(*_check_texts(texts, doc_ids, metadatas)))
