"""FragRelIndex: a corpus of fragments retrieved by relation-aware score (framework-free)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .._validation import check_query, check_text, check_type
from ..models.embedder import Embedder, check_embeddings
from .fragments import Fragment, ScoredFragment
from .relation_aware import check_alpha, check_scores, check_top_m, fragrel_scores
from .relations import ContextRelation, FragmentLayout, Relation
from .saved_index import load_index, save_index
from .scorers import DenseScorer, Scorer, ScorerName, check_scorer, make_scorer
from .selection import check_k, order_by_position, select
from .splitters import split_turns, split_words
from .windows import check_window_words, check_windows, embed_windows, fragment_vectors, window_words_for

__all__ = ["FragRelIndex"]

_DEFAULT_K = 5


def _check_fragments(fragments: Sequence[Fragment]) -> list[Fragment]:
    fragments = list(fragments)
    if not fragments:
        raise ValueError("the corpus is empty: give at least one non-empty text or fragment")
    seen: set[tuple[str, int]] = set()
    for i, f in enumerate(fragments):
        check_type(f, Fragment, f"fragments[{i}] must be a Fragment")
        check_text(f.text, f"fragments[{i}].text")
        if (f.doc_id, f.position) in seen:
            raise ValueError(
                f"fragments[{i}] repeats doc_id={f.doc_id!r} position={f.position}: "
                "positions must be unique within a document"
            )
        seen.add((f.doc_id, f.position))
    return fragments


class FragRelIndex:
    """Relation-aware retrieval over a fixed corpus: ``s_rel = s_ind + alpha * s_env`` (FragRel eq. 9-10).

    ``scorer`` picks the independent score: ``"dense"`` (cosine of ``embedder`` embeddings), ``"bm25"``,
    ``"hybrid"`` (0.5 min-max BM25 + 0.5 min-max dense) or any callable ``query -> scores``.
    ``embedder=None`` means the embedded offline all-MiniLM-L6-v2 (loaded only when needed).

    A fragment longer than the embedder's input window is embedded in sub-windows of ``window_words`` words
    and scores the best cosine among them (so no text is cut off); ``"auto"`` (default) sizes the windows from
    the window the embedder exposes (``max_input_tokens``, ``max_seq_length``, ``client.max_seq_length``; 152
    words for all-MiniLM-L6-v2's 256 word pieces) and keeps fragments whole when it exposes none; ``None``
    embeds every fragment whole. Relations that read embeddings get one vector per fragment: the normalised
    mean of its window vectors. ``top_m=m`` lets only the ``m`` best fragments of a query lend support to their
    related fragments (:func:`~fragrel_integrations.core.relation_aware.top_m_excess`; None: all, as in the paper).
    :meth:`save` and :meth:`load` keep an index (embeddings included) in SQLite.

    >>> index = FragRelIndex.from_fragments(["a cat", "sat on", "the mat"], scorer="bm25")
    >>> [h.fragment.text for h in index.retrieve("cat", k=2)]
    ['a cat', 'sat on']
    """

    def __init__(
        self,
        fragments: Sequence[Fragment],
        *,
        embedder: Embedder | None = None,
        relation: Relation | None = None,
        alpha: float = 0.5,
        scorer: ScorerName | Scorer = "dense",
        embeddings: np.ndarray | None = None,
        window_words: int | Literal["auto"] | None = "auto",
        window_embeddings: tuple[np.ndarray, np.ndarray] | None = None,
        batch_size: int = 64,
        show_progress: bool = True,
        top_m: int | None = None,
    ) -> None:
        self.fragments = _check_fragments(fragments)
        self.alpha = check_alpha(alpha)
        self.top_m = check_top_m(top_m)
        self.relation = ContextRelation(0.3) if relation is None else relation
        if not isinstance(self.relation, Relation):
            raise TypeError(f"relation must be a Relation (e.g. ContextRelation(0.3)), got {relation!r}")
        check_scorer(scorer)
        if embeddings is not None and window_embeddings is not None:
            raise ValueError("pass embeddings (one row per fragment) or window_embeddings, not both")
        window_words = window_words if window_words == "auto" else check_window_words(window_words)
        needs_embeddings = scorer in ("dense", "hybrid") or self.relation.needs_embeddings
        self._embedder = embedder
        self.scorer_name: str | None = scorer if isinstance(scorer, str) else None
        self.embeddings: np.ndarray | None = None
        #: Sub-window vectors and each fragment's first window (None when nothing was embedded).
        self.window_embeddings: np.ndarray | None = None
        self.window_offsets: np.ndarray | None = None
        self.window_words: int | None = None
        #: The JSON metadata of the file this index was loaded from ({} for a new index).
        self.saved_metadata: dict[str, Any] = {}
        if embeddings is not None:
            self.embeddings = check_embeddings(embeddings, len(self.fragments), source="embeddings")
        elif window_embeddings is not None:
            self._set_windows(*window_embeddings)
            self.window_words = None if window_words == "auto" else window_words
        elif needs_embeddings:
            self.window_words = window_words_for(self.embedder) if window_words == "auto" else window_words
            vectors, offsets = embed_windows(
                self.embedder,
                [f.text for f in self.fragments],
                window_words=self.window_words,
                batch_size=batch_size,
                show_progress=show_progress,
            )
            self._set_windows(vectors, offsets)
        self.scorer: Scorer = make_scorer(scorer, [f.text for f in self.fragments], dense=self._dense_scorer)
        self.layout = FragmentLayout.from_fragments(self.fragments, self.embeddings)
        self._prepared = self.relation.prepare(self.layout)
        self._lengths = np.fromiter((f.n_words for f in self.fragments), np.int64, len(self.fragments))

    def _set_windows(self, vectors: np.ndarray, offsets: np.ndarray) -> None:
        if not (isinstance(vectors, np.ndarray) and vectors.ndim == 2):
            raise ValueError("window_embeddings must be (vectors (W, dim) array, offsets (N,) ints)")
        vectors = check_embeddings(vectors, vectors.shape[0], source="window embeddings")
        self.window_offsets = check_windows(vectors, offsets, len(self.fragments))
        self.window_embeddings = vectors
        self.embeddings = fragment_vectors(vectors, self.window_offsets)

    # ----------------------------------------------------------------------------------------- builders

    @classmethod
    def from_texts(
        cls,
        texts: Sequence[str],
        *,
        fragment_words: int = 500,
        stride: int | None = None,
        doc_ids: Sequence[str] | None = None,
        metadatas: Sequence[Mapping[str, Any]] | None = None,
        **kwargs: Any,
    ) -> FragRelIndex:
        """Split each text into windows of ``fragment_words`` words; one document per text."""
        if isinstance(texts, str):
            raise TypeError("texts must be a list of strings; wrap a single text as [text]")
        texts = list(texts)
        doc_ids = [str(i) for i in range(len(texts))] if doc_ids is None else [str(d) for d in doc_ids]
        if len(doc_ids) != len(texts) or (metadatas is not None and len(metadatas) != len(texts)):
            raise ValueError("doc_ids and metadatas must have one entry per text")
        if len(set(doc_ids)) != len(doc_ids):
            raise ValueError("doc_ids must be unique, one per text")
        metas = [None] * len(texts) if metadatas is None else metadatas
        fragments: list[Fragment] = []
        for text, doc_id, meta in zip(texts, doc_ids, metas, strict=True):
            fragments += split_words(text, fragment_words=fragment_words, stride=stride, doc_id=doc_id, metadata=meta)
        return cls([f for f in fragments if f.text], **kwargs)

    @classmethod
    def from_fragments(
        cls, fragments: Sequence[str | Fragment], *, doc_ids: Sequence[str] | None = None, **kwargs: Any
    ) -> FragRelIndex:
        """One fragment per item. Strings get ``doc_ids[i]`` (default ``"0"``) and position = order within it;
        :class:`Fragment` items keep their own document and position."""
        if isinstance(fragments, str):
            raise TypeError("fragments must be a list; wrap a single text as [text]")
        fragments = list(fragments)
        if doc_ids is not None and len(doc_ids) != len(fragments):
            raise ValueError(f"doc_ids has {len(doc_ids)} entries for {len(fragments)} fragments")
        counters: dict[str, int] = {}
        out: list[Fragment] = []
        for i, item in enumerate(fragments):
            if isinstance(item, Fragment):
                out.append(item)
                continue
            check_type(item, str, f"fragments[{i}] must be str or Fragment")
            doc = "0" if doc_ids is None else str(doc_ids[i])
            counters[doc] = counters.get(doc, -1) + 1
            out.append(Fragment(item, doc, counters[doc]))
        return cls(out, **kwargs)

    @classmethod
    def from_turns(cls, turns: Sequence[str | Mapping[str, Any]], *, doc_id: str = "0", **kwargs: Any) -> FragRelIndex:
        """One fragment per dialogue turn (pair with ``ContextRelation(0.8)`` and ``order="position"``)."""
        return cls(split_turns(turns, doc_id=doc_id), **kwargs)

    @classmethod
    def from_repository(cls, path: str | Path | None = None, **options: Any) -> FragRelIndex:
        """A code index over the repository at ``path`` (extra ``[code]``), built as this class: the one entry point
        that builds a code index (:func:`fragrel_integrations.core.code.from_repository` is its function form).
        ``options`` and behaviour are :func:`~.code.build.build_code_index`'s (it takes this class, so no import
        cycle)."""
        from .code.build import build_code_index

        return build_code_index(cls, path, **options)

    # ----------------------------------------------------------------------------------------- scoring

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            from ..models.local import default_embedder

            self._embedder = default_embedder()
        return self._embedder

    def _dense_scorer(self) -> DenseScorer:
        vectors = self.embeddings if self.window_embeddings is None else self.window_embeddings
        return DenseScorer(vectors, self.embedder, offsets=self.window_offsets)

    def scores(self, query: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(s_ind, s_env, s_rel)`` for every fragment, in corpus order."""
        check_type(query, str, "query must be str")
        s_ind = check_scores(self.scorer(query), "independent scores")
        if s_ind.shape[0] != len(self.fragments):
            raise ValueError(f"scorer returned {s_ind.shape[0]} scores for {len(self.fragments)} fragments")
        s_env, s_rel = fragrel_scores(s_ind, self._prepared.sums, self.alpha, top_m=self.top_m)
        return s_ind, s_env, s_rel

    def retrieve(
        self,
        query: str,
        *,
        k: int | None = None,
        budget_words: int | None = None,
        order: Literal["score", "position"] = "score",
    ) -> list[ScoredFragment]:
        """Top fragments by relation-aware score: ``k`` of them (default 5 without a budget) and/or as many as
        fit in ``budget_words``. ``order="position"`` returns them in document order (e.g. turns by time). An
        empty or blank ``query`` is a ValueError (it would rank by nothing but the order of the fragments)."""
        check_query(query)
        k, budget_words = check_k(k), check_k(budget_words, "budget_words")
        if order not in ("score", "position"):
            raise ValueError(f"order must be 'score' or 'position', got {order!r}")
        if k is None and budget_words is None:
            k = _DEFAULT_K
        s_ind, s_env, s_rel = self.scores(query)
        picked = select(s_rel, k=k, budget=budget_words, lengths=self._lengths)
        if order == "position":
            picked = order_by_position(self.fragments, picked)
        return [ScoredFragment(self.fragments[i], float(s_rel[i]), float(s_ind[i]), float(s_env[i])) for i in picked]

    # ----------------------------------------------------------------------------------------- persistence

    def save(self, path: str | Path, *, metadata: Mapping[str, Any] | None = None) -> Path:
        """Write the index to the SQLite file ``path`` (fragments, window embeddings as float32, settings and
        the JSON ``metadata``), atomically; see :func:`~fragrel_integrations.core.saved_index.save_index`."""
        return save_index(self, path, metadata=metadata)

    @classmethod
    def load(cls, path: str | Path, **options: Any) -> FragRelIndex:
        """Read an index written by :meth:`save`, without re-embedding. ``options`` (``embedder``, ``relation``,
        ``alpha``, ``scorer``, ``expect``, ``top_m``) are :func:`~fragrel_integrations.core.saved_index.load_index`'s:
        settings not given keep their saved values; the embedder must be the model the index was built with
        (``None``: the embedded default); ``expect`` lists metadata values the file must hold (a stale cache is
        refused). Bad files raise a ValueError naming the file."""
        return load_index(cls, path, **options)

    def __len__(self) -> int:
        return len(self.fragments)

    def __repr__(self) -> str:
        return f"FragRelIndex({len(self)} fragments, relation={self.relation!r}, alpha={self.alpha})"
