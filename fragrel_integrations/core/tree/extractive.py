"""Model-free summaries and surprising facts for the surprise tree: sentence selection by embedding geometry.

No LLM: each input (a leaf chunk, or a cluster's member summaries) is split into sentences (and sentences into
clauses at ``;`` and ``:``, so a long 18th-century sentence is not one unit), the sentences are embedded with the
tree's embedder (unit vectors), and every sentence gets its **leave-one-out similarity**
``c_i = cos(x_i, mean_{j != i} x_j)``: how well the rest of the input predicts it.

* **Summary** = the most central sentences (highest ``c_i``; a sentence nearly identical to one already taken,
  cosine above ``redundancy``, is skipped) that fit in ``summary_tokens`` together, in source order; when none
  fits, the most central one cut to the budget (by characters for text without spaces). Summaries and surprise
  notes are also capped at 16 characters per token of their budgets, as the LLM summariser's are.
* **Surprise** = the sentences that are outliers by novelty ``n_i = 1 - c_i`` among at least ``min_sentences``
  sentences: robust score ``z_i = (n_i - median(n)) / max(1.4826 * MAD(n), min_scale) >= z`` (the modified
  z-score of Iglewicz and Hoaglin), most novel first until ``surprise_tokens`` are used (a single surprising
  sentence longer than the budget is cut to it), in source order. ILM-TR's prompt defines a surprising sentence
  as one "not related to most of the other content"; ``z_i`` measures exactly that and can be checked by hand.
  Sentences with fewer than ``min_words`` words ("Why?") never count as surprising: their embeddings are noise.
  Surprise sentences are left out of the summary (unless nothing else is left), as the paper's summary is "the
  main text" and the surprise what "differs from" it.

Defaults (``z = 1.0``, ``min_sentences = 3``, ``min_words = 4``) were set on dev data only: Robinson Crusoe cut
into 200-token chunks with 20 planted sentences (the NIAH default needles and bAbI qa1 statements), where the
planted sentence was the first surprise of its chunk in 15 of 18 chunks (the other two sat in 2-sentence
chunks), and 45 % of chunks without a planted sentence got a surprise note (z >= 2.5 kept 6 of 18 planted ones).

Vectors: every unit is embedded once (:class:`SentenceCache`), a surprise note or summary that is one unit
reuses that vector, and a leaf chunk is always embedded as it is (the vector plain chunk retrieval uses). With
``mean_vectors=True`` a summary or note of several units gets the normalised mean of their vectors instead of
an embedding of the joined text (cheaper; measured to cost retrieval recall, see :class:`ExtractiveSummariser`).

Cost: the sentences of a text hold as many tokens as its chunks, and short texts embed less efficiently, so
embedding them once is most of a build: a few times the cost of embedding the leaf chunks alone (the floor of any
dense index) and a small fraction of the LLM tree's (``benchmarks/results/tree_both.md``). Sentence vectors pooled
from the chunk's own pass, or from the embedder's static word-piece vectors, would be nearly free but made fewer
needles surprise notes on the benchmark's haystacks.

The pure functions (:func:`leave_one_out_similarity`, :func:`central_sentences`, :func:`surprising_sentences`)
take arrays and return indices; :class:`ExtractiveSummariser` wraps them behind the LLM summariser's interface
(``summarise`` / ``asummarise`` returning :class:`~.summariser.SummaryResult` and a
:class:`~.summariser.BuildReport`, and a ``cache`` dict). Everything is deterministic (ties go to the earlier
sentence).

>>> import numpy as np
>>> x = np.array([[1, 0, 0], [0.9, 0.1, 0], [0.95, 0, 0.05], [0, 0, 1.0]])
>>> central_sentences(x, [5, 5, 5, 5], 5).tolist()
[2]
>>> surprising_sentences(x, [5, 5, 5, 5], 10, min_sentences=3).tolist()
[3]
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from ..._validation import check_min_int, check_positive_int, check_type
from ...models.embedder import CachedEmbedder, Embedder, embed_documents, normalise_rows
from ...models.tokens import estimate_tokens
from ..embedder_identity import embedder_id
from ..token_budget import cap_output, truncate_to_tokens
from .chunking import split_sentences
from .summariser import BuildReport, SummaryResult

__all__ = [
    "EXTRACTIVE_VERSION",
    "ExtractiveSummariser",
    "SentenceCache",
    "central_sentences",
    "leave_one_out_similarity",
    "novelty_scores",
    "split_units",
    "surprising_sentences",
]

#: Bump when the selection rules change: it is part of the extractive summary cache key.
EXTRACTIVE_VERSION = "extractive-v2"

_CLAUSE = re.compile(r"(?<=[;:])\s+")

#: 1 / Phi^-1(3/4): scales the median absolute deviation to a standard deviation for normal data.
_MAD_TO_SD = 1.4826


def split_units(text: str) -> list[str]:
    """The selection units of ``text``: its sentences (:func:`~.chunking.split_sentences`), each cut further
    after ``;`` and ``:`` followed by whitespace.

    >>> split_units("I rose early; the sea was calm. Then: rain!")
    ['I rose early;', 'the sea was calm.', 'Then:', 'rain!']
    """
    return [u for s in split_sentences(text) for u in _CLAUSE.split(s) if u]


def _check_matrix(x: object) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"x must be a 2-d array (sentences x dimensions), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("x must be finite (no NaN or inf)")
    return arr


def _check_lengths(lengths: object, n: int, budget: object) -> np.ndarray:
    lens = np.asarray(lengths)
    if lens.shape != (n,) or (n and not np.issubdtype(lens.dtype, np.integer)) or np.any(lens < 0):
        raise ValueError(f"lengths must be {n} non-negative ints (token counts, one per sentence)")
    if isinstance(budget, bool) or not isinstance(budget, int | np.integer) or budget < 1:
        raise ValueError(f"budget must be a positive int (tokens), got {budget!r}")
    return lens.astype(np.int64)


def _check_min_sentences(value: object) -> None:
    check_min_int(value, "min_sentences", 2)


def _check_min_scale(value: float) -> None:
    if not value > 0:
        raise ValueError(f"min_scale must be > 0, got {value!r}")


def _check_redundancy(value: float) -> None:
    if not 0 < value <= 1:
        raise ValueError(f"redundancy must be in (0, 1], got {value!r}")


def _take(
    order: Iterable[int], lens: np.ndarray, budget: int, fits: Callable[[int, list[int], int], bool]
) -> np.ndarray:
    """Walk ``order`` and take each row for which ``fits(row, taken so far, budget left)``, until the budget
    (tokens, ``lens`` per row) is used up; the taken rows in ascending (source) order."""
    chosen: list[int] = []
    left = int(budget)
    for i in order:
        i = int(i)
        if not fits(i, chosen, left):
            continue
        chosen.append(i)
        left -= int(lens[i])
        if left <= 0:
            break
    return np.array(sorted(chosen), dtype=np.int64)


def leave_one_out_similarity(x: np.ndarray) -> np.ndarray:
    """``c_i = cos(x_i, mean of the other rows)`` for each row of ``x`` (rows are normalised first; a zero
    row scores 0). With one row there is nothing to compare with and its score is 1 (fully expected).

    >>> leave_one_out_similarity(np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])).round(3).tolist()
    [0.707, 0.707, 0.0]
    """
    arr = _check_matrix(x)
    n = arr.shape[0]
    if n == 0:
        return np.zeros(0)
    if n == 1:
        return np.ones(1)
    unit = arr / np.maximum(np.linalg.norm(arr, axis=1, keepdims=True), 1e-12)
    others = (unit.sum(axis=0, keepdims=True) - unit) / (n - 1)
    norms = np.linalg.norm(others, axis=1)
    dots = np.einsum("ij,ij->i", unit, others)
    return np.where(norms > 1e-12, dots / np.maximum(norms, 1e-12), 0.0)


def central_sentences(
    x: np.ndarray,
    lengths: Sequence[int] | np.ndarray,
    budget: int,
    *,
    exclude: Sequence[int] = (),
    redundancy: float = 0.95,
) -> np.ndarray:
    """Indices (ascending = source order) of the most central rows of ``x`` whose ``lengths`` fit in ``budget``.

    Rows are taken by leave-one-out similarity, highest first (ties: earlier row), skipping a row that does
    not fit in what is left of the budget, a row in ``exclude`` and a row whose cosine to a row already taken
    exceeds ``redundancy``. May return no index (every row longer than the budget, or all excluded).

    >>> central_sentences(np.eye(3)[[0, 0, 1]], [4, 4, 4], 8).tolist()  # the duplicate is skipped
    [0, 2]
    """
    arr = _check_matrix(x)
    lens = _check_lengths(lengths, arr.shape[0], budget)
    _check_redundancy(redundancy)
    skip = {int(i) for i in exclude}
    unit = arr / np.maximum(np.linalg.norm(arr, axis=1, keepdims=True), 1e-12)
    order = np.argsort(-leave_one_out_similarity(arr), kind="stable")

    def fits(i: int, chosen: list[int], left: int) -> bool:
        if i in skip or lens[i] > left:
            return False
        return not chosen or float(np.max(unit[chosen] @ unit[i])) <= redundancy

    return _take(order, lens, budget, fits)


def novelty_scores(x: np.ndarray, *, min_scale: float = 0.05) -> np.ndarray:
    """Robust z-scores of novelty ``1 - c_i``: ``(n_i - median) / max(1.4826 * MAD, min_scale)``."""
    novelty = 1.0 - leave_one_out_similarity(x)
    if novelty.size == 0:
        return novelty
    median = float(np.median(novelty))
    mad = float(np.median(np.abs(novelty - median)))
    return (novelty - median) / max(_MAD_TO_SD * mad, min_scale)


def surprising_sentences(
    x: np.ndarray,
    lengths: Sequence[int] | np.ndarray,
    budget: int,
    *,
    z: float = 1.0,
    min_sentences: int = 3,
    min_scale: float = 0.05,
    eligible: Sequence[bool] | np.ndarray | None = None,
) -> np.ndarray:
    """Indices (source order) of the rows of ``x`` that are novelty outliers (see the module docstring).

    A row counts when its robust novelty score is at least ``z`` (and ``eligible[i]`` when given); with fewer
    than ``min_sentences`` rows nothing is surprising (no "rest" to be surprised against). Outliers are taken
    most novel first while their ``lengths`` fit in ``budget``; the first outlier is always kept (the caller
    cuts its text when it is longer than the budget), so a long surprising sentence is never lost.
    """
    arr = _check_matrix(x)
    n = arr.shape[0]
    lens = _check_lengths(lengths, n, budget)
    _check_min_sentences(min_sentences)
    _check_min_scale(min_scale)
    ok = np.ones(n, dtype=bool) if eligible is None else np.asarray(eligible, dtype=bool)
    if ok.shape != (n,):
        raise ValueError(f"eligible must have one flag per row ({n}), got shape {ok.shape}")
    if n < min_sentences:
        return np.zeros(0, dtype=np.int64)
    scores = novelty_scores(arr, min_scale=min_scale)
    candidates = [int(i) for i in np.argsort(-scores, kind="stable") if scores[i] >= z and ok[i]]
    return _take(candidates, lens, budget, lambda i, chosen, left: not chosen or lens[i] <= left)


class SentenceCache(CachedEmbedder):
    """:class:`~fragrel_integrations.models.embedder.CachedEmbedder` that also knows the texts the extractive
    summariser composed of whole units: such a text's vector is the normalised mean of its units' (unit-length)
    vectors while ``compose`` is True (a unit not in the cache any more is embedded again, on its own). Any other
    text is embedded (and cached) as usual.

    A summary of several sentences is otherwise embedded once more, though each of its sentences already was;
    composing saved 14-22 % of an extractive tree's build CPU time on the needle benchmark and lowered
    recall of retrieval over chunks and summaries (``benchmarks/results/tree_extractive_vectors.md``).

    >>> class Echo:
    ...     calls = 0
    ...     def embed_documents(self, texts):
    ...         Echo.calls += len(texts)
    ...         return [[1.0, 0.0] if t.startswith("A") else [0.0, 1.0] for t in texts]
    ...     def embed_query(self, text):
    ...         return [1.0, 0.0]
    >>> cache = SentenceCache(Echo())
    >>> _ = cache.embed_documents(["A x.", "B y."]); cache.remember("A x. B y.")
    >>> [round(float(v), 3) for v in cache.embed_documents(["A x. B y."])[0]], Echo.calls
    ([0.707, 0.707], 2)
    """

    def __init__(self, embedder: Embedder, maxsize: int = 20_000, *, compose: bool = True) -> None:
        super().__init__(embedder, maxsize=maxsize)
        if not isinstance(compose, bool):
            raise TypeError(f"compose must be True or False, got {compose!r}")
        self.compose = compose
        self._parts: dict[str, tuple[str, ...]] = {}

    def remember(self, text: str) -> None:
        """Record ``text`` as composed of its units (:func:`split_units`) when it has several and is their
        join (at most ``maxsize`` such texts are kept, oldest dropped). Its vector is then a function of the
        text alone: the same whether the summary was just selected or came from the summary cache."""
        units = split_units(text)
        if len(units) > 1 and " ".join(units) == text:
            with self._lock:
                self._parts[text] = tuple(units)
                while len(self._parts) > self.maxsize:
                    del self._parts[next(iter(self._parts))]

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        with self._lock:
            plan = [self._parts.get(t) if self.compose else None for t in texts]
        if not any(plan):
            return super().embed_documents(texts)
        needed = list(
            dict.fromkeys([t for t, p in zip(texts, plan, strict=True) if not p] + [u for p in plan if p for u in p])
        )
        found = dict(zip(needed, super().embed_documents(needed), strict=True))
        out = []
        for text, parts in zip(texts, plan, strict=True):
            if parts:
                mean = normalise_rows(np.stack([found[u] for u in parts])).mean(axis=0, keepdims=True)
                out.append(normalise_rows(mean)[0])
            else:
                out.append(found[text])
        return np.stack(out).astype(np.float32, copy=False)


class ExtractiveSummariser:
    """The tree's summariser without a model: picks sentences of the input (see the module docstring).

    Same interface as :class:`~.summariser.Summariser`: ``summarise(texts)`` / ``asummarise(texts)`` return one
    :class:`~.summariser.SummaryResult` per text (``parsed=True``, never ``failed``) and a
    :class:`~.summariser.BuildReport` (``llm_calls`` stays 0; ``cache_hits`` counts inputs seen before).
    Results are cached in ``cache`` by a SHA-256 of :data:`EXTRACTIVE_VERSION`, the embedder's id, the budgets,
    the selection settings and the text. Sentence vectors are cached in memory (a parent's input repeats
    sentences its children's summaries took, so they are embedded once).

    Args:
        embedder: embeds the sentences (use the tree's).
        summary_tokens, surprise_tokens: the budgets the LLM summariser gets.
        counter: text -> token count (default: the offline estimate).
        z, min_sentences, min_scale, min_words: the surprise criterion (module docstring).
        redundancy: cosine above which a sentence counts as a repeat of one already in the summary.
        mean_vectors: the vector of a summary or surprise note made of several whole sentences is the
            normalised mean of their vectors (:class:`SentenceCache`) instead of a new embedding of the text:
            14-22 % less CPU for a tree build, but on the needle benchmark retrieval over leaf chunks and
            summaries (no surprise notes) found 2 of 9 needles at k=5 instead of 4 of 9 (all fields: 9 of 9 either
            way), so it is off by default. On a tree: ``tree.summariser.cached_embedder.compose = True``.
    """

    def __init__(
        self,
        embedder: Embedder,
        *,
        summary_tokens: int = 300,
        surprise_tokens: int = 150,
        counter: Callable[[str], int] | None = None,
        z: float = 1.0,
        min_sentences: int = 3,
        min_scale: float = 0.05,
        min_words: int = 4,
        redundancy: float = 0.95,
        show_progress: bool = False,
        cache: dict[str, SummaryResult] | None = None,
        mean_vectors: bool = False,
    ) -> None:
        check_type(embedder, Embedder, "embedder must have embed_documents(texts) and embed_query(text)")
        for name, value in (("summary_tokens", summary_tokens), ("surprise_tokens", surprise_tokens)):
            check_positive_int(value, name)
        check_positive_int(min_words, "min_words")
        _check_min_sentences(min_sentences)
        for name, value in (("z", z), ("min_scale", min_scale)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not np.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        _check_min_scale(min_scale)
        _check_redundancy(redundancy)
        self.embedder = embedder
        #: ``embedder`` behind an in-memory cache (at most 20,000 texts, ~30 MB of 384-d vectors); the tree
        #: embeds its summaries and surprise notes through it too, so a note that is one sentence is not
        #: embedded twice and (with ``mean_vectors``) a summary of several sentences gets the mean of theirs.
        self.cached_embedder = SentenceCache(embedder, maxsize=20_000, compose=mean_vectors)
        self.summary_tokens = summary_tokens
        self.surprise_tokens = surprise_tokens
        self.count: Callable[[str], int] = counter or estimate_tokens
        self.z, self.min_sentences, self.min_scale = float(z), min_sentences, float(min_scale)
        self.min_words, self.redundancy = min_words, float(redundancy)
        self.show_progress = show_progress
        self.cache: dict[str, SummaryResult] = {} if cache is None else cache

    def _cache_key(self, text: str) -> str:
        settings = [self.summary_tokens, self.surprise_tokens, self.z, self.min_sentences, self.min_scale]
        payload = [EXTRACTIVE_VERSION, embedder_id(self.embedder), settings, self.min_words, self.redundancy, text]
        blob = json.dumps(payload, ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8", errors="surrogatepass")).hexdigest()

    def _select(self, sentences: list[str], vectors: np.ndarray, counts: dict[str, int]) -> SummaryResult:
        lengths = np.array([counts[s] for s in sentences], dtype=np.int64)
        eligible = np.array([len(s.split()) >= self.min_words for s in sentences])
        odd = surprising_sentences(
            vectors,
            lengths,
            self.surprise_tokens,
            z=self.z,
            min_sentences=self.min_sentences,
            min_scale=self.min_scale,
            eligible=eligible,
        )
        keep = central_sentences(vectors, lengths, self.summary_tokens, exclude=odd, redundancy=self.redundancy)
        if keep.size == 0:  # everything was surprising or too long: the most central sentences, cut to fit
            keep = central_sentences(vectors, lengths, self.summary_tokens, redundancy=self.redundancy)
        if keep.size == 0:
            best = int(np.argmax(leave_one_out_similarity(vectors)))
            summary = truncate_to_tokens(sentences[best], self.summary_tokens, self.count)  # by characters too
            summary = summary or sentences[best][:1]  # a first character that alone is over the budget
        else:
            summary = " ".join(sentences[i] for i in keep)
        surprise = truncate_to_tokens(" ".join(sentences[i] for i in odd), self.surprise_tokens, self.count)
        # the LLM summariser's caps, whatever the counter says (a counter that undercounts cannot pass 200k chars)
        summary, _ = cap_output(summary, self.summary_tokens)
        surprise, _ = cap_output(surprise, self.surprise_tokens)
        return SummaryResult(summary, surprise, True)

    def summarise(self, inputs: Sequence[str]) -> tuple[list[SummaryResult], BuildReport]:
        """One result per input (in order) and the report; the sentences of all new inputs are embedded in one
        batched pass."""
        inputs = list(inputs)
        for i, text in enumerate(inputs):
            check_type(text, str, f"inputs[{i}] must be str")
        keys = [self._cache_key(t) for t in inputs]
        todo: dict[str, int] = {}
        for i, k in enumerate(keys):
            if k not in self.cache:
                todo.setdefault(k, i)
        split = {k: split_units(inputs[i]) for k, i in todo.items()}
        flat = list(dict.fromkeys(s for sents in split.values() for s in sents))
        counts = {s: self.count(s) for s in flat}  # a tokenizer call per distinct sentence, not per use
        vectors: dict[str, np.ndarray] = {}
        if flat:
            # large batches: a sentence-transformers model sorts each call's texts by length (less padding)
            matrix = normalise_rows(
                embed_documents(self.cached_embedder, flat, batch_size=1024, show_progress=self.show_progress)
            )
            vectors = dict(zip(flat, matrix, strict=True))
        for k, sents in split.items():
            if not sents:  # blank input: nothing to pick
                self.cache[k] = SummaryResult("", "", True)
                continue
            self.cache[k] = self._select(sents, np.stack([vectors[s] for s in sents]), counts)
        report = BuildReport(cache_hits=len(inputs) - len(todo))
        results = [self.cache[k] for k in keys]
        for result in results:  # the tree embeds these next: from their sentences' vectors (SentenceCache)
            self.cached_embedder.remember(result.summary)
            self.cached_embedder.remember(result.surprise)
        return results, report

    async def asummarise(self, inputs: Sequence[str]) -> tuple[list[SummaryResult], BuildReport]:
        """Async :meth:`summarise` (the embedding work runs in a worker thread)."""
        return await asyncio.to_thread(self.summarise, list(inputs))

    def __repr__(self) -> str:
        return (
            f"ExtractiveSummariser(summary_tokens={self.summary_tokens}, surprise_tokens={self.surprise_tokens}, "
            f"z={self.z})"
        )
