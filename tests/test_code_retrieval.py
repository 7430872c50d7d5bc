"""Repository retrieval: scorers, from_repository, the code relation inside FragRelIndex / rerank / LangChain /
LlamaIndex, the RepoCoder prompt and ``fragrel retrieve-code``."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from _code_fixtures import make_python_repo

from fragrel_integrations.cli import main
from fragrel_integrations.core import Fragment, FragRelIndex, ScoredFragment, rerank
from fragrel_integrations.core.code import (
    CodeRelation,
    JaccardScorer,
    build_prompt,
    code_tokens,
    from_repository,
)
from fragrel_integrations.core.code import languages as languages_mod


def make_call_repo(tmp_path):
    """main.py calls beta_tool; alpha_tool and beta_tool look the same to a token retriever."""
    root = tmp_path / "calls"
    for rel, text in {
        "app/main.py": "from lib.alpha import alpha_tool\nfrom lib2.beta import beta_tool\n"
        "def run(data):\n    return beta_tool(data)\n",
        "lib/alpha.py": "def alpha_tool(x):\n    return x\n",
        "lib2/beta.py": "def beta_tool(x):\n    return x\n",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_jaccard_hand_values():
    scorer = JaccardScorer(["def add(a, b):", "return a + b", ""])
    # query {add, a, b, zz}: fragment 0 {def, add, a, b}: 3 / 5; fragment 1 {return, a, b}: 2 / 5; empty: 0 / 4
    np.testing.assert_allclose(scorer("add(a, b) zz"), [0.6, 0.4, 0.0])
    assert np.array_equal(scorer(""), np.zeros(3))
    assert code_tokens("x.Foo_1(2)") == ["x", "Foo_1", "2"]
    with pytest.raises(TypeError, match="wrap a single text"):
        JaccardScorer("def f(): pass")


def test_from_repository_index_scores_by_hand(tmp_path):
    root = make_call_repo(tmp_path)
    index = from_repository(root, fragment_lines=2, stride=2, show_progress=False)
    rel = index.relation
    assert isinstance(rel, CodeRelation) and isinstance(index, FragRelIndex)
    assert [(f.metadata["path"], f.metadata["start_line"], f.metadata["end_line"]) for f in index.fragments] == [
        ("app/main.py", 1, 2),
        ("app/main.py", 3, 4),
        ("lib/alpha.py", 1, 2),
        ("lib2/beta.py", 1, 2),
    ]
    query = "def run(data):\n    return"
    s_ind, s_env, s_rel = index.scores(query)
    np.testing.assert_allclose(s_ind, JaccardScorer([f.text for f in index.fragments])(query))
    w = rel.weights.toarray()
    expected_env = np.array([w[i] @ s_ind / w[i].sum() if w[i].sum() else 0.0 for i in range(4)])
    np.testing.assert_allclose(s_env, expected_env)
    np.testing.assert_allclose(s_rel, s_ind + 0.5 * s_env)
    # run's definition (main.py 3-4) calls beta_tool: Dis(run_def, module_beta) = 0.5**3 * 0.8 * 0.5 = 0.05;
    # alpha is two folders away (0.3 ** 4 * 0.5 < 0.01: pruned), so only beta shares in run's high score
    assert w[1, 3] == pytest.approx(0.05) and w[1, 2] == 0.0
    assert s_ind[2] == s_ind[3]  # a tie for Jaccard alone (corpus order puts alpha first) ...
    ranked = [h.fragment.metadata["path"] for h in index.retrieve(query, k=4)]
    assert ranked.index("lib2/beta.py") < ranked.index("lib/alpha.py")  # ... broken by the call relation
    plain = FragRelIndex(index.fragments, relation=rel, alpha=0.0, scorer=index.scorer)
    plain_ranked = [h.fragment.metadata["path"] for h in plain.retrieve(query, k=4)]
    assert plain_ranked.index("lib/alpha.py") < plain_ranked.index("lib2/beta.py")


def test_other_scorers_and_errors(tmp_path, bow_embedder):
    root = make_python_repo(tmp_path)
    rel = CodeRelation.from_repository(root, show_progress=False)
    bm25 = from_repository(relation=rel, scorer="bm25")
    assert bm25.retrieve("ping pong", k=1)[0].fragment.metadata["path"] == "pkg/cycle.py"
    dense = from_repository(relation=rel, scorer="dense", embedder=bow_embedder, show_progress=False)
    assert dense.retrieve("ping pong", k=1)[0].fragment.metadata["path"] == "pkg/cycle.py"
    with pytest.raises(ValueError, match="needs an embedder"):
        from_repository(relation=rel, scorer="dense")
    with pytest.raises(ValueError, match="scorer must be"):
        from_repository(relation=rel, scorer="tfidf")
    with pytest.raises(ValueError, match="give the repository path"):
        from_repository()
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no source code to index"):
        from_repository(empty, show_progress=False)


def test_missing_extra_names_it(monkeypatch):
    languages_mod.get_language.cache_clear()
    languages_mod.get_query.cache_clear()
    monkeypatch.setitem(sys.modules, "tree_sitter", None)
    try:
        with pytest.raises(ImportError, match=r"fragrel-integrations\[code\]"):
            languages_mod.get_language("python")
    finally:
        monkeypatch.undo()
        languages_mod.get_language.cache_clear()
        languages_mod.get_query.cache_clear()


def _pool(index, query, n=6):
    s_ind = index.scorer(query)
    order = np.argsort(-s_ind, kind="stable")[:n]
    return [index.fragments[i] for i in order], [float(s_ind[i]) for i in order]


def test_rerank_with_code_relation_matches_index_environment(tmp_path):
    root = make_python_repo(tmp_path)
    index = from_repository(root, fragment_lines=3, stride=2, show_progress=False)
    query = "return g()"
    pool, scores = _pool(index, query)
    hits = rerank(query, pool, relation=index.relation, alpha=0.5, k=len(pool), scores=scores)
    w = index.relation.fragment_weights(pool).toarray()
    s = np.array(scores)
    for h in hits:
        i = next(j for j, f in enumerate(pool) if f is h.fragment or f == h.fragment)
        env = w[i] @ s / w[i].sum() if w[i].sum() else 0.0
        assert h.environment_score == pytest.approx(env)
    assert any(h.environment_score > 0 for h in hits)


def test_langchain_retriever_uses_the_code_relation(tmp_path):
    pytest.importorskip("langchain_core")
    from langchain_core.documents import Document

    from fragrel_integrations.langchain import FragRelRetriever

    root = make_python_repo(tmp_path)
    index = from_repository(root, fragment_lines=3, stride=2, show_progress=False)
    query = "return g()"
    pool, scores = _pool(index, query)
    docs = [
        Document(f.text, metadata={**f.metadata, "doc_id": f.doc_id, "position": f.position, "relevance_score": s})
        for f, s in zip(pool, scores, strict=True)
    ]
    retriever = FragRelRetriever(
        base_retriever=lambda q: docs, relation=index.relation, k=4, preset="story", lexical=0
    )  # the base's own scores
    got = retriever.invoke(query)
    expected = rerank(query, pool, relation=index.relation, alpha=0.5, k=4, scores=scores)
    assert [(d.metadata["path"], d.metadata["start_line"]) for d in got] == [
        (h.fragment.metadata["path"], h.fragment.metadata["start_line"]) for h in expected
    ]
    np.testing.assert_allclose(
        [d.metadata["fragrel_environment_score"] for d in got], [h.environment_score for h in expected]
    )
    assert any(d.metadata["fragrel_environment_score"] > 0 for d in got)


def test_llama_index_postprocessor_uses_the_code_relation(tmp_path):
    pytest.importorskip("llama_index.core")
    from llama_index.core.schema import NodeWithScore, TextNode

    from fragrel_integrations.llama_index import FragRelPostprocessor

    root = make_python_repo(tmp_path)
    index = from_repository(root, fragment_lines=3, stride=2, show_progress=False)
    query = "return g()"
    pool, scores = _pool(index, query)
    nodes = [
        NodeWithScore(
            node=TextNode(text=f.text, metadata={**f.metadata, "doc_id": f.doc_id, "position": f.position}), score=s
        )
        for f, s in zip(pool, scores, strict=True)
    ]
    post = FragRelPostprocessor(relation=index.relation, top_n=4, preset="story", lexical=0)
    got = post.postprocess_nodes(nodes, query_str=query)
    expected = rerank(query, pool, relation=index.relation, alpha=0.5, k=4, scores=scores)
    np.testing.assert_allclose(
        [n.node.metadata["fragrel_environment_score"] for n in got], [h.environment_score for h in expected]
    )
    assert any(n.node.metadata["fragrel_environment_score"] > 0 for n in got)


def test_prompt_in_repocoder_format():
    best = ScoredFragment(Fragment("def g():\n\n    return 1", "pkg/b.py", 0, {"path": "pkg/b.py"}), 0.9, 0.9, 0)
    second = Fragment("x = g()", "pkg/a.py", 1, {"path": "pkg/a.py", "language": "python"})
    prompt = build_prompt("y = g(", [best, second])
    sep = "# " + "-" * 50
    assert prompt == (
        "# Here are some relevant code fragments from other files of the repo:\n" + sep + "\n"
        "# the below code fragment can be found in:\n# pkg/a.py\n" + sep + "\n# x = g()\n" + sep + "\n"
        "# the below code fragment can be found in:\n# pkg/b.py\n"
        + sep
        + "\n# def g():\n#\n#     return 1\n"
        + sep
        + "\ny = g("
    )  # the best fragment sits last, next to the code
    go = build_prompt("x := F(", [Fragment("func F() {}", metadata={"path": "u.go", "language": "go"})])
    assert go.startswith("// Here are some") and "// func F() {}" in go
    assert build_prompt("code", []) == "code"
    # a block that does not fit is skipped; smaller later ones still fit
    big = Fragment("word " * 500, metadata={"path": "big.py"})
    small = Fragment("ok()", metadata={"path": "s.py"})
    trimmed = build_prompt("c", [big, small], max_context_tokens=60)
    assert "big.py" not in trimmed and "s.py" in trimmed
    assert "s.py" not in build_prompt("c", [best, small], max_fragments=1)
    with pytest.raises(TypeError, match="Fragment or ScoredFragment"):
        build_prompt("c", ["text"])
    with pytest.raises(ValueError, match="max_context_tokens"):
        build_prompt("c", [small], max_context_tokens=-1)


def test_cli_retrieve_code(tmp_path, capsys):
    root = make_python_repo(tmp_path)
    cache = tmp_path / "idx.sqlite"
    assert main(["retrieve-code", str(root), "return g()", "-k", "2", "--json", "--quiet", "--cache", str(cache)]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert len(hits) == 2 and cache.exists()
    assert {"path", "start_line", "end_line", "score", "independent_score", "environment_score", "text"} <= set(hits[0])
    ctx = tmp_path / "ctx.py"
    ctx.write_text("def again():\n    return pong(")
    assert main(["retrieve-code", str(root), f"@{ctx}", "-k", "3", "--prompt", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# Here are some relevant code fragments") and out.rstrip().endswith("return pong(")
    assert main(["retrieve-code", str(root), "ping", "-k", "1", "--quiet", "--scorer", "bm25"]) == 0
    assert capsys.readouterr().out.startswith("#1 pkg/cycle.py:1-")
    assert main(["retrieve-code", str(root), "x", "-k", "0", "--quiet"]) == 2
    assert "-k must be >= 1" in capsys.readouterr().err
    assert main(["retrieve-code", str(tmp_path / "nope"), "x", "--quiet"]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_cli_retrieve_code_passes_every_index_option(tmp_path, capsys):
    import inspect

    from fragrel_integrations.cli_code import INDEX_OPTIONS
    from fragrel_integrations.core.code.build import build_code_index
    from fragrel_integrations.core.code.loader import load_repository

    accepted = set(inspect.signature(build_code_index).parameters)
    accepted |= set(inspect.signature(load_repository).parameters)
    assert set(INDEX_OPTIONS) <= accepted
    root = make_python_repo(tmp_path)
    (root / "web.js").write_text("function ping() { return pong(); }\n")
    only_js = ["--language", "javascript"]
    assert main(["retrieve-code", str(root), "ping()", "-k", "20", "--json", "--quiet", *only_js]) == 0
    assert {hit["path"] for hit in json.loads(capsys.readouterr().out)} == {"web.js"}
    assert main(["retrieve-code", str(root), "ping()", "-k", "20", "--json", "--quiet", "--stride", "5"]) == 0
    assert {"web.js", "pkg/cycle.py"} <= {hit["path"] for hit in json.loads(capsys.readouterr().out)}


def test_fragrel_index_from_repository_is_the_code_index(tmp_path):
    root = make_call_repo(tmp_path)
    query = "def run(data):\n    return "
    by_method = FragRelIndex.from_repository(root, show_progress=False)
    by_function = from_repository(root, show_progress=False)
    assert isinstance(by_method, FragRelIndex) and isinstance(by_method.relation, CodeRelation)
    assert [(h.fragment.metadata["path"], h.score) for h in by_method.retrieve(query, k=3)] == [
        (h.fragment.metadata["path"], h.score) for h in by_function.retrieve(query, k=3)
    ]

    class MyIndex(FragRelIndex):
        pass

    assert type(MyIndex.from_repository(root, scorer="bm25", show_progress=False)) is MyIndex
    with pytest.raises(ValueError, match="give the repository path"):
        FragRelIndex.from_repository()
