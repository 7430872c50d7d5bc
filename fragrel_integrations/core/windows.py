"""Sub-windows of long texts for an embedder's input window: split, embed, and one vector per text.

>>> split_windows(["a b c d e", "f"], 2)
(['a b', 'c d', 'd e', 'f'], array([0, 3]))
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .._validation import check_positive_int, check_text
from ..models.embedder import Embedder, embed_documents, normalise_rows

__all__ = [
    "WORDS_PER_TOKEN",
    "check_window_words",
    "check_windows",
    "embed_windows",
    "embedder_window_tokens",
    "fragment_vectors",
    "split_windows",
    "window_words_for",
]


#: Words per sub-window for each word piece an embedder reads: 0.6 keeps a window of English prose inside the
#: limit (Robinson Crusoe: ~1.2 word pieces per word, 99th percentile of 152-word windows ~ 225 of 256 pieces).
WORDS_PER_TOKEN = 0.6


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
    # 2 pieces go to [CLS] and [SEP]
    return None if tokens is None else max(1, int(WORDS_PER_TOKEN * max(tokens - 2, 1)))


def check_window_words(window_words: object) -> int | None:
    """``window_words`` as a positive int or None, or a ValueError naming the fix."""
    return None if window_words is None else check_positive_int(window_words, "window_words", hint=" or None")


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
    return unit if unit.shape[0] == offsets.shape[0] else normalise_rows(np.add.reduceat(unit, offsets, axis=0))


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
