"""Independent scores ``s_ind`` of every fragment for a query: dense cosine, BM25 (bm25s), their hybrid, and for code
RepoCoder's Jaccard similarity of token sets (:class:`JaccardScorer`, chosen by :func:`code_scorer`)."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
import scipy.sparse as sp

from .._validation import check_type
from ..models.embedder import Embedder, embed_query, normalise_rows
from .windows import check_windows

__all__ = [
    "CODE_SCORER_NAMES",
    "SCORER_NAMES",
    "BM25Scorer",
    "CodeScorerName",
    "DenseScorer",
    "HybridScorer",
    "JaccardScorer",
    "Scorer",
    "ScorerName",
    "check_scorer",
    "code_scorer",
    "code_tokens",
    "cosine_similarities",
    "make_scorer",
    "minmax",
    "tokenize",
]

#: The independent scorers chosen by name (:func:`make_scorer`).
SCORER_NAMES = ("dense", "bm25", "hybrid")
ScorerName = Literal["dense", "bm25", "hybrid"]

#: The code index's scorers by name (:func:`code_scorer`).
CODE_SCORER_NAMES = ("jaccard", "bm25", "dense", "hybrid")
CodeScorerName = Literal["jaccard", "bm25", "dense", "hybrid"]

_TOKEN = re.compile(r"\w+", re.UNICODE)
_CODE_TOKEN = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*|\d+")

logger = logging.getLogger(__name__)


def tokenize(text: str, stopwords: frozenset[str] = frozenset()) -> list[str]:
    """Lower-cased word tokens without ``stopwords``.

    >>> tokenize("The Cat sat.", frozenset({"the"}))
    ['cat', 'sat']
    """
    return [t for t in _TOKEN.findall(text.lower()) if t not in stopwords]


def code_tokens(text: str) -> list[str]:
    """Identifier and number tokens of code (case kept: ``Foo`` and ``foo`` differ).

    >>> code_tokens("self.fetch(url, timeout=30)")
    ['self', 'fetch', 'url', 'timeout', '30']
    """
    return _CODE_TOKEN.findall(text)


def minmax(x: np.ndarray) -> np.ndarray:
    """Scale to [0, 1]; a constant vector maps to zeros.

    >>> minmax(np.array([2.0, 4.0, 3.0])).tolist()
    [0.0, 1.0, 0.5]
    """
    if x.size == 0:
        return np.zeros(0)
    lo, hi = float(x.min()), float(x.max())
    return (x - lo) / (hi - lo) if hi > lo else np.zeros_like(x, dtype=np.float64)


@runtime_checkable
class Scorer(Protocol):
    """``scorer(query) -> s_ind`` for every fragment of the corpus it was built on."""

    def __call__(self, query: str) -> np.ndarray: ...


class DenseScorer:
    """Cosine similarity between the query embedding and the (pre-computed) fragment embeddings.

    With ``offsets`` the rows of ``embeddings`` are sub-windows of the fragments (fragment ``i`` owns rows
    ``offsets[i]`` up to the next offset, see :func:`~fragrel_integrations.core.windows.embed_windows`) and a
    fragment scores the best cosine among its windows, so text past the embedder's input window still counts.

    >>> import numpy as np
    >>> class Q:
    ...     def embed_documents(self, texts): ...
    ...     def embed_query(self, text): return np.array([1.0, 0.0])
    >>> windows = np.array([[0.0, 1.0], [1.0, 0.0], [0.6, 0.8]])   # fragment 0: rows 0-1; fragment 1: row 2
    >>> DenseScorer(windows, Q(), offsets=[0, 2])("q").round(2).tolist()
    [1.0, 0.6]
    """

    def __init__(self, embeddings: np.ndarray, embedder: Embedder, *, offsets: Sequence[int] | None = None) -> None:
        self.embeddings = normalise_rows(embeddings)
        self.offsets = None
        if offsets is not None:
            n = len(offsets)
            off = check_windows(self.embeddings, np.asarray(offsets, dtype=np.int64), n)
            self.offsets = None if n == self.embeddings.shape[0] else off
        self.embedder = embedder

    def __call__(self, query: str) -> np.ndarray:
        q = embed_query(self.embedder, query)
        if q.shape[0] != self.embeddings.shape[1]:
            raise ValueError(
                f"query embedding has {q.shape[0]} dims but fragments have {self.embeddings.shape[1]}: "
                "use the same embedder for the corpus and the queries"
            )
        q = q / max(float(np.linalg.norm(q)), 1e-12)
        sims = (self.embeddings @ q).astype(np.float64)
        return sims if self.offsets is None else np.maximum.reduceat(sims, self.offsets)


class BM25Scorer:
    """Okapi BM25 (bm25s, Lucene variant) over word tokens, English stopwords removed by default."""

    def __init__(
        self, texts: Sequence[str], *, k1: float = 1.5, b: float = 0.75, stopwords: Sequence[str] | None = None
    ) -> None:
        import bm25s

        if stopwords is None:
            from bm25s.stopwords import STOPWORDS_EN

            stopwords = STOPWORDS_EN
        self.stopwords = frozenset(stopwords)
        self.n = len(texts)
        corpus = [tokenize(t, self.stopwords) for t in texts]
        self._bm25 = None  # a corpus without a single word token (punctuation, NUL bytes) scores 0 everywhere
        if any(corpus):
            self._bm25 = bm25s.BM25(k1=k1, b=b)
            self._bm25.index(corpus, show_progress=False)

    def __call__(self, query: str) -> np.ndarray:
        check_type(query, str, "query must be str")
        tokens = tokenize(query, self.stopwords)
        if not tokens or self._bm25 is None:
            return np.zeros(self.n)
        return np.asarray(self._bm25.get_scores(tokens), dtype=np.float64)


class HybridScorer:
    """Weighted sum of min-max-normalised scores of several scorers (default 0.5 BM25 + 0.5 dense).

    Min-max per query puts BM25 (unbounded) and cosine (-1..1) on one scale before adding them.
    """

    def __init__(self, parts: Sequence[tuple[Scorer, float]]) -> None:
        if not parts:
            raise ValueError("HybridScorer needs at least one (scorer, weight) pair")
        for scorer, weight in parts:
            if not callable(scorer):
                raise TypeError(f"hybrid parts must be (scorer, weight) pairs with a callable scorer, got {scorer!r}")
            if not float(weight) >= 0:
                raise ValueError(f"hybrid weights must be >= 0, got {weight}")
        self.parts = [(s, float(w)) for s, w in parts]

    def __call__(self, query: str) -> np.ndarray:
        return sum(w * minmax(np.asarray(s(query), dtype=np.float64)) for s, w in self.parts)


class JaccardScorer:
    """Jaccard similarity ``|Q & F| / |Q | F|`` between the token *sets* of the query and of each fragment.

    The sparse retriever of RepoCoder. Same protocol as the core scorers: ``scorer(query)`` returns one score per
    fragment, in corpus order.

    >>> scorer = JaccardScorer(["def add(a, b):", "return a + b"])
    >>> scorer("add(a, b)").round(3).tolist()
    [0.75, 0.5]
    """

    def __init__(self, texts: Sequence[str], *, tokenizer: Callable[[str], list[str]] = code_tokens) -> None:
        if isinstance(texts, str):
            raise TypeError("texts must be a list of strings; wrap a single text as [text]")
        if not callable(tokenizer):
            raise TypeError("tokenizer must be a callable text -> list of tokens")
        self.tokenizer = tokenizer
        self.vocab: dict[str, int] = {}
        rows, cols = [], []
        for i, text in enumerate(texts):
            check_type(text, str, f"texts[{i}] must be str")
            ids = {self.vocab.setdefault(t, len(self.vocab)) for t in tokenizer(text)}
            rows.extend([i] * len(ids))
            cols.extend(ids)
        self.n = len(texts)
        data = np.ones(len(rows), np.float64)
        self.matrix = sp.csr_array((data, (rows, cols)), shape=(self.n, max(len(self.vocab), 1)))
        self.sizes = np.asarray(self.matrix.sum(axis=1)).ravel()

    def __call__(self, query: str) -> np.ndarray:
        check_type(query, str, "query must be str")
        tokens = set(self.tokenizer(query))
        known = np.fromiter((self.vocab[t] for t in tokens if t in self.vocab), np.int64)
        q = np.zeros(self.matrix.shape[1])
        q[known] = 1.0
        inter = np.asarray(self.matrix @ q).ravel()
        union = self.sizes + len(tokens) - inter
        out = np.zeros(self.n)
        np.divide(inter, union, out=out, where=union > 0)
        return out


def cosine_similarities(matrix: np.ndarray, query: np.ndarray, norms: np.ndarray | None = None) -> np.ndarray:
    """Cosine of ``query`` with every row of ``matrix``, computed in the matrix's precision (float32 rows stay
    float32 until the division); ``norms`` are the rows' norms when already known. Zero vectors score 0.

    >>> cosine_similarities(np.array([[3.0, 4.0], [0.0, 0.0]]), np.array([1.0, 0.0])).tolist()
    [0.6, 0.0]
    """
    q = np.asarray(query, dtype=np.float64)
    if norms is None:
        norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix, dtype=np.float64))
    scale = np.maximum(np.asarray(norms, dtype=np.float64) * max(float(np.linalg.norm(q)), 1e-12), 1e-12)
    return (matrix @ q.astype(matrix.dtype)).astype(np.float64) / scale


def check_scorer(scorer: object, names: Sequence[str] = SCORER_NAMES, *, allow_callable: bool = True) -> None:
    """Raise ValueError unless ``scorer`` is one of ``names`` (or, with ``allow_callable``, a callable)."""
    if (isinstance(scorer, str) and scorer in names) or (allow_callable and callable(scorer)):
        return
    if allow_callable:
        listed = ", ".join(repr(n) for n in names[:-1])
        raise ValueError(f"scorer must be {listed}, {names[-1]!r} or a callable, got {scorer!r}")
    raise ValueError(f"scorer must be one of {list(names)}, got {scorer!r}")


def make_scorer(
    name: str | Scorer,
    texts: Sequence[str],
    *,
    dense: Callable[[], Scorer] | None = None,
    lexical: Callable[[], Scorer] | None = None,
    stopwords: Sequence[str] | None = None,
) -> Scorer:
    """The independent scorer named ``name`` over ``texts`` (the one factory of the index, the code index and SCM).

    ``"bm25"``: :class:`BM25Scorer` (``stopwords``; None: English); ``"dense"``: ``dense()``; ``"hybrid"``:
    :class:`HybridScorer` of 0.5 ``lexical()`` (default: that BM25) and 0.5 ``dense()``; a callable is returned
    as is. ``dense`` and ``lexical`` build their scorer only when the name needs it (no model is loaded for BM25).

    >>> make_scorer("bm25", ["a cat", "a dog"])("cat").round(3).tolist()
    [0.277, 0.0]
    """
    if callable(name):
        return name
    check_scorer(name)
    if name == "bm25":
        return BM25Scorer(texts, stopwords=stopwords)
    if dense is None:
        raise ValueError(f"scorer={name!r} needs embeddings and an embedder")
    if name == "dense":
        return dense()
    sparse = BM25Scorer(texts, stopwords=stopwords) if lexical is None else lexical()
    return HybridScorer([(sparse, 0.5), (dense(), 0.5)])


def code_scorer(
    name: CodeScorerName | Scorer, texts: list[str], *, embeddings: Any = None, embedder: Embedder | None = None
) -> Scorer:
    """The independent scorer for code fragments.

    ``"jaccard"`` (RepoCoder's sparse retriever), ``"bm25"`` (bm25s over ``\\w+`` tokens, no stopword list: in
    code, ``if``/``for``/``in`` are keywords), ``"dense"`` (cosine of ``embeddings``, needs ``embedder``),
    ``"hybrid"`` (0.5 min-max Jaccard + 0.5 min-max dense), or a callable ``query -> scores``.
    """
    if callable(name):
        return name
    check_scorer(name, CODE_SCORER_NAMES)
    if name == "jaccard":
        return JaccardScorer(texts)
    if name == "bm25" and not any(tokenize(t) for t in texts):
        logger.warning("no fragment holds a word token: every BM25 score is 0")
    if name in ("dense", "hybrid") and (embedder is None or embeddings is None):
        raise ValueError(f"scorer={name!r} needs an embedder (and the fragment embeddings)")
    return make_scorer(
        name, texts, dense=lambda: DenseScorer(embeddings, embedder), lexical=lambda: JaccardScorer(texts), stopwords=()
    )
