"""Issue 28 defaults: preset="auto" picks the setting for the kind of text a pool shows; a score-less pool keeps
the base's ranking fused with a BM25 score on the pool itself; an embedder serves the relation only."""

import numpy as np
import pytest
from langchain_core.documents import Document
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

import fragrel_integrations.models.local as local
from fragrel_integrations import adapters as kit
from fragrel_integrations.cli import _preset, build_parser
from fragrel_integrations.core.fragments import Fragment
from fragrel_integrations.core.presets import DEFAULT_PRESET, detect_kind, detect_preset, preset
from fragrel_integrations.core.relations import SemanticRelation
from fragrel_integrations.core.rerank import lexical_fusion, rank_scores, rerank
from fragrel_integrations.core.scorers import BM25Scorer, minmax
from fragrel_integrations.langchain import FragRelRetriever
from fragrel_integrations.llama_index import FragRelPostprocessor
from fragrel_integrations.llama_index import FragRelRetriever as LlamaFragRelRetriever
from fragrel_integrations.testing import HashingEmbedder

QUERY = "where did Ann sail the boat"


@pytest.fixture(autouse=True)
def no_model(monkeypatch):
    """No default path may load the embedded model behind the user's back."""
    monkeypatch.setattr(local, "default_embedder", lambda: pytest.fail("the embedded model was loaded"))
    monkeypatch.setattr(local, "default_cached_embedder", lambda: pytest.fail("the embedded model was loaded"))


def _turns(n=30, speaker=True):
    words = ["boat", "goat", "lunch", "sail", "rain", "trip"]
    return [
        Fragment(
            f"{('Ann: ', 'Bob: ')[i % 2] if speaker else ''}we talked about the {words[i % 6]} on day {i}", "chat", i
        )
        for i in range(n)
    ]


# ------------------------------------------------------------------------------------------------ detection


def test_kinds_are_recognised_from_the_pool():
    assert detect_kind(_turns()) == "dialogue"
    multidoc = [Fragment(f"Title {i}: a paragraph about thing {i}.", f"title{i}", 0) for i in range(10)]
    assert detect_kind(multidoc) == "multidoc"
    haystack = [Fragment(f"Sentence number {i} of the book.", "book", 17 * i) for i in range(50)]
    assert detect_kind(haystack) == "haystack"
    narrative = [Fragment(" ".join(["word"] * 300), "book", i) for i in range(5)]
    assert detect_kind(narrative) == "narrative" and detect_preset(narrative) == "general"
    # a chat without speaker names whose pool holds all of it (MTBench+-like): neither haystack nor dialogue
    assert detect_kind(_turns(speaker=False)) == "other"
    assert [detect_preset(f) for f in (_turns(), multidoc, haystack)] == ["dialogue", "multidoc", "haystack"]


def test_auto_is_the_default_and_fills_unset_settings_per_pool():
    assert DEFAULT_PRESET == "auto"
    settings = kit.WrapperSettings.resolve(alpha=0.4)
    assert settings.alpha == 0.4 and settings.relation is None  # left for each pool
    chat = settings.for_pool(_turns(), ranks_by_words=False)
    assert (chat.alpha, chat.order, chat.relation) == (0.4, "position", preset("dialogue").relation())
    assert chat.lexical == kit.POOL_LEXICAL["dialogue"]
    assert settings.for_pool(_turns(), ranks_by_words=True).lexical == 0.0  # BM25 / hybrid bases: no second BM25
    with pytest.raises(ValueError, match="preset must be one of"):
        kit.WrapperSettings.resolve(preset="poetry")


def test_auto_gives_the_same_hits_in_every_wrapper():
    frags = _turns()
    docs = [Document(f.text, metadata={"doc_id": f.doc_id, "position": f.position}) for f in frags]
    nodes = [
        NodeWithScore(node=TextNode(text=f.text, id_=f"n{f.position}", metadata={"doc_id": "chat", "position": i}))
        for i, f in enumerate(frags)
    ]  # no scores: the ranking is the list order

    class ListRetriever(BaseRetriever):
        def _retrieve(self, query_bundle: QueryBundle):
            return list(nodes)

    lc = FragRelRetriever(base_retriever=lambda q: docs, k=5).invoke(QUERY)
    li = LlamaFragRelRetriever(ListRetriever(), similarity_top_k=5).retrieve(QUERY)
    pp = FragRelPostprocessor(top_n=5).postprocess_nodes(nodes, query_str=QUERY)
    lc_key = [(d.page_content, round(d.metadata["relevance_score"], 12)) for d in lc]
    for got in (li, pp):
        assert [(n.node.get_content(), round(n.score, 12)) for n in got] == lc_key
    positions = [d.metadata["position"] for d in lc]
    assert positions == sorted(positions)  # the dialogue preset returns turns in time order


# ------------------------------------------------------------------------------------ score-less pools, embedders


def test_lexical_fusion_mixes_min_max_base_and_pool_bm25():
    texts = ["the boat sailed", "a goat ate", "Ann and the boat", "rain"]
    base = rank_scores(4)
    bm25 = BM25Scorer(texts)("boat Ann")
    assert np.allclose(lexical_fusion("boat Ann", texts, base, 0.3), 0.7 * minmax(base) + 0.3 * minmax(bm25))
    assert lexical_fusion("boat Ann", texts, base, 0.0) is base
    with pytest.raises(ValueError, match=r"lexical must be a number in \[0, 1\]"):
        rerank("q", [Fragment("a", "d", 0)], relation=preset("general").relation(), lexical=2.0)


def test_an_embedder_for_a_relation_leaves_a_scoreless_ranking_as_the_independent_score():
    frags = _turns(12)
    docs = [Document(f.text, metadata={"doc_id": "chat", "position": f.position}) for f in frags]
    emb = HashingEmbedder(dim=64)
    relation = SemanticRelation()
    got = FragRelRetriever(base_retriever=lambda q: docs, k=12, relation=relation, embedder=emb, lexical=0.5)
    ind = {d.page_content: d.metadata["fragrel_independent_score"] for d in got.invoke(QUERY)}
    texts = [f.text for f in frags]
    expected = lexical_fusion(QUERY, texts, rank_scores(12), 0.5)
    assert [ind[t] for t in texts] == pytest.approx(expected.tolist())
    # re-scoring by cosine is its own, explicit argument
    by_cosine = FragRelRetriever(base_retriever=lambda q: docs, k=12, relation=relation, score_embedder=emb)
    ind = {d.page_content: d.metadata["fragrel_independent_score"] for d in by_cosine.invoke(QUERY)}
    q = np.asarray(emb.embed_query(QUERY))
    cos = [float(np.dot(v, q) / np.linalg.norm(v) / np.linalg.norm(q)) for v in emb.embed_documents(texts)]
    assert [ind[t] for t in texts] == pytest.approx(cos, abs=1e-6)


def test_lexical_zero_keeps_the_bases_scores():
    docs = [
        Document(f.text, metadata={"doc_id": "chat", "position": f.position, "score": 1.0 - f.position / 40})
        for f in _turns(20)
    ]
    got = FragRelRetriever(base_retriever=lambda q: docs, k=20, lexical=0.0).invoke(QUERY)
    assert {d.metadata["fragrel_independent_score"] for d in got} == {d.metadata["score"] for d in docs}


def test_cli_auto_reads_the_file(tmp_path):
    chat = tmp_path / "chat.txt"
    chat.write_text("\n".join(f"{'Ann' if i % 2 else 'Bob'}: line {i} about boats" for i in range(40)))
    book = tmp_path / "book.txt"
    book.write_text("\n".join(f"It was a dark night and the sea rose, line {i}." for i in range(40)))
    parser = build_parser()
    assert _preset(parser.parse_args(["retrieve", str(chat), "q"])).name == "dialogue"
    assert _preset(parser.parse_args(["retrieve", str(book), "q"])).name == "general"
    assert _preset(parser.parse_args(["retrieve", str(book), "q", "--preset", "story"])).name == "story"


def _words(text):
    """A BM25 preprocessing of the user's own: lower-cased words."""
    return [w.strip(".,!?") for w in text.lower().split()]


def test_bases_that_rank_by_words_get_no_second_bm25():
    from langchain_classic.retrievers import EnsembleRetriever
    from langchain_community.retrievers import BM25Retriever
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.vectorstores import InMemoryVectorStore

    from fragrel_integrations.langchain._pool import ranks_by_words

    docs = [Document(f.text, metadata={"doc_id": "chat", "position": f.position}) for f in _turns()]
    bm25 = BM25Retriever.from_documents(docs, preprocess_func=_words)
    vs = InMemoryVectorStore(DeterministicFakeEmbedding(size=16))
    vs.add_documents(docs)
    vector = vs.as_retriever()
    assert ranks_by_words(bm25) and not ranks_by_words(vector)
    assert ranks_by_words(EnsembleRetriever(retrievers=[bm25, vector], weights=[0.5, 0.5]))
    assert not ranks_by_words(EnsembleRetriever(retrievers=[vector, vector], weights=[0.5, 0.5]))
    # BM25 keeps its own scores as the independent score; a vector store's are fused with the pool's BM25
    got = FragRelRetriever(base_retriever=bm25, k=5).invoke(QUERY)
    own = dict(
        zip([d.page_content for d in docs], bm25.vectorizer.get_scores(bm25.preprocess_func(QUERY)), strict=True)
    )
    assert all(d.metadata["fragrel_independent_score"] == pytest.approx(own[d.page_content]) for d in got)
    got = FragRelRetriever(base_retriever=vector, k=5).invoke(QUERY)
    assert max(d.metadata["fragrel_independent_score"] for d in got) <= 1.0  # min-max fused, on [0, 1]


def test_a_bm25_that_only_splits_on_spaces_gets_the_pools_bm25():
    from langchain_classic.retrievers import EnsembleRetriever
    from langchain_community.retrievers import BM25Retriever

    from fragrel_integrations.langchain._pool import ranks_by_words

    docs = [Document(f.text, metadata={"doc_id": "chat", "position": f.position}) for f in _turns()]
    docs[7] = Document("Ann: the Boat, we sailed it.", metadata={"doc_id": "chat", "position": 7})
    plain = BM25Retriever.from_documents(docs)  # LangChain's default preprocessing: text.split()
    assert not ranks_by_words(plain) and not ranks_by_words(EnsembleRetriever(retrievers=[plain], weights=[1.0]))
    # "Boat," never matches "boat" for the base; the pool's BM25 on lower-cased words finds it
    got = FragRelRetriever(base_retriever=plain, k=1).invoke("boat sailed")
    assert got[0].page_content == "Ann: the Boat, we sailed it."
    assert 0.0 <= got[0].metadata["fragrel_independent_score"] <= 1.0  # min-max fused with the pool's BM25


def test_a_scoreless_pool_is_ranked_whole_when_its_bm25_is_fused():
    # the only turn with the query's words is ranked 40th by the base: the pool's BM25 can lift it only if the
    # whole pool is ranked (the ranking alone keeps its best max(4k, 20))
    frags = [Fragment(f"Ann: filler turn number {i}", "chat", 3 * i) for i in range(60)]
    frags[40] = Fragment("Ann: we sailed the blue boat", "chat", 120)
    relation = preset("general").relation()
    fused = rerank("blue boat sailed", frags, relation=relation, k=5, lexical=0.5)
    assert frags[40] in [h.fragment for h in fused]
    ranks_only = rerank("blue boat sailed", frags, relation=relation, k=5, lexical=0.0)
    assert frags[40] not in [h.fragment for h in ranks_only]


# ------------------------------------------------------------------------------------------ round 4 (issue 36)

CSV_HEAD = ("name", "city", "job")
CSV_ROWS = [("Ann", "Porto", "baker"), ("Bob", "Lyon", "pilot"), ("Cy", "Oslo", "nurse"), ("Di", "Rome", "chef")]


def _records(kind: str) -> list[Fragment]:
    """Records as loaders give them, one item per fragment."""
    if kind == "csv rows (LangChain CSVLoader)":
        texts = ["\n".join(f"{k}: {v}" for k, v in zip(CSV_HEAD, row, strict=True)) for row in CSV_ROWS * 3]
    elif kind == "csv lines":
        texts = [",".join(CSV_HEAD)] + [",".join(row) for row in CSV_ROWS * 3]
    elif kind == "faq":
        texts = [f"Q: How do I reset password {i}?\nA: Open the settings page and choose reset {i}." for i in range(12)]
    elif kind == "json lines":
        texts = [f'{{"question": "what is item {i}", "answer": "item {i} is a tool"}}' for i in range(12)]
    elif kind == "key: value blocks":
        texts = [
            f"Title: Book {i}\nAuthor: Writer {i}\nYear: {1900 + i}\nSummary: a story of {i} days" for i in range(12)
        ]
    else:  # SimpleDirectoryReader's metadata header before the node text
        texts = [
            f"file_path: /data/notes/day{i}.txt\nfile_name: day{i}.txt\n\nWe walked to the harbour on day {i}."
            for i in range(12)
        ]
    return [Fragment(t, "file", i) for i, t in enumerate(texts)]


RECORD_KINDS = [
    "csv rows (LangChain CSVLoader)",
    "csv lines",
    "faq",
    "json lines",
    "key: value blocks",
    "file_path header",
]


@pytest.mark.parametrize("kind", RECORD_KINDS)
def test_records_are_not_dialogue(kind):
    fragments = _records(kind)
    assert detect_kind(fragments) != "dialogue"
    assert preset("auto", fragments).order == "score"  # the best hit stays first
    # one fragment per line (what the CLI reads of a file) is read the same way
    lines = [
        Fragment(line, "file", i)
        for i, line in enumerate(x for f in fragments for x in f.text.splitlines() if x.strip())
    ]
    assert detect_kind(lines) != "dialogue"


def _sample_chats() -> list[list[Fragment]]:
    """The sample chats of the repository (samples/dialogues.json) as "Name: text" turns, one per fragment."""
    import json
    from pathlib import Path

    data = json.loads((Path(__file__).resolve().parents[1] / "samples" / "dialogues.json").read_text("utf-8"))
    chats = []
    for d in data["dialogues"]:
        turns = [line for t in d["turns"] for line in (f"{d['user']}: {t['user']}", f"Assistant: {t['assistant']}")]
        chats.append([Fragment(t, d["id"], i) for i, t in enumerate(turns)])
    return chats


def test_chats_are_dialogue_even_behind_a_metadata_header():
    for chat in _sample_chats():
        assert detect_kind(chat) == "dialogue"
        assert detect_kind(chat[::3]) == "dialogue"  # a candidate pool: some turns, out of order
        header = [Fragment(f"file_path: /chats/{f.doc_id}.txt\n\n{f.text}", f.doc_id, f.position) for f in chat]
        assert detect_kind(header) == "dialogue"
        block = [Fragment("\n".join(f.text for f in chat), chat[0].doc_id, 0)]  # a whole transcript in one node
        assert detect_kind(block) == "dialogue"
    irc = [
        Fragment(f"[10:{i:02d}] {('ann', 'bob', 'cy')[i % 3 if i % 4 else 0]}: message {i}", "irc", i)
        for i in range(20)
    ]
    assert detect_kind(irc) == "dialogue"
    # one speaker alone, or names that never recur (titles of articles), is not a dialogue
    assert detect_kind([Fragment(f"Ann: note {i}", "me", i) for i in range(6)]) != "dialogue"
    titles = [Fragment(f"Scott Derrickson {i}: an American director.", f"t{i}", 0) for i in range(10)]
    assert detect_kind(titles) == "multidoc"


def test_auto_keeps_the_best_faq_hit_first():
    faq = [
        Fragment("Q: How do I change my email address?\nA: Open your profile and edit the email field.", "faq", 0),
        Fragment("Q: How do I delete my account?\nA: Write to support and ask for deletion.", "faq", 1),
        Fragment("Q: How do I reset my password?\nA: Choose 'forgot password' on the login page.", "faq", 2),
        Fragment("Q: Can I pay by invoice?\nA: Yes, for yearly plans.", "faq", 3),
    ]
    settings = kit.WrapperSettings.resolve(preset="auto")
    hits = settings.rerank("how do I reset my password", faq, scores=[0.2, 0.3, 0.9, 0.1], k=3)
    assert hits[0].fragment.position == 2 and settings.for_pool(faq).order == "score"
