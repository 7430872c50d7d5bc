"""The model protocols the core needs, and the array checks every embedder call goes through."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
from tqdm.auto import tqdm

from .._validation import check_positive_int, check_text

__all__ = [
    "IDENTITY_PROBE",
    "CachedEmbedder",
    "Embedder",
    "EmbedderProvider",
    "WrappedEmbedder",
    "check_embeddings",
    "check_identity",
    "check_window_words",
    "check_windows",
    "embed_documents",
    "embed_query",
    "embed_windows",
    "embedder_id",
    "embedder_identity",
    "embedder_window_tokens",
    "fragment_vectors",
    "identity_mismatch",
    "normalise_rows",
    "split_windows",
    "window_words_for",
]

#: Words per sub-window for each word piece an embedder reads: 0.6 keeps a window of English prose inside the
#: limit (Robinson Crusoe: ~1.2 word pieces per word, 99th percentile of 152-word windows ~ 225 of 256 pieces).
WORDS_PER_TOKEN = 0.6


@runtime_checkable
class Embedder(Protocol):
    """Texts to vectors. ``embed_documents`` returns ``(len(texts), dim)``; ``embed_query`` returns ``(dim,)``.

    Any object with these two methods works (LangChain ``Embeddings`` name them the same way);
    :func:`~fragrel_integrations.models.convert.as_embedder` converts LlamaIndex embedding models and this
    package's framework wrappers.
    """

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray | list[list[float]]: ...

    def embed_query(self, text: str) -> np.ndarray | list[float]: ...


@runtime_checkable
class EmbedderProvider(Protocol):
    """An object that holds a core :class:`Embedder` and hands it out: a framework wrapper such as LangChain's
    ``MiniLMEmbeddings`` or LlamaIndex's ``MiniLMEmbedding``. :func:`~fragrel_integrations.models.convert.as_embedder`
    uses ``fragrel_embedder()`` instead of the wrapper's framework methods (arrays, no list round-trip), so this
    layer never needs to know the wrappers.

    >>> class Holder:
    ...     def fragrel_embedder(self):
    ...         return "the core embedder"
    >>> isinstance(Holder(), EmbedderProvider)
    True
    """

    def fragrel_embedder(self) -> Embedder: ...


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
    check_positive_int(batch_size, "batch_size")
    texts = [check_text(t, f"texts[{i}]") for i, t in enumerate(texts)]  # no lone surrogate reaches a tokenizer
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
    check_text(text, "the query")
    return check_embeddings(np.asarray(embedder.embed_query(text), dtype=np.float32)[None, :], 1)[0]


class CachedEmbedder:
    """Wrap an embedder with an in-memory LRU cache of document vectors keyed by text.

    Re-ranking a base retriever's pool re-embeds the same fragments query after query; with this wrapper each
    distinct text is embedded once (up to ``maxsize`` texts). Safe to share between threads (a lock guards the
    cache; two threads may embed the same new text at once, never corrupt the cache).

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
        check_positive_int(maxsize, "maxsize")
        from collections import OrderedDict

        self.embedder = embedder
        self.maxsize = maxsize
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        with self._lock:  # the cache is shared between threads; the embedding call runs outside the lock
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
    """The core embedder inside an :class:`EmbedderProvider` (e.g. LangChain's ``MiniLMEmbeddings``), read from
    the wrapper's ``attribute`` on each call so that the model still loads on first use. Calls go straight to
    the core model (arrays, no list round-trip); ``max_input_tokens`` is forwarded so input-window checks still
    see it."""

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


# --------------------------------------------------------------------------------------------- input windows

_WRAPPED = ("embedder", "embed_model", "client", "_model")


def _window_attr(obj: object) -> int | None:
    for name in ("max_input_tokens", "max_seq_length"):
        try:
            value = getattr(obj, name, None)
        except Exception:  # a property that fails (e.g. a model not loaded) tells nothing
            value = None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def embedder_window_tokens(embedder: object, _depth: int = 0) -> int | None:
    """Tokens (word pieces) ``embedder`` reads per text, when it says so; None when it does not.

    Read from ``max_input_tokens`` (:class:`~fragrel_integrations.models.local.MiniLMEmbedder`), ``max_seq_length``
    (a sentence-transformers model) or the same on a wrapped model (``client.max_seq_length`` of LangChain's
    ``HuggingFaceEmbeddings``, ``embed_model`` of a LlamaIndex adapter, ``embedder`` of :class:`CachedEmbedder`).

    >>> class E:
    ...     max_seq_length = 256
    >>> embedder_window_tokens(E()), embedder_window_tokens(object())
    (256, None)
    """
    found = _window_attr(embedder)
    if found is not None or _depth >= 3:
        return found
    for name in _WRAPPED:
        inner = getattr(embedder, name, None)
        if inner is not None and inner is not embedder:
            found = embedder_window_tokens(inner, _depth + 1)
            if found is not None:
                return found
    return None


def window_words_for(embedder: object) -> int | None:
    """Words per sub-window that fit ``embedder``'s input window (None when it does not expose one).

    >>> class E:
    ...     max_input_tokens = 256
    >>> window_words_for(E())
    152
    """
    tokens = embedder_window_tokens(embedder)
    if tokens is None:
        return None
    return max(1, int(WORDS_PER_TOKEN * max(tokens - 2, 1)))  # 2 pieces go to [CLS] and [SEP]


def check_window_words(window_words: object) -> int | None:
    """``window_words`` as a positive int or None, or a ValueError naming the fix."""
    if window_words is None:
        return None
    check_positive_int(window_words, "window_words", hint=" or None")
    return window_words


def split_windows(texts: Sequence[str], window_words: int | None) -> tuple[list[str], np.ndarray]:
    """Sub-windows of at most ``window_words`` words covering each text, and ``offsets[i]`` = index of text
    ``i``'s first window (for ``np.maximum.reduceat``). A text that fits stays one window, unchanged; a longer
    one gets ``ceil(words / window_words)`` full windows spread evenly from its first word to its last (they
    overlap a little, so a sentence on a window edge is also read whole). ``None`` keeps every text whole.

    >>> split_windows(["a b c d e", "f"], 2)
    (['a b', 'c d', 'd e', 'f'], array([0, 3]))
    """
    window_words = check_window_words(window_words)
    out: list[str] = []
    offsets = np.zeros(len(texts), dtype=np.int64)
    for i, text in enumerate(texts):
        offsets[i] = len(out)
        words = text.split() if window_words is not None else ()
        if window_words is None or len(words) <= window_words:
            out.append(text)
            continue
        n = -(-len(words) // window_words)
        last = len(words) - window_words
        for start in sorted({round(j * last / (n - 1)) for j in range(n)}):
            out.append(" ".join(words[start : start + window_words]))
    return out, offsets


def normalise_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero), float32."""
    v = np.asarray(vectors, dtype=np.float32)
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)


def check_windows(vectors: object, offsets: object, n: int, *, source: str = "window embeddings") -> np.ndarray:
    """Validate ``offsets`` (``n`` increasing window starts, the first 0, all inside ``vectors``)."""
    off = np.asarray(offsets)
    rows = np.asarray(vectors).shape[0] if np.ndim(vectors) == 2 else -1
    if off.shape != (n,) or not np.issubdtype(off.dtype, np.integer):
        raise ValueError(f"{source}: offsets must be {n} ints (one first window per fragment), got shape {off.shape}")
    if n and (off[0] != 0 or np.any(np.diff(off) <= 0) or off[-1] >= rows):
        raise ValueError(f"{source}: offsets must start at 0, increase strictly and stay below {rows} windows")
    return off.astype(np.int64)


def fragment_vectors(vectors: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """One vector per fragment: the normalised mean of its normalised window vectors."""
    unit = normalise_rows(vectors)
    if unit.shape[0] == offsets.shape[0]:
        return unit
    return normalise_rows(np.add.reduceat(unit, offsets, axis=0))


def embed_windows(
    embedder: Embedder,
    texts: Sequence[str],
    *,
    window_words: int | None,
    batch_size: int = 64,
    show_progress: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Embed every sub-window of ``texts`` (see :func:`split_windows`): ``(window vectors, offsets)``.

    Score a text by the best of its windows with ``np.maximum.reduceat(window_vectors @ q, offsets)``
    (:class:`~fragrel_integrations.core.scorers.DenseScorer` does).
    """
    texts = [check_text(t, f"texts[{i}]") for i, t in enumerate(texts)]
    windows, offsets = split_windows(texts, window_words)
    vectors = embed_documents(embedder, windows, batch_size=batch_size, show_progress=show_progress)
    return vectors, offsets


def embedder_id(embedder: object) -> str:
    """A string naming the model behind ``embedder`` (what a persisted index or an embedding cache is keyed by).

    An embedder may say it itself with a ``model_id`` string; otherwise the class and the first of
    ``model_name``/``model`` found on it (or on the model it wraps) are used.

    >>> class E:
    ...     model_name = "m1"
    >>> embedder_id(E()).endswith("E:m1")
    True
    """
    own = getattr(embedder, "model_id", None)
    if isinstance(own, str) and own:
        return own
    if isinstance(embedder, CachedEmbedder):
        return embedder_id(embedder.embedder)
    cls = type(embedder)
    for obj in (embedder, getattr(embedder, "embed_model", None)):
        for attr in ("model_name", "model"):
            value = getattr(obj, attr, None) if obj is not None else None
            if isinstance(value, str) and value:
                return f"{cls.__module__}.{cls.__qualname__}:{value}"
    return f"{cls.__module__}.{cls.__qualname__}"


# --------------------------------------------------------------------------------------------- identity

#: The text every embedder embeds when saved state records (and a load checks) which model built it.
IDENTITY_PROBE = "FragRel identity probe: Robinson Crusoe counts 1719 footprints on the sand at noon."
#: Length of the fingerprint: the probe's unit vector folded onto this many numbers (component i adds to i mod 32).
_FINGERPRINT_SIZE = 32
#: Cosine two fingerprints must reach to be the same model (one model on two machines: > 0.999; two models or
#: two seeds of one: about 0 +- 0.2).
_FINGERPRINT_COSINE = 0.99
_IDENTITY_KEYS = ("id", "dim", "normalised", "max_input_tokens", "fingerprint")


def embedder_identity(embedder: Embedder) -> dict[str, Any]:
    """What saved state records about the embedder that built it, so that a load with another model is refused:
    its :func:`embedder_id` (class and model name or path), the dimension, whether its vectors come normalised,
    the input window in tokens (:func:`embedder_window_tokens`) and a fingerprint of its vector for a fixed probe
    text (:data:`IDENTITY_PROBE`, folded onto 32 numbers, 4 decimals): two models, or two settings of one
    model, that share a name and a dimension still differ there. Costs one embedding call.

    >>> from fragrel_integrations.testing import HashingEmbedder
    >>> ident = embedder_identity(HashingEmbedder(dim=64))
    >>> ident["dim"], ident["normalised"], len(ident["fingerprint"])
    (64, True, 32)
    >>> identity_mismatch(ident, embedder_identity(HashingEmbedder(dim=64, seed=1))).split(":")[0]
    'a different embedding for the same text (fingerprint cosine 0.31)'
    """
    vector = check_embeddings(embedder.embed_documents([IDENTITY_PROBE]), 1, source="the embedder")[0]
    norm = float(np.linalg.norm(vector))
    unit = vector.astype(np.float64) / max(norm, 1e-12)
    folded = np.zeros(_FINGERPRINT_SIZE)
    np.add.at(folded, np.arange(unit.size) % _FINGERPRINT_SIZE, unit)
    return {
        "id": embedder_id(embedder),
        "dim": int(vector.size),
        "normalised": abs(norm - 1.0) < 1e-3,
        "max_input_tokens": embedder_window_tokens(embedder),
        "fingerprint": [round(float(x), 4) for x in folded],
    }


def identity_mismatch(saved: Mapping[str, Any], current: Mapping[str, Any]) -> str | None:
    """Why state built by the embedder ``saved`` describes must not be used with the one ``current`` describes
    (both from :func:`embedder_identity`), or None when it may. ValueError when ``saved`` is not such a record."""
    if not isinstance(saved, Mapping) or set(saved) != set(_IDENTITY_KEYS):
        raise ValueError(f"the recorded embedder identity is damaged (an object with {list(_IDENTITY_KEYS)} expected)")
    fingerprint = saved["fingerprint"]
    if (
        not isinstance(saved["id"], str)
        or isinstance(saved["dim"], bool)
        or not isinstance(saved["dim"], int)
        or not isinstance(saved["normalised"], bool)
        or not (saved["max_input_tokens"] is None or type(saved["max_input_tokens"]) is int)
        or not isinstance(fingerprint, list)
        or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in fingerprint)
    ):
        raise ValueError("the recorded embedder identity is damaged (a field has the wrong type)")
    if saved["id"] != current["id"]:
        return f"built with the embedder {saved['id']!r}, not {current['id']!r}"
    if saved["dim"] != current["dim"]:
        return f"built with {saved['dim']}-dimensional vectors, the embedder gives {current['dim']}"
    if saved["normalised"] != current["normalised"]:
        word = {True: "normalised", False: "unnormalised"}
        return f"built with {word[saved['normalised']]} vectors, the embedder gives {word[current['normalised']]} ones"
    if saved["max_input_tokens"] != current["max_input_tokens"]:
        return (
            f"built with an embedder reading {saved['max_input_tokens']} tokens per text, this one reads "
            f"{current['max_input_tokens']} (set its max_input_tokens to the saved value)"
        )
    a, b = np.asarray(fingerprint, dtype=np.float64), np.asarray(current["fingerprint"], dtype=np.float64)
    cosine = float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-12)) if a.shape == b.shape else 0.0
    if cosine < _FINGERPRINT_COSINE:
        return (
            f"a different embedding for the same text (fingerprint cosine {cosine:.2f}): another model or other "
            "settings behind the same name"
        )
    return None


def check_identity(saved: object, embedder: Embedder, where: str) -> None:
    """ValueError starting with ``where`` (the saved file) when ``embedder`` is not the one whose
    :func:`embedder_identity` is ``saved``, naming the difference and the fix."""
    try:
        why = identity_mismatch(saved, embedder_identity(embedder))  # type: ignore[arg-type]
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}; rebuild it") from None
    if why is not None:
        raise ValueError(
            f"{where} was {why}: pass the embedder it was built with (same model and settings), or rebuild it"
        )
