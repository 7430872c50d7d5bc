"""Fragments longer than the embedder's input window are scored by all of their text (sub-window max)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import BagOfWordsEmbedder

from fragrel_integrations import DenseScorer, FragRelIndex, SemanticRelation
from fragrel_integrations.core.embedder_identity import embedder_id
from fragrel_integrations.core.windows import embedder_window_tokens, split_windows, window_words_for
from fragrel_integrations.models.embedder import CachedEmbedder


class TruncatingEmbedder(BagOfWordsEmbedder):
    """Reads only the first ``max_input_tokens`` words of a text, as a transformer reads its first pieces."""

    def __init__(self, max_input_tokens: int | None = 52) -> None:
        super().__init__(dim=1024)  # few hash collisions between the needle's and the filler's words
        self.limit = max_input_tokens
        if max_input_tokens is not None:
            self.max_input_tokens = max_input_tokens
        self.texts: list[str] = []

    def embed_documents(self, texts):
        self.texts += list(texts)
        cut = [" ".join(t.split()[: self.limit or None]) for t in texts]
        return super().embed_documents(cut)


FILLER = ["the", "weather", "was", "grey", "and", "the", "sea", "was", "calm", "all", "day", "long"]


def _filler(n: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    return " ".join(rng.choice(FILLER, n))


NEEDLE = "the parrot named Poll spoke"
FRAGMENTS = [_filler(200, 0), _filler(160, 1) + " " + NEEDLE, _filler(200, 2)]


def test_split_windows_cover_every_word_within_the_size():
    text = " ".join(f"w{i}" for i in range(103))
    windows, offsets = split_windows([text, "short text", ""], 25)
    assert offsets.tolist() == [0, 5, 6]
    assert windows[5:] == ["short text", ""]
    covered = {w for win in windows[:5] for w in win.split()}
    assert covered == set(text.split())
    assert all(len(w.split()) == 25 for w in windows[:5])
    assert windows[0].split()[0] == "w0" and windows[4].split()[-1] == "w102"
    assert split_windows([text], None) == ([text], np.array([0]))
    with pytest.raises(ValueError, match="window_words must be a positive int"):
        split_windows([text], 0)


def test_window_size_is_read_from_the_embedder():
    class Client:
        max_seq_length = 128

    class LangChainLike:  # HuggingFaceEmbeddings keeps the SentenceTransformer in .client
        client = Client()
        model_name = "m"

        def embed_documents(self, texts):
            return [[1.0]] * len(texts)

        def embed_query(self, text):
            return [1.0]

    assert embedder_window_tokens(LangChainLike()) == 128
    assert embedder_window_tokens(CachedEmbedder(LangChainLike())) == 128
    assert window_words_for(TruncatingEmbedder(256)) == 152
    assert window_words_for(BagOfWordsEmbedder()) is None
    assert embedder_id(CachedEmbedder(LangChainLike())) == embedder_id(LangChainLike())


def test_text_past_the_embedder_window_is_scored():
    cut = FragRelIndex.from_fragments(
        FRAGMENTS, embedder=TruncatingEmbedder(), window_words=None, alpha=0.0, show_progress=False
    )
    whole = FragRelIndex.from_fragments(FRAGMENTS, embedder=TruncatingEmbedder(), alpha=0.0, show_progress=False)
    assert whole.window_words == window_words_for(TruncatingEmbedder()) == 30
    assert cut.retrieve("parrot Poll", k=1)[0].fragment.position != 1  # the needle was never embedded
    hit = whole.retrieve("parrot Poll", k=1)[0]
    assert hit.fragment.position == 1
    assert hit.independent_score > cut.scores("parrot Poll")[0][1] + 0.1
    # every window fits what the embedder reads
    assert max(len(t.split()) for t in whole._embedder.texts) <= 30


def test_no_window_exposed_means_whole_fragments_unless_given():
    emb = BagOfWordsEmbedder()
    index = FragRelIndex.from_fragments(FRAGMENTS, embedder=emb, show_progress=False)
    assert index.window_words is None and index.window_embeddings.shape[0] == 3
    given = FragRelIndex.from_fragments(FRAGMENTS, embedder=emb, window_words=50, show_progress=False)
    assert given.window_embeddings.shape[0] == 4 + 4 + 4 and given.window_offsets.tolist() == [0, 4, 8]
    with pytest.raises(ValueError, match="window_words must be a positive int"):
        FragRelIndex.from_fragments(FRAGMENTS, scorer="bm25", window_words=-3)


def test_fragment_vector_is_the_mean_of_its_windows_for_relations():
    emb = BagOfWordsEmbedder()
    index = FragRelIndex.from_fragments(
        FRAGMENTS, embedder=emb, window_words=50, relation=SemanticRelation(), show_progress=False
    )
    assert index.embeddings.shape == (3, emb.dim)
    first = index.window_embeddings[0:4]
    mean = first.mean(axis=0) / np.linalg.norm(first.mean(axis=0))
    np.testing.assert_allclose(index.embeddings[0], mean, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(index.embeddings, axis=1), 1.0, atol=1e-6)


def test_dense_scorer_takes_the_best_window_and_checks_offsets():
    emb = BagOfWordsEmbedder()
    windows = emb.embed_documents(["grey sea", "parrot Poll", "calm day"])
    s = DenseScorer(windows, emb, offsets=[0, 2])("parrot Poll")
    assert s[0] == pytest.approx(1.0) and s[1] < 0.5
    for bad in ([1, 2], [0, 0], [0, 3]):
        with pytest.raises(ValueError, match="offsets"):
            DenseScorer(windows, emb, offsets=bad)


SEA = [
    "The lighthouse keeper polished the great lamp every evening before the sun went down.",
    "Fishing boats came back to the harbour with nets full of silver herring.",
    "The old baker sold warm bread to the villagers at dawn.",
    "Children played on the beach and built castles out of wet sand.",
    "Gulls circled above the market square and quarrelled over scraps of fish.",
]


@pytest.mark.slow
def test_real_model_reads_the_end_of_a_500_word_fragment(real_embedder):
    """all-MiniLM-L6-v2 reads 256 word pieces: a fact in the last 100 words of a 500-word fragment was invisible."""
    filler = " ".join(SEA[i % 5] for i in range(60)).split()
    fact = "Daniel travelled to the bathroom with the football."
    fragments = [" ".join(filler[:500]), " ".join(filler[:440]) + " " + fact, " ".join(filler[40:540])]
    whole = FragRelIndex.from_fragments(fragments, embedder=real_embedder, alpha=0.0, show_progress=False)
    cut = FragRelIndex.from_fragments(
        fragments, embedder=real_embedder, window_words=None, alpha=0.0, show_progress=False
    )
    assert whole.window_words == 152
    question = "Where is the football?"
    assert whole.retrieve(question, k=1)[0].fragment.position == 1
    s_whole, s_cut = whole.scores(question)[0], cut.scores(question)[0]
    assert s_whole[1] - max(s_whole[0], s_whole[2]) > 0.03
    assert s_cut[1] == pytest.approx(s_cut[0], abs=1e-5)  # cut: the fact is never read, same text as fragment 0
