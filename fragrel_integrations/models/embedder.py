"""The Embedder protocol the core calls, the checks every embedder call goes through, and the vector cache."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
from tqdm.auto import tqdm

from .._validation import check_positive_int, check_text, check_type

__all__ = [
    "CachedEmbedder",
    "Embedder",
    "EmbedderProvider",
    "WrappedEmbedder",
    "check_embeddings",
    "embed_documents",
    "embed_query",
    "normalise_rows",
]


@runtime_checkable
class Embedder(Protocol):
    """Texts to vectors: ``embed_documents`` gives ``(len(texts), dim)``, ``embed_query`` ``(dim,)`` (LangChain's
    ``Embeddings`` fit as they are; :func:`~.convert.as_embedder` converts the others)."""

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray | list[list[float]]: ...

    def embed_query(self, text: str) -> np.ndarray | list[float]: ...


@runtime_checkable
class EmbedderProvider(Protocol):
    """A framework wrapper (e.g. ``MiniLMEmbeddings``) that hands out the core :class:`Embedder` it holds, which
    :func:`~.convert.as_embedder` then uses directly.

    >>> class Holder:
    ...     def fragrel_embedder(self):
    ...         return "the core embedder"
    >>> isinstance(Holder(), EmbedderProvider)
    True
    """

    def fragrel_embedder(self) -> Embedder: ...


def check_embeddings(vectors: object, n: int, *, source: str = "embedder") -> np.ndarray:
    """``vectors`` as a finite float32 ``(n, dim)`` array, else a ValueError naming the problem."""
    try:
        arr = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{source} returned something that is not a numeric matrix: {exc}") from exc
    if arr.ndim != 2 or arr.shape[0] != n or arr.shape[1] == 0:
        raise ValueError(f"{source} returned shape {arr.shape} for {n} texts; expected ({n}, dim)")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{source} returned NaN or inf values")
    return arr


def embed_documents(
    embedder: Embedder, texts: Sequence[str], *, batch_size: int = 64, show_progress: bool = False
) -> np.ndarray:
    """``texts`` embedded in batches (with an optional progress bar), checked."""
    check_type(
        embedder,
        Embedder,
        "embedder must have embed_documents(texts) and embed_query(text)",
        hint="; wrap framework models with fragrel_integrations.models.as_embedder",
    )
    check_positive_int(batch_size, "batch_size")
    texts = [check_text(t, f"texts[{i}]") for i, t in enumerate(texts)]
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    parts = []
    starts = range(0, len(texts), batch_size)
    for start in tqdm(starts, desc="embedding", unit="batch", disable=not show_progress or len(starts) < 2):
        batch = texts[start : start + batch_size]
        parts.append(check_embeddings(embedder.embed_documents(batch), len(batch)))
    dims = {p.shape[1] for p in parts}
    if len(dims) != 1:
        raise ValueError(f"embedder returned different dimensions across batches: {sorted(dims)}")
    return np.concatenate(parts)


def embed_query(embedder: Embedder, text: str) -> np.ndarray:
    """One query embedded, checked: a finite float32 vector."""
    check_type(text, str, "query must be str")
    check_text(text, "the query")
    return check_embeddings(np.asarray(embedder.embed_query(text), dtype=np.float32)[None, :], 1)[0]


class CachedEmbedder:
    """An embedder behind an in-memory LRU cache of document vectors (``maxsize`` texts); thread-safe.

    >>> class Echo:
    ...     calls = 0
    ...     def embed_documents(self, texts):
    ...         Echo.calls += 1
    ...         return [[float(len(t)), 1.0] for t in texts]
    ...     def embed_query(self, text):
    ...         return [float(len(text)), 1.0]
    >>> cached = CachedEmbedder(Echo())
    >>> _ = cached.embed_documents(["a", "bb"]); _ = cached.embed_documents(["bb", "a"])
    >>> Echo.calls
    1
    """

    def __init__(self, embedder: Embedder, maxsize: int = 100_000) -> None:
        if not isinstance(embedder, Embedder):
            raise TypeError("CachedEmbedder wraps an object with embed_documents(texts) and embed_query(text)")
        self.embedder = embedder
        self.maxsize = check_positive_int(maxsize, "maxsize")
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        with self._lock:  # the embedding call runs outside the lock
            found = {t: self._cache[t] for t in dict.fromkeys(texts) if t in self._cache}
        missing = [t for t in dict.fromkeys(texts) if t not in found]
        if missing:
            vectors = check_embeddings(self.embedder.embed_documents(missing), len(missing))
            found.update(zip(missing, vectors, strict=True))
        with self._lock:
            for t in missing:
                self._cache[t] = found[t]
            for t in texts:
                if t in self._cache:  # another thread may have evicted it meanwhile
                    self._cache.move_to_end(t)
            while len(self._cache) > self.maxsize:
                self._cache.popitem(last=False)
        out = [found[t] for t in texts]
        return np.stack(out) if out else np.zeros((0, 0), dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return np.asarray(self.embedder.embed_query(text), dtype=np.float32)


class WrappedEmbedder:
    """The core embedder in a wrapper's ``attribute``, read on each call (so it still loads on first use)."""

    def __init__(self, wrapper: object, attribute: str) -> None:
        self.wrapper = wrapper
        self.attribute = attribute

    @property
    def embedder(self) -> Embedder:
        return getattr(self.wrapper, self.attribute)

    @property
    def max_input_tokens(self) -> int | None:
        return getattr(self.embedder, "max_input_tokens", None)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray | list[list[float]]:
        return self.embedder.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray | list[float]:
        return self.embedder.embed_query(text)

    def __repr__(self) -> str:
        return f"WrappedEmbedder({type(self.wrapper).__name__})"


def normalise_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero), float32."""
    v = np.asarray(vectors, dtype=np.float32)
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
