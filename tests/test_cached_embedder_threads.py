"""CachedEmbedder shared between threads (issue 17): right vectors, no KeyError, the size bound kept."""

import sys
import threading
import time

import numpy as np

from fragrel_integrations.models import CachedEmbedder


class _Slow:
    def embed_documents(self, texts):
        time.sleep(0.0005)
        return [[float(len(t)), float(sum(map(ord, t)) % 97), 1.0] for t in texts]

    def embed_query(self, text):
        return self.embed_documents([text])[0]


def test_cached_embedder_is_safe_across_threads():
    inner = _Slow()
    cached = CachedEmbedder(inner, maxsize=8)
    texts = [f"text {i}" * (1 + i % 3) for i in range(40)]
    errors = []
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, so that a missing lock shows

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(150):
                batch = [texts[i] for i in rng.integers(0, len(texts), size=6)]
                got = cached.embed_documents(batch)
                want = np.asarray(inner.embed_documents(batch), dtype=np.float32)
                if not np.array_equal(got, want):
                    errors.append(("wrong vectors", batch))
        except Exception as exc:
            errors.append(repr(exc))

    try:
        threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert errors == []
    assert len(cached._cache) <= 8
