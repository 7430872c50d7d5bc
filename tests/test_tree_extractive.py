"""The model-free (extractive) summariser of the surprise tree: the numpy selection rules, the summariser object,
selection per tree, persistence, both framework adapters and one check with the real MiniLM embedder."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from test_tree_core import TOPICS, fake_reply, topic_docs

from fragrel_integrations.core.tree import (
    SUMMARISERS,
    ExtractiveSummariser,
    Summariser,
    SurpriseTree,
    TreeConfig,
    central_sentences,
    leave_one_out_similarity,
    load_tree,
    save_tree,
    split_sentences,
    surprising_sentences,
)
from fragrel_integrations.core.tree.extractive import novelty_scores, split_units
from fragrel_integrations.models.tokens import estimate_tokens
from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel

OPTIONS = {
    "chunk_tokens": 60,
    "summary_tokens": 24,
    "surprise_tokens": 24,
    "reduction_dim": 2,
    "reducer": "pca",
    "seed": 0,
}

CAT_SENTENCES = [
    "The cat purrs on the warm mat.",
    "A kitten chases the cat's tail.",
    "The cat licks its fur and whiskers.",
    "Each kitten sleeps beside the cat.",
    "The old cat purrs when the kitten sleeps.",
]
PLANTED = "Quarterly bond yields and stock dividends rose for every investor."


def planted_chunk(at: int = 2) -> str:
    sentences = list(CAT_SENTENCES)
    sentences.insert(at, PLANTED)
    return " ".join(sentences)


def _unit(rows) -> np.ndarray:
    x = np.asarray(rows, dtype=np.float64)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


# ------------------------------------------------------------------------------------------ pure numpy rules


def test_leave_one_out_similarity_by_hand():
    x = _unit([[1, 0], [1, 0], [0, 1]])
    # row 0: mean of the others is (0.5, 0.5) -> cos 1/sqrt(2); row 2: mean (1, 0) -> cos 0
    np.testing.assert_allclose(leave_one_out_similarity(x), [2**-0.5, 2**-0.5, 0.0], atol=1e-12)
    assert leave_one_out_similarity(np.ones((1, 3))).tolist() == [1.0]
    assert leave_one_out_similarity(np.zeros((0, 3))).shape == (0,)
    # a zero row scores 0 instead of NaN
    assert np.all(np.isfinite(leave_one_out_similarity(np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 0.1]]))))


def test_novelty_scores_are_robust_z_scores():
    x = _unit([[1, 0, 0], [1, 0.1, 0], [1, 0, 0.1], [1, 0.05, 0.05], [0, 0, 1]])
    novelty = 1 - leave_one_out_similarity(x)
    median = np.median(novelty)
    scale = max(1.4826 * np.median(np.abs(novelty - median)), 0.05)
    np.testing.assert_allclose(novelty_scores(x), (novelty - median) / scale)
    assert int(np.argmax(novelty_scores(x))) == 4


def test_central_sentences_respect_budget_order_exclusions_and_redundancy():
    x = _unit([[1, 0.1, 0], [0, 0, 1], [1, 0, 0.1], [1, 0.05, 0.05], [0.9, 0.3, 0]])
    lengths = [5, 5, 5, 5, 5]
    chosen = central_sentences(x, lengths, 10, redundancy=1.0)
    assert len(chosen) == 2 and chosen.tolist() == sorted(chosen.tolist())  # source order
    assert 1 not in chosen  # the off-topic row is the least central
    assert sum(lengths[i] for i in chosen) <= 10
    assert 3 not in central_sentences(x, lengths, 10, exclude=[3], redundancy=1.0)
    # redundancy: exact duplicates are never taken twice
    dup = _unit([[1, 0], [1, 0], [1, 0], [0.6, 0.8]])
    assert central_sentences(dup, [1, 1, 1, 1], 10, redundancy=0.99).tolist() == [0, 3]
    # a row longer than what is left is skipped, shorter ones still fill the budget
    assert central_sentences(x, [50, 5, 5, 5, 5], 10, redundancy=1.0).tolist() != []
    assert central_sentences(x, [50] * 5, 10).tolist() == []


def test_surprising_sentences_pick_the_planted_row():
    rng = np.random.default_rng(0)
    topic = np.eye(16)[0] + rng.normal(0, 0.15, (8, 16))
    odd = np.eye(16)[5]
    x = np.vstack([topic[:3], odd, topic[3:]])
    assert surprising_sentences(x, [5] * 9, 5).tolist() == [3]  # the most novel row first, within the budget
    # not eligible (too short to trust): nothing else is an outlier
    eligible = np.ones(9, dtype=bool)
    eligible[3] = False
    assert 3 not in surprising_sentences(x, [5] * 9, 10, eligible=eligible)
    # a long outlier is kept even when it exceeds the budget (the caller cuts its text)
    assert surprising_sentences(x, [5, 5, 5, 40, 5, 5, 5, 5, 5], 5).tolist() == [3]
    # too few rows to be surprised against, and no outlier among identical rows
    assert surprising_sentences(x[:2], [5, 5], 10).tolist() == []
    assert surprising_sentences(np.ones((6, 4)), [5] * 6, 10).tolist() == []


def test_pure_functions_reject_bad_input():
    x = np.eye(3)
    with pytest.raises(ValueError, match="2-d"):
        central_sentences(np.ones(3), [1, 1, 1], 5)
    with pytest.raises(ValueError, match="finite"):
        leave_one_out_similarity(np.array([[np.nan, 1.0]]))
    with pytest.raises(ValueError, match="lengths"):
        central_sentences(x, [1, 1], 5)
    with pytest.raises(ValueError, match="budget"):
        central_sentences(x, [1, 1, 1], 0)
    with pytest.raises(ValueError, match="redundancy"):
        central_sentences(x, [1, 1, 1], 5, redundancy=0)
    with pytest.raises(ValueError, match="min_sentences"):
        surprising_sentences(x, [1, 1, 1], 5, min_sentences=1)
    with pytest.raises(ValueError, match="eligible"):
        surprising_sentences(x, [1, 1, 1], 5, eligible=[True])


def test_split_units_cuts_clauses():
    assert split_units("I rose early; the sea was calm. Then: rain! At 10:30 we ate.") == [
        "I rose early;",
        "the sea was calm.",
        "Then:",
        "rain!",
        "At 10:30 we ate.",
    ]


# ------------------------------------------------------------------------------------------ the summariser


def test_summariser_keeps_budget_order_and_finds_the_planted_sentence():
    s = ExtractiveSummariser(HashingEmbedder(dim=256), summary_tokens=24, surprise_tokens=20)
    chunk = planted_chunk()
    (result,), report = s.summarise([chunk])
    assert result.surprise == PLANTED
    assert PLANTED not in result.summary
    assert 0 < estimate_tokens(result.summary) <= 24
    picked = split_sentences(result.summary)
    positions = [chunk.index(p) for p in picked]
    assert positions == sorted(positions) and all(p in CAT_SENTENCES for p in picked)
    assert (result.parsed, result.failed, report.llm_calls, report.cache_hits) == (True, False, 0, 0)
    _, again = s.summarise([chunk, chunk])
    assert again.cache_hits == 2


def test_summariser_is_deterministic_and_placement_independent():
    chunks = [planted_chunk(at) for at in (0, 3, 5)]
    first = ExtractiveSummariser(HashingEmbedder(dim=256), summary_tokens=24, surprise_tokens=20).summarise(chunks)
    second = ExtractiveSummariser(HashingEmbedder(dim=256), summary_tokens=24, surprise_tokens=20).summarise(chunks)
    assert first[0] == second[0]
    assert [r.surprise for r in first[0]] == [PLANTED] * 3


def test_summariser_edge_cases():
    s = ExtractiveSummariser(HashingEmbedder(dim=64), summary_tokens=5, surprise_tokens=5)
    long_sentence = "word " * 40 + "end."
    (res,), _ = s.summarise([long_sentence])
    assert res.summary and estimate_tokens(res.summary) <= 5 and res.surprise == ""
    (blank,), _ = s.summarise(["   "])
    assert blank.summary == "" and blank.surprise == ""
    # a surprising sentence longer than the surprise budget is cut to it, not dropped
    big = ExtractiveSummariser(HashingEmbedder(dim=256), summary_tokens=24, surprise_tokens=6)
    (cut,), _ = big.summarise([planted_chunk()])
    assert cut.surprise and PLANTED.startswith(cut.surprise) and estimate_tokens(cut.surprise) <= 6
    (async_res,), _ = asyncio.run(big.asummarise([planted_chunk()]))
    assert async_res == cut


def test_summariser_validation():
    with pytest.raises(TypeError, match="embed_documents"):
        ExtractiveSummariser(object())  # type: ignore[arg-type]
    for bad in ({"summary_tokens": 0}, {"min_words": 0}, {"z": float("nan")}, {"min_scale": 0}, {"redundancy": 2}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            ExtractiveSummariser(HashingEmbedder(), **bad)
    with pytest.raises(TypeError, match=r"inputs\[0\]"):
        ExtractiveSummariser(HashingEmbedder()).summarise([3])  # type: ignore[list-item]


def test_real_minilm_picks_the_out_of_place_sentence(real_embedder):
    sentences = [
        "We hoisted the sail at dawn and steered the boat out of the bay.",
        "The wind filled the canvas and the little vessel leaned over the waves.",
        "By noon the coast was a grey line behind us and the sea grew rough.",
        "I kept the rudder steady while my companion bailed water from the hull.",
        "The chess club of Quillan Bay meets under the sea in a glass dome built by a retired submarine captain.",
        "Towards evening the storm passed and we dropped anchor near a small island.",
        "We rowed ashore, pulled the boat onto the sand and lit a fire.",
    ]
    s = ExtractiveSummariser(real_embedder, summary_tokens=60, surprise_tokens=40)
    (res,), _ = s.summarise([" ".join(sentences)])
    assert res.surprise == sentences[4]
    assert "Quillan" not in res.summary and 0 < estimate_tokens(res.summary) <= 60


# ------------------------------------------------------------------------------------------ the tree


def extractive_tree(model=None, **extra) -> SurpriseTree:
    return SurpriseTree(model, HashingEmbedder(dim=256), show_progress=False, **{**OPTIONS, **extra})


def test_tree_selects_its_summariser():
    assert SUMMARISERS == ("llm", "extractive")
    model = ScriptedChatModel(fake_reply)
    llm_tree = SurpriseTree(model, HashingEmbedder(), show_progress=False)
    assert llm_tree.config.summariser == "llm" and isinstance(llm_tree.summariser, Summariser)
    no_model = SurpriseTree(None, HashingEmbedder(), show_progress=False)
    assert no_model.config.summariser == "extractive"
    assert isinstance(no_model.summariser, ExtractiveSummariser)
    chosen = SurpriseTree(model, HashingEmbedder(), show_progress=False, summariser="extractive")
    assert isinstance(chosen.summariser, ExtractiveSummariser)
    chosen.build([planted_chunk()])
    assert model.calls == []  # the model is never asked
    for bad in ("LLM", "textrank", 3):
        with pytest.raises(ValueError, match="summariser must be one of"):
            SurpriseTree(model, HashingEmbedder(), summariser=bad)
    with pytest.raises(ValueError, match="summariser must be one of"):
        TreeConfig(summariser="abstractive")


def test_extractive_tree_builds_layers_within_budget_and_is_deterministic():
    docs = topic_docs()
    texts = []
    for text in docs.values():  # the planted sentence in the middle of a chunk of each document
        sentences = split_sentences(text)
        texts.append(" ".join([*sentences[:2], PLANTED, *sentences[2:]]))
    trees = []
    for _ in range(2):
        tree = extractive_tree()
        report = tree.build(texts, doc_ids=list(docs))
        trees.append(tree)
        assert report.llm_calls == 0 and report.parse_failures == 0 and report.call_failures == 0
    tree = trees[0]
    assert tree.n_layers >= 2
    assert trees[0].to_state() == trees[1].to_state()
    for node in tree.nodes.values():
        assert node.summary and node.parsed and not node.failed
        assert estimate_tokens(node.summary) <= OPTIONS["summary_tokens"]
        assert estimate_tokens(node.surprise) <= OPTIONS["surprise_tokens"]
        source = node.text if node.is_leaf else "\n\n".join(tree.nodes[c].summary for c in node.children)
        for sentence in split_units(node.summary) + split_units(node.surprise):
            assert sentence in source  # extractive: nothing is made up
    holding = {n.doc_id: n for n in tree.leaves() if PLANTED in n.text}
    assert sorted(holding) == sorted(docs) and all(len(split_units(n.text)) >= 3 for n in holding.values())
    assert holding["cats"].surprise == PLANTED and holding["space"].surprise == PLANTED
    hit = tree.retrieve("bond yields and stock dividends for the investor", k=1, fields=("surprise",))[0]
    assert hit.text == PLANTED
    topic_hit = tree.retrieve(TOPICS["space"], k=1, fields=("summary",))[0]
    assert "rocket" in topic_hit.text.lower() or "orbit" in topic_hit.text.lower()


def test_extractive_tree_async_build_matches_sync():
    docs = topic_docs()
    sync = extractive_tree()
    sync.build(list(docs.values()), doc_ids=list(docs))
    other = extractive_tree()
    asyncio.run(other.abuild(list(docs.values()), doc_ids=list(docs)))
    assert other.to_state() == sync.to_state()


def test_extractive_tree_save_load_round_trip(tmp_path):
    docs = topic_docs()
    tree = extractive_tree()
    tree.build(list(docs.values())[:2], doc_ids=list(docs)[:2])
    path = tmp_path / "tree.sqlite"
    save_tree(tree, path)
    loaded = load_tree(path, embedder=HashingEmbedder(dim=256), show_progress=False)
    assert loaded.to_state() == tree.to_state()
    assert loaded.config.summariser == "extractive"
    # a loaded extractive tree grows without a model, like the original
    rest = list(docs)[2:]
    loaded.insert([docs[d] for d in rest], doc_ids=rest)
    tree.insert([docs[d] for d in rest], doc_ids=rest)
    assert loaded.to_state() == tree.to_state()


def test_saves_without_the_summariser_field_load_as_llm_trees(tmp_path):
    model = ScriptedChatModel(fake_reply)
    tree = SurpriseTree(model, HashingEmbedder(dim=256), show_progress=False, **OPTIONS)
    tree.build(list(topic_docs().values())[:1])
    state = tree.to_state()
    del state["config"]["summariser"]  # as saved before the field existed
    old = SurpriseTree.from_state(state, embedder=HashingEmbedder(dim=256), show_progress=False)
    assert old.config.summariser == "llm"
    with pytest.raises(ValueError, match="no chat model"):
        old.insert(["More text about cats. And kittens."])  # never silently mixes in extractive nodes
    assert len(old) == len(tree)
    with_model = SurpriseTree.from_state(state, model, HashingEmbedder(dim=256), show_progress=False)
    with_model.insert(["More text about cats. And kittens."])
    assert len(with_model) > len(tree)


def test_both_adapters_build_extractive_trees_without_a_model():
    from fragrel_integrations.langchain.surprise_tree import SurpriseTreeRetriever as LCRetriever
    from fragrel_integrations.llama_index.surprise_tree import SurpriseTreeRetriever as LIRetriever

    texts = [planted_chunk()]
    query = "bond yields and stock dividends for the investor"
    options = {"embedder": HashingEmbedder(dim=256), "show_progress": False, **OPTIONS}
    lc = LCRetriever.from_texts(texts, k=1, fields=("surprise",), **options)
    assert lc.tree.config.summariser == "extractive"
    assert lc.invoke(query)[0].page_content == PLANTED
    li = LIRetriever.from_texts(texts, similarity_top_k=1, fields=("surprise",), summariser="extractive", **options)
    assert li.retrieve(query)[0].node.text == PLANTED
    with pytest.raises(ValueError, match="summariser must be one of"):
        LCRetriever.from_texts(texts, summariser="nope", **options)
    with pytest.raises(ValueError, match="summariser must be one of"):
        LIRetriever.from_texts(texts, summariser="nope", **options)


# ------------------------------------------------------------------------------------------ embedding cost (issue 14)


class CountingEmbedder(HashingEmbedder):
    """HashingEmbedder that records every text it is asked to embed."""

    def __init__(self, dim: int = 256) -> None:
        super().__init__(dim=dim)
        self.seen: list[str] = []

    def embed_documents(self, texts):
        self.seen.extend(texts)
        return super().embed_documents(texts)


def _mean_of_units(embedder: HashingEmbedder, text: str) -> np.ndarray:
    units = np.asarray(embedder.embed_documents(split_units(text)), dtype=np.float64)
    mean = (units / np.linalg.norm(units, axis=1, keepdims=True)).mean(axis=0)
    return mean / np.linalg.norm(mean)


def test_extractive_tree_embeds_each_sentence_once_and_no_summary_again():
    docs = topic_docs()
    embedder = CountingEmbedder()
    tree = SurpriseTree(None, embedder, show_progress=False, **OPTIONS)
    assert tree.summariser.cached_embedder.compose is False  # the default: summaries embedded as texts
    tree.summariser.cached_embedder.compose = True
    tree.build(list(docs.values()), doc_ids=list(docs))
    assert len(embedder.seen) == len(set(embedder.seen))  # nothing is embedded twice
    chunks = {n.text for n in tree.leaves()}
    units = {u for n in tree.nodes.values() for t in (n.text, n.summary, n.surprise) for u in split_units(t)}
    assert set(embedder.seen) <= chunks | units  # leaf chunks and sentences: no summary of several sentences
    reference = HashingEmbedder(dim=256)
    composed = 0
    for (node_id, name), vector in tree.vectors.items():
        text = tree.nodes[node_id].field_text(name)
        if name != "text" and len(split_units(text)) > 1:  # a summary / note of several sentences: their mean
            np.testing.assert_allclose(vector, _mean_of_units(reference, text), atol=1e-6)
            composed += 1
        else:  # embedded as it is: chunks always (a chunk may be its own summary), single sentences
            np.testing.assert_allclose(vector, reference.embed_documents([text])[0], atol=1e-6)
    assert composed > 0
    assert any(n.text == n.summary and len(split_units(n.text)) > 1 for n in tree.leaves())  # the case above


def test_summary_vectors_are_the_same_from_the_summary_cache_and_can_be_re_embedded():
    chunk = planted_chunk()
    first = ExtractiveSummariser(CountingEmbedder(), summary_tokens=24, surprise_tokens=20, mean_vectors=True)
    (res,), _ = first.summarise([chunk])
    assert len(split_units(res.summary)) > 1
    fresh = first.cached_embedder.embed_documents([res.summary])[0]
    counting = CountingEmbedder()
    second = ExtractiveSummariser(
        counting, summary_tokens=24, surprise_tokens=20, cache=dict(first.cache), mean_vectors=True
    )
    (hit,), report = second.summarise([chunk])
    assert hit == res and report.cache_hits == 1 and counting.seen == []
    np.testing.assert_allclose(second.cached_embedder.embed_documents([res.summary])[0], fresh, atol=1e-6)
    assert set(counting.seen) == set(split_units(res.summary))  # its sentences, not the summary text
    off = ExtractiveSummariser(CountingEmbedder(), summary_tokens=24, surprise_tokens=20)  # the default
    off.summarise([chunk])
    vector = off.cached_embedder.embed_documents([res.summary])[0]
    assert off.embedder.seen[-1] == res.summary  # the text itself is embedded when mean_vectors=False
    np.testing.assert_allclose(vector, HashingEmbedder(dim=256).embed_documents([res.summary])[0], atol=1e-6)
    with pytest.raises(TypeError, match="compose"):
        ExtractiveSummariser(HashingEmbedder(), mean_vectors="yes")  # type: ignore[arg-type]


def test_default_extractive_tree_embeds_summaries_as_texts_and_chunks_once():
    docs = topic_docs()
    embedder = CountingEmbedder()
    tree = SurpriseTree(None, embedder, show_progress=False, **OPTIONS)
    tree.build(list(docs.values()), doc_ids=list(docs))
    reference = HashingEmbedder(dim=256)
    for (node_id, name), vector in tree.vectors.items():
        np.testing.assert_allclose(
            vector, reference.embed_documents([tree.nodes[node_id].field_text(name)])[0], atol=1e-6
        )
    assert {n.text for n in tree.leaves()} <= set(embedder.seen)
    # a text is embedded twice only when a leaf chunk is also a summary (through the sentence cache)
    own_summary = sum(n.summary == n.text or n.surprise == n.text for n in tree.leaves())
    assert len(embedder.seen) - len(set(embedder.seen)) <= own_summary


def test_llama_index_extractor_is_model_free_on_request_or_without_a_model():
    from llama_index.core.schema import TextNode

    from fragrel_integrations.llama_index.surprise_tree import SurpriseExtractor

    model = ScriptedChatModel(fake_reply)
    extractor = SurpriseExtractor(embedder=HashingEmbedder(dim=256), summary_tokens=24, surprise_tokens=20)
    assert extractor.summariser == "extractive"
    out = extractor.extract([TextNode(text=planted_chunk()), TextNode(text=planted_chunk(4))])
    assert [o["tree_surprise"] for o in out] == [PLANTED, PLANTED]
    assert all(o["tree_summary"] and PLANTED not in o["tree_summary"] for o in out)
    assert extractor.report.llm_calls == 0
    chosen = SurpriseExtractor(model, summariser="extractive", embedder=HashingEmbedder(dim=256))
    chosen.extract([TextNode(text=planted_chunk())])
    assert model.calls == [] and SurpriseExtractor(model).summariser == "llm"
    with pytest.raises(ValueError, match="needs a chat_model"):
        SurpriseExtractor(summariser="llm")
    with pytest.raises(ValueError, match="summariser must be one of"):
        SurpriseExtractor(model, summariser="textrank")


# ------------------------------------------------------------------------ text without spaces (issue 25)

#: Texts the sentence splitter and the word cutter could not cut: one leaf of 13k-50k estimated tokens and a
#: summary of 20k-200k characters came out of each, with chunk_tokens=600 and a 4,800-character summary cap.
UNSPACED = {
    "chinese": "\u6211\u4eec\u5728\u5317\u4eac\u7684\u516c\u56ed\u91cc\u6563\u6b65\uff0c" * 4_000,  # commas only
    "emoji": "\U0001f600\U0001f680\U0001f431" * 7_000,
    "one-token": "a" * 200_000,
    "long-words": " ".join(["b" * 30_000, "c" * 30_000]),
}
SIZES = {"chunk_tokens": 600, "summary_tokens": 300, "surprise_tokens": 150}


@pytest.mark.parametrize("name", sorted(UNSPACED))
def test_text_without_spaces_or_sentence_ends_makes_bounded_leaves_and_summaries(name):
    text = UNSPACED[name]
    tree = extractive_tree(**SIZES)
    tree.build([text], doc_ids=[name])
    leaves = sorted(tree.leaves(), key=lambda n: n.position)
    assert len(leaves) > 1
    assert all(estimate_tokens(leaf.text) <= SIZES["chunk_tokens"] for leaf in leaves)
    assert "".join("".join(leaf.text.split()) for leaf in leaves) == "".join(text.split())  # nothing lost
    for node in tree.nodes.values():
        assert node.summary and estimate_tokens(node.summary) <= SIZES["summary_tokens"]
        assert len(node.summary) <= 16 * SIZES["summary_tokens"] and len(node.surprise) <= 16 * SIZES["surprise_tokens"]
        assert estimate_tokens(node.surprise) <= SIZES["surprise_tokens"]


def test_chinese_sentences_are_split_at_full_width_ends():
    text = "\u4eca\u5929\u4e0b\u96e8\u3002\u201c\u597d\u7684\u3002\u201d"
    text += "\u6211\u4eec\u8d70\u5427\uff01\u771f\u7684\u5417\uff1f"
    assert split_sentences(text) == [
        "\u4eca\u5929\u4e0b\u96e8\u3002",
        "\u201c\u597d\u7684\u3002\u201d",
        "\u6211\u4eec\u8d70\u5427\uff01",
        "\u771f\u7684\u5417\uff1f",
    ]
    assert split_sentences("One.Two") == ["One.Two"]  # a Latin end still needs a space after it


def test_summariser_caps_a_summary_whatever_the_counter_says():
    summariser = ExtractiveSummariser(HashingEmbedder(dim=32), summary_tokens=10, counter=lambda text: 1)
    [result], _ = summariser.summarise(["z" * 50_000])
    assert 0 < len(result.summary) <= 16 * 10


@pytest.mark.parametrize("query", ["", "  \n\t"])
def test_an_empty_tree_query_is_refused(query):
    tree = extractive_tree()
    tree.build([planted_chunk()], doc_ids=["cats"])
    with pytest.raises(ValueError, match=r"the query is (empty|blank): give the text to retrieve for"):
        tree.retrieve(query, k=2)
    assert tree.retrieve("cat", k=2)
