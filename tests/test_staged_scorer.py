"""The staged hybrid score (BM25 first, embeddings for its best candidates only) and its vector file."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from fragrel_integrations import ContextRelation, FragRelIndex
from fragrel_integrations.core.staged import StagedHybridScorer, WindowVectorFile
from fragrel_integrations.testing import HashingEmbedder

TOPICS = ["whales swim in the ocean", "bread is baked at dawn", "the comet crossed the sky", "rain fell on the roofs"]
TEXTS = [f"{TOPICS[i % 4]} story part {i} " + " ".join(f"filler{i}x{j}" for j in range(30)) for i in range(20)]


class Counting(HashingEmbedder):
    def __init__(self):
        super().__init__(dim=64)
        self.texts: list[str] = []

    def embed_documents(self, texts):
        self.texts += list(texts)
        return super().embed_documents(texts)


def test_equals_the_full_hybrid_when_every_fragment_is_a_candidate():
    emb = HashingEmbedder(dim=64)
    full = FragRelIndex.from_fragments(TEXTS, embedder=emb, scorer="hybrid", window_words=8, show_progress=False)
    staged = StagedHybridScorer(TEXTS, emb, candidates=len(TEXTS), window_words=8)
    for q in ("whales in the ocean", "a comet"):
        np.testing.assert_allclose(staged(q), full.scorer(q), atol=1e-5)


def test_embeds_only_candidates_and_reuses_them():
    emb = Counting()
    scorer = StagedHybridScorer(TEXTS, emb, candidates=5, window_words=None)
    s = scorer("whales swim in the ocean")
    assert len(emb.texts) == 5 and len(scorer.vectors) == 5
    best = set(np.argsort(-s)[:5].tolist())
    assert best == {i for i in range(20) if i % 4 == 0}  # the whale fragments, all candidates
    assert np.all(s[[i for i in range(20) if i not in scorer.vectors]] <= 0.5 + 1e-9)  # no dense half
    scorer("whales swim in the ocean")
    assert len(emb.texts) == 5  # nothing embedded twice
    scorer("bread baked at dawn")
    assert len(emb.texts) == 10 and scorer.n_embedded == 10
    assert sorted(scorer.take_new()) == sorted(scorer.vectors) and scorer.take_new() == {}


def test_scores_do_not_depend_on_what_is_cached():
    emb = HashingEmbedder(dim=64)
    fresh = StagedHybridScorer(TEXTS, emb, candidates=4, window_words=None)
    warm = StagedHybridScorer(TEXTS, emb, candidates=4, window_words=None)
    warm("bread is baked"), warm("rain on roofs")
    np.testing.assert_allclose(fresh("comet sky"), warm("comet sky"))


def test_in_an_index_with_a_context_relation():
    index = FragRelIndex.from_fragments(
        TEXTS, scorer=StagedHybridScorer(TEXTS, HashingEmbedder(dim=64), candidates=6), relation=ContextRelation(0.3)
    )
    assert index.embeddings is None  # nothing embedded up front
    hits = index.retrieve("the comet crossed the sky", k=3)
    assert all("comet" in h.fragment.text for h in hits)


def test_vector_file_round_trip_and_shared_between_runs(tmp_path):
    path = tmp_path / "book.vectors"
    emb = Counting()
    first = StagedHybridScorer(
        TEXTS, emb, candidates=4, window_words=8, store=WindowVectorFile(path, key="k", n_fragments=20)
    )
    a = first("whales swim")
    assert len(WindowVectorFile(path, key="k", n_fragments=20).read()) == 4
    second = StagedHybridScorer(
        TEXTS, emb, candidates=4, window_words=8, store=WindowVectorFile(path, key="k", n_fragments=20)
    )
    before = len(emb.texts)
    np.testing.assert_allclose(second("whales swim"), a)
    assert len(emb.texts) == before  # read back, not embedded again
    for i, v in second.vectors.items():
        np.testing.assert_array_equal(v, first.vectors[i])


def test_vector_file_refuses_other_keys_and_other_files(tmp_path):
    path = tmp_path / "book.vectors"
    WindowVectorFile(path, key="k", n_fragments=3).add({0: np.ones((1, 4), np.float32)})
    with pytest.raises(ValueError, match="another text"):
        WindowVectorFile(path, key="other", n_fragments=3)
    with pytest.raises(ValueError, match="another text"):
        WindowVectorFile(path, key="k", n_fragments=4)
    junk = tmp_path / "junk.vectors"
    junk.write_bytes(b"not sqlite at all" * 10)
    with pytest.raises(ValueError, match="not a FragRel vector cache"):
        WindowVectorFile(junk, key="k", n_fragments=3)
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE header (key TEXT, value TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(ValueError, match="not a FragRel vector cache"):
        WindowVectorFile(other, key="k", n_fragments=3)
    with pytest.raises(ValueError, match="directory"):
        WindowVectorFile(tmp_path, key="k", n_fragments=3)
    with pytest.raises(ValueError, match="outside"):
        WindowVectorFile(path, key="k", n_fragments=3).add({7: np.ones((1, 4), np.float32)})


def test_an_unwritable_store_warns_and_scores_anyway(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    store = WindowVectorFile(blocker / "sub" / "book.vectors", key="k", n_fragments=20)
    scorer = StagedHybridScorer(TEXTS, HashingEmbedder(dim=64), candidates=3, window_words=None, store=store)
    with pytest.warns(UserWarning, match="could not write"):
        s = scorer("comet")
    assert s.shape == (20,) and scorer.store is None


def test_bad_arguments():
    emb = HashingEmbedder(dim=8)
    with pytest.raises(ValueError, match="candidates"):
        StagedHybridScorer(TEXTS, emb, candidates=0)
    with pytest.raises(TypeError, match="list of strings"):
        StagedHybridScorer("one text", emb)
    with pytest.raises(ValueError, match="empty"):
        StagedHybridScorer([], emb)
    with pytest.raises(ValueError, match="fragment index"):
        StagedHybridScorer(TEXTS, emb, vectors={99: np.ones((1, 8))})
    with pytest.raises(TypeError, match="query"):
        StagedHybridScorer(TEXTS, emb)(3)
    with pytest.raises(ValueError, match="store holds"):
        StagedHybridScorer(TEXTS, emb, store=WindowVectorFile("x.vectors", key="k", n_fragments=3))
