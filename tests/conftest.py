"""Shared fixtures: the real embedded embedder (loaded once per session) and a small deterministic embedder."""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest


class BagOfWordsEmbedder:
    """Deterministic hashed bag-of-words vectors (normalised): texts sharing words have positive cosine."""

    def __init__(self, dim: int = 64) -> None:
        self.dim = dim
        self.calls = 0

    def _vec(self, text: str) -> np.ndarray:
        v = np.zeros(self.dim, dtype=np.float32)
        for tok in re.findall(r"\w+", text.lower()):
            v[int(hashlib.md5(tok.encode()).hexdigest(), 16) % self.dim] += 1.0
        n = np.linalg.norm(v)
        return v / n if n else v + 1.0 / np.sqrt(self.dim)

    def embed_documents(self, texts):
        self.calls += 1
        return np.stack([self._vec(t) for t in texts]) if texts else np.zeros((0, self.dim), np.float32)

    def embed_query(self, text):
        return self._vec(text)


@pytest.fixture
def bow_embedder() -> BagOfWordsEmbedder:
    return BagOfWordsEmbedder()


@pytest.fixture(scope="session")
def real_embedder():
    """The embedded offline all-MiniLM-L6-v2 (loaded once)."""
    from fragrel_integrations.models.local import default_embedder

    return default_embedder()


@pytest.fixture
def base_scores_only(monkeypatch):
    """The wrappers' formula on the base's own scores under the general preset: ``preset="auto"`` sees every pool
    as general text and no pool BM25 is fused in (``lexical`` 0). Tests that pin the wiring and eq. 9-10 use it;
    auto and lexical themselves are tested in ``test_auto_defaults.py``."""
    import fragrel_integrations.adapters.wrapper_settings as kit
    import fragrel_integrations.core.presets as presets

    monkeypatch.setattr(presets, "detect_preset", lambda fragments: "general")
    for name in kit.POOL_LEXICAL:
        monkeypatch.setitem(kit.POOL_LEXICAL, name, 0.0)
