"""The surprise tree core: chunking, parser, clustering, build / insert / retrieve, persistence (deterministic fakes)
and one end-to-end build with the embedded real LLM (slow)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import shutil
import sqlite3
import sys
import time

import numpy as np
import pytest

import fragrel_integrations.core.tree as tree_pkg
from fragrel_integrations.core.token_budget import OUTPUT_CHARS_PER_TOKEN
from fragrel_integrations.core.tree import (
    FIELDS,
    SurpriseTree,
    TreeConfig,
    TreeRelation,
    chunk_text,
    cluster_embeddings,
    gmm_clusters,
    load_tree,
    pack_by_tokens,
    parse_summary,
    reduce_dimensions,
    save_tree,
    split_sentences,
    summary_messages,
)
from fragrel_integrations.models.tokens import estimate_tokens
from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel

TOPICS = {
    "cats": "cat kitten purr whiskers fur meow litter paws",
    "markets": "stock market shares trading price investor bond dividend",
    "space": "rocket launch orbit astronaut space mission capsule booster",
}


def _passage(messages: list[dict[str, str]]) -> str:
    user = messages[-1]["content"]
    return user.split("Passage:\n", 1)[1].split("\n\nReply in exactly", 1)[0]


def fake_reply(messages: list[dict[str, str]]) -> str:
    """A deterministic 'summariser': the first 12 words of the passage; the surprise names its last word."""
    words = _passage(messages).replace(".", " ").split()
    return f"(Summary): {' '.join(words[:12])}.\n(Surprise): oddly zzsurprise {words[-1]}"


def topic_docs(n_per_topic: int = 4, seed: int = 0) -> dict[str, str]:
    """One document per topic; each sentence draws words of its topic, so chunks of a topic share vocabulary."""
    rng = np.random.default_rng(seed)
    docs = {}
    for name, vocab in TOPICS.items():
        words = vocab.split()
        sentences = [" ".join(rng.choice(words, 8)).capitalize() + "." for _ in range(n_per_topic * 3)]
        docs[name] = " ".join(sentences)
    return docs


def make_tree(model=None, **kwargs) -> SurpriseTree:
    model = model or ScriptedChatModel(fake_reply)
    options = {"chunk_tokens": 40, "summary_tokens": 40, "reduction_dim": 2, "max_cluster_tokens": 200, "seed": 0}
    options.update(kwargs)
    return SurpriseTree(model, HashingEmbedder(dim=256), show_progress=False, **options)


def built_tree(**kwargs) -> tuple[SurpriseTree, ScriptedChatModel]:
    model = ScriptedChatModel(fake_reply)
    tree = make_tree(model, **kwargs)
    docs = topic_docs()
    tree.build(list(docs.values()), doc_ids=list(docs))
    return tree, model


# ---------------------------------------------------------------------------------------------------- chunking


def test_public_names_are_pinned():
    assert sorted(tree_pkg.__all__) == sorted(
        [
            "FIELDS",
            "MAX_METADATA_DEPTH",
            "PROMPT_VERSION",
            "SUMMARISERS",
            "SUMMARY_SYSTEM_PROMPT",
            "ExtractiveSummariser",
            "central_sentences",
            "leave_one_out_similarity",
            "surprising_sentences",
            "BuildReport",
            "ParsedSummary",
            "Summariser",
            "SummaryResult",
            "SurpriseTree",
            "TreeConfig",
            "TreeHit",
            "TreeNode",
            "TreeRelation",
            "check_state",
            "chunk_text",
            "cluster_embeddings",
            "gmm_clusters",
            "load_tree",
            "pack_by_tokens",
            "parse_summary",
            "reduce_dimensions",
            "save_tree",
            "split_sentences",
            "summary_messages",
        ]
    )


def test_chunks_respect_the_limit_and_keep_sentences_whole():
    text = " ".join(f"Sentence number {i} talks about item {i} here." for i in range(40))
    chunks = chunk_text(text, max_tokens=30)
    assert len(chunks) > 1
    assert all(estimate_tokens(c) <= 30 for c in chunks)
    assert " ".join(chunks) == " ".join(text.split())  # nothing lost, order kept
    for c in chunks:  # every chunk starts and ends on a sentence boundary
        assert c.startswith("Sentence") and c.endswith(".")


def test_sentence_that_would_overflow_moves_to_the_next_chunk():
    chunks = chunk_text("Short one. " + "Word " * 8 + "end.", max_tokens=12)
    assert chunks == ["Short one.", "Word Word Word Word Word Word Word Word end."]


def test_sentence_longer_than_the_limit_is_cut_at_words():
    long = " ".join(["alpha"] * 50) + "."
    chunks = chunk_text("Tiny. " + long, max_tokens=10)
    assert chunks[0] == "Tiny."
    assert all(estimate_tokens(c) <= 10 for c in chunks)
    assert " ".join(chunks).split() == ("Tiny. " + long).split()


def test_chunking_edge_cases():
    assert chunk_text("") == []
    assert split_sentences("  \n\n ") == []
    assert chunk_text("No punctuation at all", max_tokens=100) == ["No punctuation at all"]
    with pytest.raises(ValueError, match="max_tokens"):
        chunk_text("x", max_tokens=0)
    with pytest.raises(TypeError):
        chunk_text(b"bytes")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------- parser


@pytest.mark.parametrize(
    ("reply", "summary", "surprise", "ok"),
    [
        ("(Summary): A.\n(Surprise): B.", "A.", "B.", True),
        ("(surprise): B.\n(summary): A.", "A.", "B.", True),  # reversed order, lower case
        ("**(Summary):** A.\n**(Surprise):** B.", "A.", "B.", True),  # markdown
        ("Summary: A.\nSurprising facts: B; C.", "A.", "B; C.", True),  # no brackets, variant label
        ("(Summary): A.\n(Surprise): None", "A.", "", True),  # no surprise is fine
        ("(Summary): A.\n(Surprise): N/A.", "A.", "", True),
        ("(Summary): A.\n(Surprise): B.\n(Summary): A again.\n(Surprise): C.", "A.", "B.", True),  # loop
        ("(Summary): A only.", "A only.", "", False),  # missing surprise
        ("(Surprise): B only.", "B only.", "", False),  # missing summary
        ("(Summary):\n(Surprise): B.", "B.", "", False),  # empty summary section
        ("Plain text reply.", "Plain text reply.", "", False),
        ("", "", "", False),
        ("The summary: is inline (Surprise): x", "The summary: is inline x", "", False),  # no summary label
        # regressions (issue 14): the one-line layout and labels without colons were not split
        ("(Summary): Tom buys a boat. (Surprise): The boat is glass.", "Tom buys a boat.", "The boat is glass.", True),
        ("**Summary:** A dog barks. Surprise: None", "A dog barks.", "", True),
        ("(Summary) A.\n(Surprise) B.", "A.", "B.", True),
        ("(Summary) A. (Surprise) B.", "A.", "B.", True),
        ("**Summary**\nA.\n**Surprise**\nB.", "A.", "B.", True),
        ("Summary\nA.\nSurprising facts\nB.", "A.", "B.", True),
        ("This is a summary of events. Nothing odd.", "This is a summary of events. Nothing odd.", "", False),
        ("A summary: it is fine.", "A summary: it is fine.", "", False),  # the word inside a sentence
    ],
)
def test_parser_edge_cases(reply, summary, surprise, ok):
    parsed = parse_summary(reply)
    assert (parsed.summary, parsed.surprise, parsed.ok) == (summary, surprise, ok)


def test_parser_rejects_non_strings_and_prompt_validates():
    with pytest.raises(TypeError):
        parse_summary(None)
    with pytest.raises(ValueError, match="summary_tokens"):
        summary_messages("x", 0)
    msgs = summary_messages("The passage text.", 300)
    assert "The passage text." in msgs[-1]["content"] and "(Surprise):" in msgs[-1]["content"]


# ---------------------------------------------------------------------------------------------------- clustering


def _topic_embeddings(per_topic: int = 6) -> tuple[np.ndarray, list[str]]:
    rng = np.random.default_rng(1)
    texts, labels = [], []
    for name, vocab in TOPICS.items():
        for _ in range(per_topic):
            texts.append(" ".join(rng.choice(vocab.split(), 5)))
            labels.append(name)
    return HashingEmbedder(dim=256).embed_documents(texts), labels


def test_clustering_recovers_topics_and_is_seeded():
    x, labels = _topic_embeddings()
    clusters = cluster_embeddings(x, [10] * len(x), max_cluster_tokens=1000, dim=2, seed=0)
    assert sorted(map(len, clusters)) == [6, 6, 6]
    for c in clusters:
        assert len({labels[i] for i in c}) == 1
    assert cluster_embeddings(x, [10] * len(x), max_cluster_tokens=1000, dim=2, seed=0) == clusters


def test_clustering_respects_the_token_cap():
    x, _ = _topic_embeddings()
    lengths = [30] * len(x)
    clusters = cluster_embeddings(x, lengths, max_cluster_tokens=70, dim=2, seed=0)
    assert all(sum(lengths[i] for i in c) <= 70 for c in clusters)
    assert set().union(*map(set, clusters)) == set(range(len(x)))  # nobody lost


def test_unsplittable_clusters_terminate():
    x = np.ones((30, 16), dtype=np.float32)  # identical summaries: no GMM can split them
    start = time.perf_counter()
    clusters = cluster_embeddings(x, [10] * 30, max_cluster_tokens=25, dim=3, seed=0)
    assert time.perf_counter() - start < 30
    assert all(len(c) <= 2 for c in clusters)
    assert sorted(i for c in clusters for i in c) == list(range(30))
    # a single summary over the cap is a cluster of its own; the rest still fit
    clusters = cluster_embeddings(x[:3], [500, 5, 5], max_cluster_tokens=20, dim=3, seed=0)
    assert [0] in clusters and all(sum([500, 5, 5][i] for i in c) <= 20 for c in clusters if c != [0])


def test_small_cases_are_guarded():
    assert cluster_embeddings(np.zeros((0, 4)), [], max_cluster_tokens=10) == []
    assert cluster_embeddings(np.ones((1, 4)), [3], max_cluster_tokens=10) == [[0]]
    assert cluster_embeddings(np.eye(2), [3, 3], max_cluster_tokens=10) == [[0, 1]]
    three = cluster_embeddings(np.eye(3), [3, 3, 3], max_cluster_tokens=100, dim=10)
    assert sorted(i for c in three for i in c) == [0, 1, 2]
    assert reduce_dimensions(np.eye(5), 10, method="pca").shape == (5, 3)  # n - 2 components at most
    assert reduce_dimensions(np.eye(2), 10).shape == (2, 2)
    assert gmm_clusters(np.zeros((0, 2))) == []
    assert pack_by_tokens([], [], 5) == []


def test_gmm_search_stops_after_bic_patience_with_the_same_clusters(monkeypatch):
    import sklearn.mixture

    import fragrel_integrations.core.tree.clustering as clustering

    x = np.concatenate([np.random.default_rng(s).normal(c, 0.05, size=(30, 2)) for s, c in ((0, 0.0), (1, 5.0))])
    fitted: list[int] = []

    class Counting(sklearn.mixture.GaussianMixture):
        def fit(self, *args, **kwargs):
            fitted.append(self.n_components)
            return super().fit(*args, **kwargs)

    monkeypatch.setattr(sklearn.mixture, "GaussianMixture", Counting)
    found = gmm_clusters(x, max_clusters=50)
    assert found == [list(range(30)), list(range(30, 60))]
    assert fitted == list(range(1, 2 + clustering.BIC_PATIENCE + 1))  # 59 counts without the patience
    fitted.clear()
    monkeypatch.setattr(clustering, "BIC_PATIENCE", 10**6)
    assert gmm_clusters(x, max_clusters=50) == found and len(fitted) == 50


def test_chunking_counts_each_sentence_once():
    seen: list[str] = []

    def counter(text: str) -> int:
        seen.append(text)
        return len(text.split())

    chunks = chunk_text("One two three. Four five. Six seven eight nine.", max_tokens=6, counter=counter)
    assert chunks == ["One two three. Four five.", "Six seven eight nine."]
    assert seen == ["One two three.", "Four five.", "Six seven eight nine."]  # once each (was twice)


def test_clustering_validation():
    with pytest.raises(ValueError, match="lengths"):
        cluster_embeddings(np.eye(3), [1, 2], max_cluster_tokens=5)
    with pytest.raises(ValueError, match="max_cluster_tokens"):
        cluster_embeddings(np.eye(3), [1, 2, 3], max_cluster_tokens=0)
    with pytest.raises(ValueError, match="method"):
        reduce_dimensions(np.eye(4), 2, method="tsne")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="threshold"):
        gmm_clusters(np.eye(4), threshold=0)


def test_umap_missing_names_the_extra_and_auto_falls_back_to_pca(monkeypatch):
    x = np.random.default_rng(0).normal(size=(20, 8))
    monkeypatch.setitem(sys.modules, "umap", None)  # as if umap-learn were not installed
    with pytest.raises(ImportError, match=r"fragrel-integrations\[umap\]"):
        reduce_dimensions(x, 2, method="umap")
    assert np.allclose(reduce_dimensions(x, 2, method="auto"), reduce_dimensions(x, 2, method="pca"))


needs_umap = pytest.mark.skipif(importlib.util.find_spec("umap") is None, reason="umap-learn not installed")


@needs_umap
def test_umap_reduction_is_seeded_and_used_by_auto():
    x, _ = _topic_embeddings()
    a = reduce_dimensions(x, 2, seed=3, method="umap")
    assert a.shape == (x.shape[0], 2) and np.all(np.isfinite(a))
    assert np.array_equal(a, reduce_dimensions(x, 2, seed=3, method="umap"))
    assert np.array_equal(a, reduce_dimensions(x, 2, seed=3, method="auto"))
    assert not np.allclose(a, reduce_dimensions(x, 2, seed=3, method="pca"))


@needs_umap
@pytest.mark.parametrize("n", [4, 5, 6, 9])
def test_umap_small_inputs_do_not_crash(n):
    x = np.random.default_rng(n).normal(size=(n, 16))
    out = reduce_dimensions(x, 2, method="umap")
    assert out.shape[0] == n and np.all(np.isfinite(out))
    groups = cluster_embeddings(x, [5] * n, method="umap", dim=2, max_cluster_tokens=100)
    assert {i for g in groups for i in g} == set(range(n))  # soft clustering: every row in at least one cluster


@needs_umap
def test_tree_built_with_umap_clusters_topics_and_is_seeded():
    tree, _ = built_tree(reducer="umap")
    again, _ = built_tree(reducer="umap")
    assert [(n.layer, n.children, n.summary) for n in tree.nodes.values()] == [
        (n.layer, n.children, n.summary) for n in again.nodes.values()
    ]
    for parent in tree.layer(1):
        docs = {tree.nodes[c].doc_id for c in parent.children}
        assert len(docs) == 1, f"a layer-1 cluster mixes topics: {docs}"


def test_build_makes_layers_and_embeds_every_text():
    tree, model = built_tree()
    assert tree.n_layers >= 2
    leaves = tree.leaves()
    assert len(leaves) >= 6 and {n.doc_id for n in leaves} == set(TOPICS)
    for node in tree.nodes.values():
        assert node.summary and not node.failed and node.parsed
        assert node.surprise.startswith("oddly zzsurprise")
        for f in FIELDS:
            assert ((node.id, f) in tree.vectors) == bool(node.field_text(f))
    assert tree.report.llm_calls == len(model.calls)
    assert tree.report.llm_calls + tree.report.cache_hits == len(tree.nodes)
    # positions number the chunks of each document
    for doc in TOPICS:
        assert [n.position for n in leaves if n.doc_id == doc] == list(range(sum(n.doc_id == doc for n in leaves)))
    # every non-leaf summarises its children's summaries only (never their surprise facts)
    cluster_calls = [c for c in model.calls if "zzsurprise" in str(c)]
    assert cluster_calls == []
    for node in tree.nodes.values():
        for c in node.children:
            assert tree.nodes[c].layer == node.layer - 1


def test_clusters_follow_topics():
    tree, _ = built_tree()
    for parent in tree.layer(1):
        docs = {tree.nodes[c].doc_id for c in parent.children}
        assert len(docs) == 1, docs


def test_same_input_and_seed_give_the_same_tree():
    a, _ = built_tree()
    b, _ = built_tree()
    assert a.to_state() == b.to_state()


def test_layers_stop_and_every_node_is_reachable():
    tree, _ = built_tree(max_layers=1)
    assert tree.n_layers == 2
    reachable = set()
    stack = [n.id for n in tree.roots()]
    while stack:
        i = stack.pop()
        reachable.add(i)
        stack.extend(tree.nodes[i].children)
    assert reachable == set(tree.nodes)


def test_failed_and_malformed_calls_never_crash_the_build():
    def flaky(messages):
        passage = _passage(messages)
        if "whiskers" in passage.split()[:3] or "Whiskers" in passage.split()[:1]:
            raise RuntimeError("backend exploded")
        if "orbit" in passage:
            return "I think this is about space things."  # no sections
        if "bond" in passage:
            return "   "  # empty
        return fake_reply(messages)

    tree = make_tree(ScriptedChatModel(flaky))
    docs = topic_docs()
    report = tree.build(list(docs.values()), doc_ids=list(docs))
    assert report.call_failures >= 1 and report.parse_failures >= 1
    assert len(report.errors) == report.call_failures
    for node in tree.nodes.values():
        assert node.summary
        assert "exploded" not in node.summary and "RuntimeError" not in node.summary
        if node.failed:  # the fallback is the start of the input, never the error
            source = node.text or tree._cluster_input(node.children)
            assert source.startswith(node.summary.split()[0])
    # failures are not cached: a rebuild retries them
    assert all(not r.failed for r in tree.summary_cache.values())


def test_prompt_fits_a_small_context_window():
    model = ScriptedChatModel(fake_reply, context_window=400)
    tree = make_tree(model, chunk_tokens=400, summary_tokens=30)
    tree.build([topic_docs(n_per_topic=8)["cats"]])
    from fragrel_integrations.models.tokens import count_message_tokens

    for call in model.calls:
        assert count_message_tokens(model, call["messages"]) + 30 + 150 <= 400


def test_summary_cache_by_content():
    tree, model = built_tree()
    calls = len(model.calls)
    cat_chunks = [n.text for n in tree.leaves() if n.doc_id == "cats"]
    report = tree.insert([topic_docs()["cats"]], doc_ids=["cats-copy"])  # same text under a new id
    assert report.cache_hits >= len(cat_chunks)
    passages = [_passage(c["messages"]) for c in model.calls[calls:]]
    assert not set(passages) & set(cat_chunks)  # no chunk was summarised twice
    assert len({n.text for n in tree.leaves() if n.doc_id == "cats-copy"}) == len(set(cat_chunks))


def test_progress_bar_counts_llm_calls(capsys):
    model = ScriptedChatModel(fake_reply)
    tree = SurpriseTree(model, HashingEmbedder(dim=64), chunk_tokens=40, reduction_dim=2, show_progress=True)
    tree.build([topic_docs()["space"]])
    err = capsys.readouterr().err
    assert "summarising" in err
    quiet = SurpriseTree(model, HashingEmbedder(dim=64), chunk_tokens=40, reduction_dim=2, show_progress=False)
    quiet.build([topic_docs()["space"]])
    assert "summarising" not in capsys.readouterr().err


def test_async_build_bounds_concurrency_and_matches_sync():
    model = ScriptedChatModel(fake_reply, delay=0.01)
    tree = make_tree(model, max_concurrency=2)
    docs = topic_docs()
    asyncio.run(tree.abuild(list(docs.values()), doc_ids=list(docs)))
    assert 1 < model.max_in_flight <= 2
    sync, _ = built_tree()
    assert tree.to_state() == sync.to_state()


async def test_sync_build_works_inside_a_running_loop():
    tree, _ = built_tree()
    assert tree.n_layers >= 2
    tree2 = make_tree()
    await tree2.abuild(["Cats purr. Kittens meow."])
    assert tree2.leaves()


def test_validation_errors_name_the_fix():
    with pytest.raises(ValueError, match="chunk_tokens"):
        TreeConfig(chunk_tokens=0)
    with pytest.raises(ValueError, match="reducer"):
        TreeConfig(reducer="tsne")
    with pytest.raises(ValueError, match="either config"):
        SurpriseTree(ScriptedChatModel(fake_reply), HashingEmbedder(), config=TreeConfig(), seed=1)
    with pytest.raises(TypeError, match="embed_documents"):
        SurpriseTree(ScriptedChatModel(fake_reply), object())
    with pytest.raises(TypeError, match="chat model"):
        SurpriseTree(object(), HashingEmbedder())
    with pytest.raises(ValueError, match="max_concurrency"):
        SurpriseTree(ScriptedChatModel(fake_reply), HashingEmbedder(), max_concurrency=0)
    with pytest.raises(TypeError, match="list of strings"):
        make_tree().build("one string")  # type: ignore[arg-type]
    tree, _ = built_tree()
    with pytest.raises(ValueError, match="insert"):
        tree.build(["again"])
    with pytest.raises(ValueError, match="already in the tree"):
        tree.insert(["more"], doc_ids=["cats"])
    with pytest.raises(ValueError, match="already in the tree"):
        tree.insert(["more", "again"], doc_ids=["x", "x"])
    with pytest.raises(ValueError, match="one entry per text"):
        tree.insert(["more"], doc_ids=["y", "z"])
    no_model = SurpriseTree(None, HashingEmbedder(), show_progress=False, summariser="llm")
    with pytest.raises(ValueError, match=r"chat_model=.*summariser='extractive'"):
        no_model.build(["text"])
    with pytest.raises(ValueError, match="chat_model"):
        asyncio.run(no_model.abuild(["text"]))
    assert len(no_model) == 0


# ---------------------------------------------------------------------------------------------------- retrieval


def test_collapsed_retrieval_finds_the_topic():
    tree, _ = built_tree()
    hits = tree.retrieve("rocket launch orbit astronaut", k=5)
    assert len(hits) == 5
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    for h in hits:
        leaf_docs = {tree.nodes[i].doc_id for i in _leaves_under(tree, h.node_id)}
        assert leaf_docs == {"space"}
    assert {h.layer for h in tree.retrieve("rocket launch orbit", k=40)} >= {0, 1}


def _leaves_under(tree: SurpriseTree, node_id: int) -> set[int]:
    node = tree.nodes[node_id]
    if node.is_leaf:
        return {node_id}
    return set().union(*(_leaves_under(tree, c) for c in node.children))


def test_retrieval_budget_fields_and_surprise():
    tree, _ = built_tree()
    hits = tree.retrieve("stock market", k=None, budget_tokens=60)
    assert hits and sum(tree.count(h.text) for h in hits) <= 60
    only = tree.retrieve("stock market", k=50, fields=("surprise",))
    assert only and all(h.field == "surprise" for h in only)
    assert tree.retrieve("zzsurprise oddly", k=1)[0].field == "surprise"
    with pytest.raises(ValueError, match="fields"):
        tree.retrieve("x", fields=("body",))
    with pytest.raises(ValueError, match="k or budget_tokens"):
        tree.retrieve("x", k=None)
    with pytest.raises(ValueError, match="mode"):
        tree.retrieve("x", mode="flat")  # type: ignore[arg-type]
    assert make_tree().retrieve("anything") == []


def test_tree_traversal_descends_into_the_best_branch():
    tree, _ = built_tree()
    hits = tree.retrieve("cat kitten purr whiskers", k=20, mode="traversal", width=1)
    assert hits
    leaf_hits = [h for h in hits if h.layer == 0]
    assert leaf_hits and {h.node.doc_id for h in leaf_hits} == {"cats"}
    per_layer = {}
    for h in hits:
        per_layer.setdefault(h.layer, set()).add(h.node_id)
    assert all(len(ids) == 1 for ids in per_layer.values())  # width=1: one node kept per level
    with pytest.raises(ValueError, match="width"):
        tree.retrieve("x", mode="traversal", width=0)


def test_wrong_embedder_dimension_is_explained():
    tree, _ = built_tree()
    tree.embedder = HashingEmbedder(dim=32)
    with pytest.raises(ValueError, match="embedder it was built with"):
        tree.retrieve("cats")


# ---------------------------------------------------------------------------------------------------- persistence


def test_persistence_round_trip(tmp_path):
    tree, _ = built_tree()
    path = tmp_path / "sub" / "tree.sqlite"
    save_tree(tree, path)
    loaded = load_tree(path, embedder=HashingEmbedder(dim=256), show_progress=False)
    assert loaded.to_state() == tree.to_state()
    assert loaded.config == tree.config
    a = [(h.node_id, h.field, round(h.score, 6)) for h in tree.retrieve("kitten purr", k=6)]
    b = [(h.node_id, h.field, round(h.score, 6)) for h in loaded.retrieve("kitten purr", k=6)]
    assert a == b
    save_tree(tree, path)  # overwriting is fine
    assert load_tree(path, embedder=HashingEmbedder(dim=256)).to_state() == tree.to_state()
    with pytest.raises(ValueError, match="chat_model"):
        loaded.insert(["new text."])


def test_loaded_tree_keeps_its_cache_and_accepts_inserts(tmp_path):
    tree, _ = built_tree()
    save_tree(tree, tmp_path / "t.sqlite")
    model = ScriptedChatModel(fake_reply)
    loaded = load_tree(tmp_path / "t.sqlite", chat_model=model, embedder=HashingEmbedder(dim=256), show_progress=False)
    report = loaded.insert([topic_docs()["markets"]], doc_ids=["markets-2"])
    assert report.cache_hits > 0  # identical chunks were summarised before the save


def test_save_explains_unserialisable_metadata(tmp_path):
    tree = make_tree()
    tree.build(["Cats purr."], metadatas=[{"when": object()}])
    with pytest.raises(ValueError, match="JSON-serialisable"):
        save_tree(tree, tmp_path / "t.sqlite")
    assert not list(tmp_path.iterdir())  # nothing written, no temporary file left


def test_load_rejects_other_files(tmp_path):
    with pytest.raises(ValueError, match="no saved surprise tree"):
        load_tree(tmp_path / "missing.sqlite", embedder=HashingEmbedder())
    bad = tmp_path / "bad.sqlite"
    bad.write_text('{"format": "other"}')
    with pytest.raises(ValueError, match="not a saved surprise tree"):
        load_tree(bad, embedder=HashingEmbedder())
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database at all" * 10)
    with pytest.raises(ValueError, match="not a saved surprise tree"):
        load_tree(junk, embedder=HashingEmbedder())


# ---------------------------------------------------------------------------------------------------- insert


def test_incremental_insert_resummarises_only_touched_branches():
    tree, model = built_tree()
    before = {i: (n.summary, n.surprise, n.children) for i, n in tree.nodes.items()}
    calls = len(model.calls)
    new_doc = "Kitten purr whiskers paws fur. Cat meow litter kitten qqnewfact."
    report = tree.insert([new_doc], doc_ids=["cats-2"])
    new_leaves = [n for n in tree.leaves() if n.doc_id == "cats-2"]
    assert len(new_leaves) == 1 and report.nodes_added >= 1
    # every new leaf hangs under the tree
    parents = tree.parents()
    assert all(n.id in parents for n in new_leaves)
    # re-summarised: the ancestors of the new leaves, nothing else
    ancestors: set[int] = set()
    stack = [n.id for n in new_leaves]
    while stack:
        for p in parents.get(stack.pop(), []):
            if p not in ancestors:
                ancestors.add(p)
                stack.append(p)
    changed = {i for i, v in before.items() if (tree.nodes[i].summary, tree.nodes[i].surprise) != v[:2]}
    assert changed <= ancestors
    for i, (_, _, children) in before.items():
        if i not in ancestors:
            assert tree.nodes[i].children == children
    assert report.llm_calls == len(model.calls) - calls <= len(new_leaves) + len(ancestors)
    assert report.nodes_resummarised >= 1
    # the cat branch took it, not another topic
    for p in parents[new_leaves[0].id]:
        assert {tree.nodes[i].doc_id for i in _leaves_under(tree, p)} <= {"cats", "cats-2"}
    hits = tree.retrieve("qqnewfact", k=1)
    assert "cats-2" in {tree.nodes[i].doc_id for i in _leaves_under(tree, hits[0].node_id)}


def test_insert_overflowing_parents_creates_new_branches():
    tree, _ = built_tree(max_cluster_tokens=60)
    n_before = len(tree.nodes)
    report = tree.insert([topic_docs(seed=5)["space"]], doc_ids=["space-2"])
    assert len(tree.nodes) > n_before and report.nodes_added > 0
    for node in tree.nodes.values():
        if len(node.children) > 1:
            assert sum(tree.count(tree.nodes[c].summary) for c in node.children) <= 60


def test_insert_into_a_leaf_only_tree_builds_layers():
    tree = make_tree()
    tree.build(["Cats purr."])
    assert tree.n_layers == 1
    tree.insert(["Rockets launch."])
    assert tree.n_layers == 2 and len(tree.roots()) == 1


async def test_async_insert():
    tree, _ = built_tree()
    report = await tree.ainsert(["Rocket orbit launch booster capsule."], doc_ids=["space-3"])
    assert report.nodes_added >= 1


# ---------------------------------------------------------------------------------------------------- real model


@pytest.mark.slow
def test_end_to_end_with_the_embedded_llm(real_embedder):
    from fragrel_integrations.models.transformers_chat import TransformersChatModel

    text = (
        "The lighthouse on Gull Rock was built in 1871 from granite shipped from Aberdeen. "
        "Its first keeper, Martha Quill, kept a diary in which she recorded every passing ship. "
        "Oddly, the lamp was fuelled with whale oil until 1923, long after other lighthouses had switched. "
        "In 1958 a storm tore the lantern room away, and the light was rebuilt with an electric lamp. "
        "Today the tower is a museum, and Quill's diary is displayed beside a stuffed albatross. "
    ) * 2
    model = TransformersChatModel(context_window=2048)
    start = time.perf_counter()
    tree = SurpriseTree(
        model, real_embedder, chunk_tokens=120, summary_tokens=60, surprise_tokens=40, show_progress=False
    )
    report = tree.build([text], doc_ids=["lighthouse"])
    assert time.perf_counter() - start < 60
    assert len(tree.leaves()) >= 2
    assert report.llm_calls + report.cache_hits >= len(tree.leaves())
    for node in tree.nodes.values():
        assert isinstance(node.summary, str) and node.summary.strip()
        assert (node.id, "summary") in tree.vectors
    hits = tree.retrieve("Who kept the diary?", k=3)
    assert len(hits) == 3 and all(-1.0 <= h.score <= 1.0 for h in hits)


def test_chunks_longer_than_the_embedders_window_are_warned_about(caplog):
    class ShortWindow(HashingEmbedder):
        max_input_tokens = 256

    with caplog.at_level("WARNING", logger="fragrel_integrations.core.tree.summary_tree"):
        SurpriseTree(ScriptedChatModel(["x"], cycle=True), ShortWindow(dim=16), chunk_tokens=600, show_progress=False)
    assert "chunk_tokens=600 but the embedder reads only 256 tokens" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="fragrel_integrations.core.tree.summary_tree"):
        SurpriseTree(ScriptedChatModel(["x"], cycle=True), ShortWindow(dim=16), chunk_tokens=200, show_progress=False)
    assert caplog.text == ""


# ---------------------------------------------------------------------------------------------------- FragRel


def _dense(weights) -> np.ndarray:
    return np.asarray(weights.todense())


def test_tree_relation_weights_follow_nodes_tree_and_positions():
    tree, _ = built_tree()
    keys = sorted(tree.vectors)
    rel = TreeRelation(w_tree=0.4, w_pos=0.5, w_node=0.7, min_weight=0.2)
    w = _dense(rel.weights(tree, keys))
    assert rel.max_distance == 2  # 0.5 ** 2 = 0.25 >= 0.2 > 0.125
    assert np.allclose(w, w.T) and np.all(np.diag(w) == 0)
    pos = {key: i for i, key in enumerate(keys)}
    leaves = tree.leaves()
    a = leaves[0]
    assert w[pos[(a.id, "text")], pos[(a.id, "summary")]] == pytest.approx(0.7)
    same_doc = sorted((n for n in leaves if n.doc_id == a.doc_id), key=lambda n: n.position)
    first, second, third, fourth = same_doc[:4]
    assert w[pos[(first.id, "text")], pos[(second.id, "text")]] == pytest.approx(0.5)
    assert w[pos[(first.id, "summary")], pos[(third.id, "text")]] == pytest.approx(0.25)
    assert w[pos[(first.id, "text")], pos[(fourth.id, "text")]] == 0.0  # beyond max_distance
    other_doc = next(n for n in leaves if n.doc_id != a.doc_id)
    assert w[pos[(a.id, "text")], pos[(other_doc.id, "text")]] == 0.0  # position never crosses documents
    parent = next(n for n in tree.nodes.values() if n.children)
    child = tree.nodes[parent.children[0]]
    assert w[pos[(parent.id, "summary")], pos[(child.id, "text")]] == pytest.approx(0.4)
    assert np.all(w >= 0)


def test_tree_relation_changes_scores_exactly_as_fragrel_says():
    from fragrel_integrations.core.relation_aware import relation_aware_scores

    tree, _ = built_tree()
    query = "rocket launch orbit"
    keys, matrix = tree._entries()
    s = matrix @ tree._query_vector(query, matrix.shape[1])
    rel = TreeRelation()
    expected = relation_aware_scores(s.astype(np.float64), rel.weights(tree, keys), 0.5)
    hits = tree.retrieve(query, k=len(keys), relation=rel, alpha=0.5)
    got = {(h.node_id, h.field): h.score for h in hits}
    assert got == pytest.approx({key: float(v) for key, v in zip(keys, expected, strict=True)})
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_tree_relation_off_is_plain_retrieval_and_boosts_context_when_on():
    tree, _ = built_tree()
    plain = tree.retrieve("stock market", k=6)
    off = tree.retrieve("stock market", k=6, relation=TreeRelation(0.0, 0.0, 0.0))
    zero_alpha = tree.retrieve("stock market", k=6, relation=TreeRelation(), alpha=0.0)
    assert [(h.node_id, h.field) for h in off] == [(h.node_id, h.field) for h in plain]
    assert [(h.node_id, h.field) for h in zero_alpha] == [(h.node_id, h.field) for h in plain]
    on = tree.retrieve("stock market", k=6, relation=TreeRelation(), alpha=1.0)
    assert all(tree.nodes[h.node_id].doc_id in ("markets", "") for h in on[:3])


def test_tree_relation_environment_uses_only_the_allowed_texts():
    tree, _ = built_tree()
    keys = sorted(tree.vectors)
    hits = tree.retrieve("cat kitten purr", k=len(keys), fields=("text",), relation=TreeRelation(), alpha=0.5)
    assert {h.field for h in hits} == {"text"}
    # leaf texts only: parent/child and node links fall away, the position relation alone remains
    keys_text = [k for k in keys if k[1] == "text"]
    _, matrix = tree._entries()
    q = tree._query_vector("cat kitten purr", matrix.shape[1])
    s = np.array([tree.vectors[k] @ q for k in keys_text], dtype=np.float64)
    from fragrel_integrations.core.relation_aware import relation_aware_scores

    w = TreeRelation(w_tree=0.0, w_node=0.0).weights(tree, keys_text)
    expected = dict(zip(keys_text, relation_aware_scores(s, w, 0.5), strict=True))
    assert {(h.node_id, h.field): h.score for h in hits} == pytest.approx(expected)


def test_tree_relation_weights_follow_inserts():
    tree, _ = built_tree()
    rel = TreeRelation()
    tree.retrieve("cats", k=2, relation=rel)
    tree.insert(["Rocket booster capsule orbit launch. Astronaut mission space rocket."], doc_ids=["space-2"])
    hits = tree.retrieve("rocket booster capsule", k=3, relation=rel)
    assert len(hits) == 3
    assert tree._relation_weights(rel).shape == (len(tree.vectors), len(tree.vectors))


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"w_pos": 1.5}, ValueError),
        ({"w_tree": -0.1}, ValueError),
        ({"w_node": "high"}, TypeError),
        ({"w_pos": float("nan")}, ValueError),
        ({"min_weight": 0.0}, ValueError),
    ],
)
def test_tree_relation_validation(kwargs, error):
    with pytest.raises(error):
        TreeRelation(**kwargs)


def test_retrieve_validates_relation_and_alpha():
    tree, _ = built_tree()
    from fragrel_integrations.core.relations import ContextRelation

    with pytest.raises(TypeError, match="TreeRelation"):
        tree.retrieve("cats", relation=ContextRelation(0.3))
    with pytest.raises(ValueError, match="alpha"):
        tree.retrieve("cats", relation=TreeRelation(), alpha=-1.0)


# ---------------------------------------------------------------------------------------------------- failures


class _FailingEmbedder(HashingEmbedder):
    """Raises on the ``fail_on``-th ``embed_documents`` call (1-based) while ``armed``."""

    def __init__(self, fail_on: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.fail_on, self.calls, self.armed = fail_on, 0, True

    def embed_documents(self, texts):
        self.calls += 1
        if self.armed and self.calls == self.fail_on:
            raise ConnectionError("embedding server went away")
        return super().embed_documents(texts)


def _state(tree: SurpriseTree):
    nodes = [
        (n.id, n.layer, n.children, n.summary, n.surprise, n.text, n.doc_id, n.position) for n in tree.nodes.values()
    ]
    vectors = {k: v.tolist() for k, v in tree.vectors.items()}
    return nodes, vectors, tree._next_id


@pytest.mark.parametrize("fail_on", [1, 2])  # 1: while embedding the new leaves, 2: the re-summarised parents
def test_failed_insert_leaves_the_tree_as_it_was_and_a_retry_works(fail_on):
    model = ScriptedChatModel(fake_reply)
    embedder = _FailingEmbedder(fail_on=10**9, dim=256)
    tree = SurpriseTree(
        model,
        embedder,
        show_progress=False,
        chunk_tokens=40,
        summary_tokens=40,
        reduction_dim=2,
        max_cluster_tokens=200,
        seed=0,
    )
    docs = topic_docs()
    tree.build(list(docs.values()), doc_ids=list(docs))
    before = _state(tree)
    hits_before = [(h.node_id, h.field) for h in tree.retrieve("rocket orbit", k=5, relation=TreeRelation())]
    embedder.calls, embedder.fail_on = 0, fail_on
    new = ["Rocket booster capsule orbit launch. Astronaut mission space rocket booster orbit."]
    with pytest.raises(ConnectionError):
        tree.insert(new, doc_ids=["space-2"])
    assert _state(tree) == before
    assert [(h.node_id, h.field) for h in tree.retrieve("rocket orbit", k=5, relation=TreeRelation())] == hits_before
    embedder.armed = False
    report = tree.insert(new, doc_ids=["space-2"])
    assert report.nodes_added >= 1 and "space-2" in {n.doc_id for n in tree.leaves()}
    assert report.cache_hits >= 1  # the summaries made before the failure are not paid for again


def test_failed_async_build_leaves_an_empty_tree():
    embedder = _FailingEmbedder(fail_on=1, dim=256)
    tree = SurpriseTree(ScriptedChatModel(fake_reply), embedder, show_progress=False, chunk_tokens=40)
    with pytest.raises(ConnectionError):
        asyncio.run(tree.abuild(list(topic_docs().values())))
    assert len(tree) == 0 and not tree.vectors and tree._next_id == 0
    embedder.armed = False
    asyncio.run(tree.abuild(list(topic_docs().values())))
    assert len(tree.leaves()) > 0


# ---------------------------------------------------------------------------------------------------- hostile input


class VerboseModel:
    """A model that ignores max_tokens: every reply is ``size`` characters of summary and of surprise."""

    def __init__(self, size: int) -> None:
        self.size = size

    def invoke(self, messages, *, temperature=None, max_tokens=None, stop=None):
        return f"(Summary): {'word ' * (self.size // 5)}\n(Surprise): {'odd ' * (self.size // 4)}"

    async def ainvoke(self, messages, **kwargs):
        return self.invoke(messages, **kwargs)


def test_summaries_of_a_model_ignoring_max_tokens_are_capped(tmp_path):
    """Regression (issue 15): 5M-character summaries were stored (a 336 MB saved tree)."""
    tree = make_tree(VerboseModel(5_000_000), summary_tokens=40, surprise_tokens=20)
    start = time.perf_counter()
    tree.build(list(topic_docs(1).values()))
    assert time.perf_counter() - start < 20
    for node in tree.nodes.values():
        assert 0 < len(node.summary) <= OUTPUT_CHARS_PER_TOKEN * 40 and node.summary.startswith("word")
        assert 0 < len(node.surprise) <= OUTPUT_CHARS_PER_TOKEN * 20
    for cached in tree.summary_cache.values():
        assert len(cached.summary) <= OUTPUT_CHARS_PER_TOKEN * 40
    save_tree(tree, tmp_path / "t.sqlite")
    assert (tmp_path / "t.sqlite").stat().st_size < 2_000_000


@pytest.mark.parametrize(
    "surprise",
    ["-" * 100_000 + "x", "-" * 100_000, "(" * 100_000, " *" * 50_000 + "x", "\n(Summary" * 10_000, "_:" * 50_000],
)
def test_summary_parser_is_linear_on_adversarial_replies(surprise):
    """The old 'no surprise' pattern (^\\W*(...|-+)\\W*$) backtracked cubically on a run of dashes."""
    start = time.perf_counter()
    for reply in (f"(Summary): A.\n(Surprise): {surprise}", surprise, f"(Summary): {surprise}"):
        parse_summary(reply)
    assert time.perf_counter() - start < 1.0
    assert parse_summary("(Summary): A.\n(Surprise): " + "-" * 3000).surprise == ""
    assert parse_summary("(Summary): A.\n(Surprise): No surprises found.").surprise == ""
    assert parse_summary("(Summary): A.\n(Surprise): None of the dogs bark.").surprise == "None of the dogs bark."


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """One built tree (building is the slow part), saved; tests tamper with copies."""
    tree, _ = built_tree()
    folder = tmp_path_factory.mktemp("saved")
    save_tree(tree, folder / "t.sqlite")
    return tree, folder


def _tamper(state, how):
    nodes = state["nodes"]
    upper = next(n for n in nodes if n["layer"] > 0)
    if how == "next_id=0":
        state["next_id"] = 0
    elif how == "duplicate id":
        nodes[1]["id"] = nodes[0]["id"]
    elif how == "missing child":
        upper["children"].append(10_000)
    elif how == "cycle":
        leaf = next(n for n in nodes if n["id"] == upper["children"][0])
        leaf["layer"], leaf["children"] = upper["layer"], [upper["id"]]
    elif how == "layer out of range":
        upper["layer"] = 99
    elif how == "vector of another dimension":
        state["vectors"][0][2] = state["vectors"][0][2][:10]
    elif how == "nan vector":
        state["vectors"][0][2][0] = float("nan")
    elif how == "vector of strings":
        state["vectors"][0][2] = ["x"] * 256
    elif how == "missing vector":
        del state["vectors"][0]
    elif how == "bad config":
        state["config"]["chunk_tokens"] = -1
    elif how == "children not a list":
        upper["children"] = "1,2"
    elif how == "summary not text":
        nodes[0]["summary"] = None
    elif how == "deep metadata":
        deep: dict = {}
        for _ in range(200):
            deep = {"a": deep}
        nodes[0]["metadata"] = deep
    elif how == "bad cache":
        state["cache"] = {"k": {"summary": 1}}
    return state


TAMPERING = {
    "next_id=0": "next_id",
    "duplicate id": "appears twice",
    "missing child": "not in the tree",
    "cycle": "on layer",
    "layer out of range": "layer must be",
    "vector of another dimension": "different dimensions",
    "nan vector": "finite",
    "vector of strings": "flat list of numbers",
    "missing vector": "no vector",
    "bad config": "bad config",
    "children not a list": "children must be",
    "summary not text": "summary must be a string",
    "deep metadata": "nested at most",
    "bad cache": "cache entry",
}


@pytest.mark.parametrize("how", list(TAMPERING))
def test_tampered_states_are_rejected_with_the_problem(saved, how):
    """Regression (issue 15): next_id=0 made insert() overwrite node 0 silently."""
    state = json.loads(json.dumps(saved[0].to_state()))
    with pytest.raises(ValueError, match=TAMPERING[how]):
        SurpriseTree.from_state(
            _tamper(state, how), chat_model=ScriptedChatModel(fake_reply), embedder=HashingEmbedder(dim=256)
        )


@pytest.mark.parametrize(
    ("sql", "problem"),
    [
        ("UPDATE header SET value = '0' WHERE key = 'next_id'", "next_id"),
        ("UPDATE header SET value = '{not json' WHERE key = 'config'", "Expecting"),
        ("UPDATE nodes SET children = NULL WHERE layer > 0", "JSON object must be str"),
        ("UPDATE nodes SET layer = 'one' WHERE id = 0", "layer must be"),
        ("UPDATE nodes SET parsed = 7 WHERE id = 0", "parsed must be 0 or 1"),
        ("UPDATE vectors SET vector = x'0000' WHERE node = 0", "float32 blob"),
        ("UPDATE vectors SET vector = 'text' WHERE node = 0", "float32 blob"),
        ("UPDATE nodes SET id = 100 WHERE id = 0", "not in the tree"),
        ("UPDATE vectors SET node = 1000 WHERE node = 0 AND field = 'text'", "not a text of the tree"),
        ("DROP TABLE vectors", "no such table"),
    ],
)
def test_tampered_sqlite_saves_are_rejected_with_the_file_and_the_problem(tmp_path, saved, sql, problem):
    path = tmp_path / "t.sqlite"
    shutil.copy(saved[1] / "t.sqlite", path)
    with sqlite3.connect(path) as conn:
        conn.execute(sql)
    conn.close()
    with pytest.raises(ValueError, match=problem) as info:
        load_tree(path, embedder=HashingEmbedder(dim=256))
    assert "t.sqlite" in str(info.value)


@pytest.mark.parametrize(
    "content",
    [
        b"{" * 100_000,
        b"[" * 100_000 + b"]" * 100_000,
        b'{"format": "fragrel-surprise-tree", "version": 1',
        b"\xff\xfe\x00",
    ],
)
def test_corrupt_files_give_a_value_error_not_a_recursion_error(tmp_path, content):
    path = tmp_path / "c.sqlite"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=r"c\.sqlite"):
        load_tree(path, embedder=HashingEmbedder(dim=256))


def test_insert_never_overwrites_a_node(saved):
    tree = load_tree(saved[1] / "t.sqlite", chat_model=ScriptedChatModel(fake_reply), embedder=HashingEmbedder(dim=256))
    before = {i: n.summary for i, n in tree.nodes.items()}
    tree._next_id = 0  # what a tampered save used to give
    with pytest.raises(ValueError, match="node id 0 is already taken"):
        tree.insert(["A new text about rockets."], doc_ids=["new"])
    assert {i: n.summary for i, n in tree.nodes.items()} == before


def test_a_sqlite_save_refuses_to_overwrite_other_files(tmp_path, saved):
    tree = saved[0]
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    with pytest.raises(ValueError, match=r"refusing to overwrite .*not a SQLite database"):
        save_tree(tree, notes)
    assert notes.read_text() == "my notes"
    other = tmp_path / "app.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE meta (key TEXT, value TEXT)")
        conn.execute("INSERT INTO meta VALUES ('owner', 'someone else')")
    conn.close()
    with pytest.raises(ValueError, match="not a saved surprise tree"):
        save_tree(tree, other)
    with sqlite3.connect(other) as conn:
        assert conn.execute("SELECT COUNT(*) FROM meta").fetchone()[0] == 1
    conn.close()
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    save_tree(tree, empty)  # an empty file, and our own save, are fine
    save_tree(tree, empty)
    assert load_tree(empty, embedder=HashingEmbedder(dim=256)).to_state() == tree.to_state()


class NoneModel(VerboseModel):
    def invoke(self, messages, *, temperature=None, max_tokens=None, stop=None):
        return None


def test_a_model_returning_none_is_a_failed_call_and_surrogates_are_refused_up_front():
    tree = make_tree(NoneModel(0))
    report = tree.build(["Cats purr. Dogs bark."])
    assert report.call_failures == len(tree.nodes) and all(n.failed for n in tree.nodes.values())
    assert "returned NoneType" in report.errors[0]
    with pytest.raises(ValueError, match="lone surrogate"):
        make_tree().build(["Cats \ud800 purr."])
