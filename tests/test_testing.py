"""The deterministic fakes shipped in fragrel_integrations.testing: they must behave like the real things."""

from __future__ import annotations

import numpy as np
import pytest

from fragrel_integrations import FragRelIndex, testing
from fragrel_integrations.models.chat import ChatModel
from fragrel_integrations.models.embedder import Embedder, check_embeddings
from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel

TOPICS = {
    "sea": [
        "The ship sailed across the stormy sea.",
        "Waves crashed against the ship as the sailors hauled the sails.",
        "The captain steered the ship through the waves of the sea.",
        "Sailors on the ship feared the storm at sea.",
    ],
    "cooking": [
        "Chop the onions and fry them in butter for the sauce.",
        "Add garlic to the onions and stir the sauce.",
        "Simmer the sauce with tomatoes, garlic and onions.",
        "Season the sauce with salt, garlic and fresh basil.",
    ],
    "finance": [
        "Stock prices fell as investors sold bank shares.",
        "The bank raised interest rates to slow inflation.",
        "Investors bought bonds when interest rates rose.",
        "Shares of the bank fell after the inflation report.",
    ],
}


def test_all_is_pinned():
    assert sorted(testing.__all__) == ["DEFAULT_STOPWORDS", "HashingEmbedder", "ScriptedChatModel"]


def test_hashing_embedder_is_an_embedder_with_valid_output():
    emb = HashingEmbedder(dim=128)
    assert isinstance(emb, Embedder)
    texts = [t for group in TOPICS.values() for t in group] + ["", "the of and"]
    vecs = check_embeddings(emb.embed_documents(texts), len(texts))
    assert vecs.dtype == np.float32 and vecs.shape == (len(texts), 128)
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(vecs[-1], vecs[-2])  # no content word: one fixed vector, never NaN
    assert emb.embed_documents([]).shape == (0, 128)


def test_hashing_embedder_is_deterministic_and_seeded():
    a = HashingEmbedder(seed=3).embed_query("red apple pie")
    np.testing.assert_array_equal(a, HashingEmbedder(seed=3).embed_query("red apple pie"))
    assert not np.array_equal(a, HashingEmbedder(seed=4).embed_query("red apple pie"))


def test_hashing_embedder_vectors_carry_topic_signal():
    emb = HashingEmbedder(dim=512)
    labels = [name for name, group in TOPICS.items() for _ in group]
    vecs = emb.embed_documents([t for group in TOPICS.values() for t in group])
    sims = vecs @ vecs.T
    np.fill_diagonal(sims, -np.inf)
    nearest = sims.argmax(axis=1)
    assert all(labels[i] == labels[j] for i, j in enumerate(nearest))  # every nearest neighbour shares the topic
    same = np.array([[a == b for b in labels] for a in labels])
    np.fill_diagonal(same, False)
    off = ~same
    np.fill_diagonal(off, False)
    assert sims[same].mean() > 0.15 > abs(sims[off].mean())


def test_hashing_embedder_clusters_by_topic():
    from scipy.cluster.hierarchy import fcluster, linkage

    emb = HashingEmbedder(dim=512)
    vecs = emb.embed_documents([t for group in TOPICS.values() for t in group]).astype(np.float64)
    assign = fcluster(linkage(vecs, method="average", metric="cosine"), t=3, criterion="maxclust")
    assert [len(set(assign[i : i + 4])) for i in (0, 4, 8)] == [1, 1, 1]  # each topic in one cluster
    assert len(set(assign)) == 3  # and the three topics in different clusters


def test_hashing_embedder_drives_real_retrieval():
    texts = [t for group in TOPICS.values() for t in group]
    index = FragRelIndex.from_fragments(texts, embedder=HashingEmbedder(dim=512), show_progress=False)
    hits = index.retrieve("garlic sauce with onions", k=3)
    assert {h.fragment.position for h in hits} <= {4, 5, 6, 7}


def test_hashing_embedder_bigrams_and_validation():
    emb = HashingEmbedder(bigrams=True)
    assert "new york" in emb.tokens("New York city")
    with pytest.raises(ValueError, match="dim"):
        HashingEmbedder(dim=1)
    with pytest.raises(TypeError):
        emb.embed_query(5)


def test_scripted_chat_model_script_errors_and_exhaustion():
    model = ScriptedChatModel(["first", ValueError("planned"), "third"])
    assert isinstance(model, ChatModel)
    assert model.invoke("a") == "first"
    with pytest.raises(ValueError, match="planned"):
        model.invoke("b")
    assert model.invoke("c") == "third"
    with pytest.raises(RuntimeError, match="ran out of responses after 3"):
        model.invoke("d")
    cyc = ScriptedChatModel(["x", "y"], cycle=True)
    assert [cyc.invoke("q") for _ in range(3)] == ["x", "y", "x"]


def test_scripted_chat_model_function_and_params():
    model = ScriptedChatModel(lambda msgs: " ".join(m["content"] for m in msgs))
    out = model.invoke([{"role": "system", "content": "a b"}, {"role": "user", "content": "c. d"}], stop=".")
    assert out == "a b c"
    assert model.invoke("one two three", max_tokens=2) == "one two"
    bad = ScriptedChatModel(lambda msgs: 3)
    with pytest.raises(TypeError, match="must return str"):
        bad.invoke("x")


def test_scripted_chat_model_validation():
    with pytest.raises(TypeError):
        ScriptedChatModel("not a list")
    with pytest.raises(TypeError):
        ScriptedChatModel([1])
    with pytest.raises(ValueError):
        ScriptedChatModel(["x"], delay=-1)


async def test_scripted_chat_model_async_records_concurrency():
    import asyncio

    model = ScriptedChatModel(["a", "b", "c"], delay=0.05)
    out = await asyncio.gather(*(model.ainvoke(str(i)) for i in range(3)))
    assert sorted(out) == ["a", "b", "c"] and model.max_in_flight == 3 and model.in_flight == 0
