"""The model protocols the core needs, and the array checks every embedder call goes through."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
from tqdm.auto import tqdm

__all__ = [
    "CachedEmbedder",
    "Embedder",
    "WrappedEmbedder",
    "as_embedder",
    "check_embeddings",
    "embed_documents",
    "embed_query",
    "optional_embedder",
]


@runtime_checkable
class Embedder(Protocol):
    """Texts to vectors. ``embed_documents`` returns ``(len(texts), dim)``; ``embed_query`` returns ``(dim,)``.

    Any object with these two methods works (LangChain ``Embeddings`` name them the same way);
    :func:`as_embedder` converts LlamaIndex embedding models and this package's framework wrappers.
    """

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray | list[list[float]]: ...

    def embed_query(self, text: str) -> np.ndarray | list[float]: ...


def check_embeddings(vectors: object, n: int, *, source: str = "embedder") -> np.ndarray:
    """Return ``vectors`` as a finite float32 ``(n, dim)`` array or raise ValueError naming the problem."""
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
    embedder: Embedder,
    texts: Sequence[str],
    *,
    batch_size: int = 64,
    show_progress: bool = False,
) -> np.ndarray:
    """Embed ``texts`` in batches (with an optional progress bar) and validate the result."""
    if not isinstance(embedder, Embedder):
        raise TypeError(
            f"embedder must have embed_documents(texts) and embed_query(text), got {type(embedder).__name__}; "
            "wrap framework models with fragrel_integrations.models.as_embedder"
        )
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    texts = list(texts)
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
    """Embed one query and validate it: a finite float32 vector."""
    if not isinstance(text, str):
        raise TypeError(f"query must be str, got {type(text).__name__}")
    return check_embeddings(np.asarray(embedder.embed_query(text), dtype=np.float32)[None, :], 1)[0]


class CachedEmbedder:
    """Wrap an embedder with an in-memory LRU cache of document vectors keyed by text.

    Re-ranking a base retriever's pool re-embeds the same fragments query after query; with this wrapper each
    distinct text is embedded once (up to ``maxsize`` texts).

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
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize <= 0:
            raise ValueError(f"maxsize must be a positive int, got {maxsize!r}")
        from collections import OrderedDict

        self.embedder = embedder
        self.maxsize = maxsize
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if missing:
            vectors = check_embeddings(self.embedder.embed_documents(missing), len(missing))
            for t, v in zip(missing, vectors, strict=True):
                self._cache[t] = v
        out = []
        for t in texts:
            self._cache.move_to_end(t)
            out.append(self._cache[t])
        while len(self._cache) > self.maxsize:
            self._cache.popitem(last=False)
        return np.stack(out) if out else np.zeros((0, 0), dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return np.asarray(self.embedder.embed_query(text), dtype=np.float32)


class WrappedEmbedder:
    """The core embedder inside one of this package's framework wrappers (``MiniLMEmbeddings`` for LangChain,
    ``MiniLMEmbedding`` for LlamaIndex), fetched from the wrapper on each call so that the model still loads
    on first use. Calls go straight to the core model (arrays, no list round-trip); ``max_input_tokens``
    is forwarded so input-window checks still see it."""

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


def _loaded_class(module: str, name: str) -> type | None:
    """``module.name`` if ``module`` is already imported (an instance of the class implies it is), else None."""
    cls = getattr(sys.modules.get(module), name, None)
    return cls if isinstance(cls, type) else None


def as_embedder(model: Any) -> Embedder:
    """Return ``model`` as an :class:`Embedder`, the one conversion every component and adapter uses.

    - this package's wrappers (LangChain ``MiniLMEmbeddings``, LlamaIndex ``MiniLMEmbedding``) give the core
      embedder they hold (loaded on first use, shared with the rest of the library);
    - a LlamaIndex ``BaseEmbedding`` is wrapped in
      :class:`~fragrel_integrations.models.llama_index_models.LlamaIndexEmbedder`;
    - anything with ``embed_documents(texts)`` and ``embed_query(text)`` (a LangChain ``Embeddings``, a core
      embedder, your own object) is returned as is.

    No framework is imported here. ``None`` raises: components take ``embedder=None`` for the embedded
    default (see :func:`optional_embedder`).

    >>> from fragrel_integrations.testing import HashingEmbedder
    >>> emb = HashingEmbedder(dim=8)
    >>> as_embedder(emb) is emb
    True
    """
    lc_wrapper = _loaded_class("fragrel_integrations.langchain.embeddings", "MiniLMEmbeddings")
    if lc_wrapper is not None and isinstance(model, lc_wrapper):
        inner = model._embedder
        return WrappedEmbedder(model, "embedder") if inner is None else as_embedder(inner)
    li_wrapper = _loaded_class("fragrel_integrations.llama_index.embeddings", "MiniLMEmbedding")
    if li_wrapper is not None and isinstance(model, li_wrapper):
        inner = model._model
        return WrappedEmbedder(model, "model") if inner is None else inner
    from .llama_index_models import LlamaIndexEmbedder, is_llama_index_embedding

    if is_llama_index_embedding(model):
        return LlamaIndexEmbedder(model)
    if isinstance(model, Embedder):
        return model
    if model is None:
        raise TypeError("embedder is None: pass an embedding model, or leave embedder=None where a component takes it")
    raise TypeError(
        f"cannot use {type(model).__name__} as an embedder: pass a LangChain Embeddings, a LlamaIndex "
        "BaseEmbedding, MiniLMEmbeddings()/MiniLMEmbedding(), or any object with embed_documents(texts) and "
        "embed_query(text)"
    )


def optional_embedder(model: Any) -> Embedder | None:
    """:func:`as_embedder`, except that ``None`` stays ``None`` (a component's embedded default)."""
    return None if model is None else as_embedder(model)
