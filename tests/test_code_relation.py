"""Eq. 8 fragment relation: hand-checked values, brute-force agreement, unmappable fragments, incremental
updates equal to a rebuild, persistence."""

from __future__ import annotations

import shutil
import sqlite3

import numpy as np
import pytest
from _code_fixtures import B_PY, make_python_repo

import fragrel_integrations.core.code.code_relation as relation_mod
import fragrel_integrations.core.code.graph as graph_mod
from fragrel_integrations.core import Fragment, FragRelIndex
from fragrel_integrations.core.code import (
    CodeGraph,
    CodeRelation,
    EdgeWeights,
    code_lines,
    fragment_relation,
    load_relation,
    split_code,
)


@pytest.fixture
def repo(tmp_path):
    return make_python_repo(tmp_path)


@pytest.fixture
def graph(repo):
    return CodeGraph.from_path(repo, show_progress=False)


def test_eq8_hand_value(graph):
    # Fragment X = pkg/a.py lines 1-4 ("from .b import g", "", "", "def f():"). Its non-overlapping nodes are
    # the maximal nodes inside the span: import_from_statement (16 bytes), the identifier f (1) and the
    # parameters "()" (2); the function_definition ends on line 5, so it is not inside. L_X = 19.
    # Fragment Y = pkg/b.py lines 1-2 is the whole file: one node, the module (22 bytes with the final newline).
    # Dis(import, module_b):  import -0.5- module_a -1.0- file a -0.3- pkg -0.3- file b -1.0- module_b = 0.045
    #   (the call route import-module_a-f-block-return-call-g-module_b is 0.5**5 * 0.8 * 0.5 = 0.0125)
    # Dis(identifier f, module_b): f -0.5- f_def -0.5**3- call -0.8- g_def -0.5- module_b = 0.025
    #   (the folder route 0.5 * 0.5 * 0.09 = 0.0225 is weaker); the same for the parameters node.
    # eq. 8: (16*22*0.045 + 1*22*0.025 + 2*22*0.025) / (19 * 22) = (0.72 + 0.025 + 0.05) / 19 = 0.795 / 19
    w = fragment_relation(graph, [("pkg/a.py", 1, 4), ("pkg/b.py", 1, 2)], threshold=0.01).toarray()
    assert w[0, 1] == pytest.approx(0.795 / 19, rel=1e-9)
    assert w[1, 0] == pytest.approx(0.795 / 19, rel=1e-9)
    assert w[0, 0] == w[1, 1] == 0.0
    # threshold 0.03 prunes the two 0.025 pairs; the denominator keeps every pair: 0.72 / 19
    pruned = fragment_relation(graph, [("pkg/a.py", 1, 4), ("pkg/b.py", 1, 2)], threshold=0.03).toarray()
    assert pruned[0, 1] == pytest.approx(0.72 / 19, rel=1e-9)
    # a single-node fragment on each side reduces eq. 8 to Dis: f_def (a.py 4-5) and module_b -> 0.1 * 0.5
    single = fragment_relation(graph, [("pkg/a.py", 4, 5), ("pkg/b.py", 1, 2)]).toarray()
    assert single[0, 1] == pytest.approx(0.05)


def _maximal_nodes(f, a, b):
    inside = [i for i in range(f.n_nodes) if f.start_line[i] >= a and f.end_line[i] <= b]
    chosen = [i for i in inside if f.parent[i] < 0 or f.parent[i] not in inside]
    if not chosen:
        containing = [i for i in range(f.n_nodes) if f.start_line[i] <= a and f.end_line[i] >= b]
        chosen = containing[-1:]
    return chosen


def _brute_eq8(graph, spans, threshold):
    """Eq. 8 summed over all node pairs with scipy's Dijkstra on the full graph (the reference ``node_relation``)."""
    nodes, lens = [], []
    for path, a, b in spans:
        f = graph.syntax(path)
        local = _maximal_nodes(f, a, b)
        nodes.append([graph.node(path, i) for i in local])
        lens.append(np.array([f.size[i] for i in local], float))
    cache = {}
    brute = np.zeros((len(spans), len(spans)))
    for i in range(len(spans)):
        for j in range(len(spans)):
            if i == j or not nodes[i] or not nodes[j] or lens[i].sum() == 0 or lens[j].sum() == 0:
                continue
            total = 0.0
            for k, lk in zip(nodes[i], lens[i], strict=True):
                if k not in cache:
                    cache[k] = graph.node_relation(k, threshold=threshold)
                total += lk * float(np.dot(lens[j], cache[k][nodes[j]]))
            brute[i, j] = total / (lens[i].sum() * lens[j].sum())
    return brute


def test_sparse_search_equals_brute_force_eq8(graph):
    """Every pair of 2-line windows (stride 1): the pruned batched search against eq. 8 summed over all node
    pairs with scipy's Dijkstra on the full graph (the reference ``node_relation``)."""
    threshold = 0.02
    spans = []
    for f in graph.files:
        for start in range(1, max(f.n_lines, 1) + 1):
            spans.append((f.path, start, min(start + 1, max(f.n_lines, 1))))
    fast = fragment_relation(graph, spans, threshold=threshold).toarray()
    brute = _brute_eq8(graph, spans, threshold)
    assert fast.shape == (len(spans), len(spans)) and len(spans) >= 38
    np.testing.assert_allclose(fast, brute, atol=1e-9)
    assert np.count_nonzero(fast) > 0 and np.allclose(fast, fast.T)


FLAT_PY = "a = 1\nb = 2\nc = f(a)\nd = 4\n\n\ndef f(x):\n    return x\n" + "e = 5\n" * 6
TABLE_PY = "TABLE = {\n" + "".join(f"    {i}: {i * i},\n" for i in range(12)) + "}\nz = TABLE[3]\n"


@pytest.mark.parametrize("threshold", [0.01, 0.03, 0.3])
def test_folded_flat_nodes_equal_brute_force_eq8(tmp_path, threshold):
    """Flat modules and long literals (many one-edge nodes under one parent, the quadratic case) are folded
    into their parent; overlapping windows share such nodes. Same values as eq. 8 summed over node pairs,
    including thresholds that prune folded pairs (0.03) and a node's pairing with itself (0.3 > 0.5 * 0.5)."""
    root = tmp_path / "flat"
    (root / "sub").mkdir(parents=True)
    (root / "flat.py").write_text(FLAT_PY)
    (root / "table.py").write_text(TABLE_PY)
    (root / "sub" / "more.py").write_text("from flat import f\n\nx = f(1)\ny = 2\n")
    graph = CodeGraph.from_path(root, show_progress=False)
    spans = [
        (f.path, start, min(start + 2, f.n_lines))
        for f in graph.files
        for start in range(1, f.n_lines + 1)  # 3-line windows, stride 1: neighbours share nodes
    ]
    fast = fragment_relation(graph, spans, threshold=threshold).toarray()
    np.testing.assert_allclose(fast, _brute_eq8(graph, spans, threshold), atol=1e-9)
    assert np.count_nonzero(fast) > len(spans)


def test_flat_file_indexes_in_linear_node_work(tmp_path):
    """Top-level statements of a flat file each searched every other through the module: 10,000 lines took 15 s,
    40,000 took 255 s. Folded, the node search is one Dijkstra; what is left is the fragment relation itself,
    dense within such a file under eq. 8 (every window relates to every other at 0.5 * 0.5). A file at the
    default line cap (20,000 lines) indexes in a few seconds; one line more is skipped and reported."""
    import time

    root = tmp_path / "flat"
    root.mkdir()
    (root / "a.py").write_text("a = 1\n" * 20_000)
    (root / "b.py").write_text("b = 2\n" * 20_001)
    t0 = time.perf_counter()
    rel = CodeRelation.from_repository(root, show_progress=False)
    elapsed = time.perf_counter() - t0
    assert len(rel.fragments) == 1999 and rel.graph.n_files == 1
    assert {s.path: s.reason for s in rel.skipped} == {"b.py": "more than max_file_lines=20000 lines"}
    assert elapsed < 20, f"indexing 20k flat lines took {elapsed:.1f} s"
    w = rel.weights
    assert w[0, 1998] == pytest.approx(0.25) and w[100, 101] > w[0, 1998]  # overlap adds the shared nodes


def test_window_inside_one_node_uses_the_innermost_node(tmp_path):
    root = tmp_path / "r"
    root.mkdir()
    (root / "doc.py").write_text('TEXT = """\n' + "line\n" * 30 + '"""\n\n\ndef f():\n    return TEXT\n')
    g = CodeGraph.from_path(root, show_progress=False)
    w = fragment_relation(g, [("doc.py", 5, 10), ("doc.py", 35, 36)]).toarray()
    assert w[0, 1] > 0  # the window inside the string is represented by the string's innermost node


def test_unmappable_fragments_have_no_relation(repo):
    rel = CodeRelation.from_repository(repo, show_progress=False)
    mapped = rel.fragments[:3]
    odd = [
        Fragment("no metadata", "x", 0),
        Fragment("unknown file", "y", 0, {"path": "nope.py", "start_line": 1, "end_line": 3}),
        Fragment("bad span", "z", 0, {"path": "pkg/a.py", "start_line": 4, "end_line": 2}),
        Fragment("absolute path", "w", 0, {"path": str(repo / "pkg" / "b.py"), "start_line": 1, "end_line": 2}),
    ]
    w = rel.fragment_weights(mapped + odd).toarray()
    assert np.all(w[3:6] == 0) and np.all(w[:, 3:6] == 0)
    assert w[6].sum() > 0  # an absolute path inside the root is mapped
    index = FragRelIndex(mapped + odd, relation=rel, scorer=lambda q: np.arange(7, dtype=float))
    s_ind, s_env, s_rel = index.scores("q")
    assert np.all(s_env[3:6] == 0) and np.array_equal(s_rel[3:6], s_ind[3:6])


def test_known_windows_are_read_from_the_stored_matrix(repo, monkeypatch):
    rel = CodeRelation.from_repository(repo, show_progress=False)
    pick = [rel.fragments[i] for i in (5, 0, 3)]
    fresh = fragment_relation(rel.graph, [rel.span(f) for f in pick], threshold=rel.threshold).toarray()
    assert rel.relation(pick[0], pick[1]) == pytest.approx(fresh[0, 1])

    def no_search(*args, **kwargs):
        raise AssertionError("stored windows must not be searched again")

    monkeypatch.setattr(relation_mod, "fragment_relation", no_search)
    np.testing.assert_allclose(rel.fragment_weights(pick).toarray(), fresh, atol=1e-12)
    with pytest.raises(AssertionError, match="searched again"):  # a span that is not a stored window
        rel.fragment_weights([*pick, Fragment("x", "q", 0, {"path": "pkg/a.py", "start_line": 1, "end_line": 2})])


def _rebuild(repo, tmp_path, changes):
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy, symlinks=True)
    for rel_path, text in changes.items():
        target = copy / rel_path
        if text is None:
            target.unlink()
        else:
            target.write_text(text)
    return CodeRelation.from_repository(copy, show_progress=False)


def _assert_same(a, b):
    assert [(f.doc_id, f.position, f.text, dict(f.metadata)) for f in a.fragments] == [
        (f.doc_id, f.position, f.text, dict(f.metadata)) for f in b.fragments
    ]
    np.testing.assert_allclose(a.weights.toarray(), b.weights.toarray(), atol=1e-12)


@pytest.mark.parametrize(
    "changes",
    [
        {"pkg/b.py": "def h():\n    return 2\n"},  # g disappears: three call edges go
        {"pkg/b.py": "\n\n" + B_PY + "\n\ndef g2():\n    return g()\n"},  # shifted lines, a new in-file call
        {"pkg/new.py": "from .cycle import pong\n\n\ndef n():\n    return pong(1)\n"},  # a new file
        {"pkg/cycle.py": None},  # a removed file
        # a flat file (folded statements) calling into b.py, then b.py changed under it
        {"pkg/flat.py": "from .b import g\n" + "a = 1\n" * 30 + "z = g()\n", "pkg/b.py": "def g():\n    return 3\n"},
    ],
)
def test_incremental_update_equals_a_full_rebuild(repo, tmp_path, changes):
    rel = CodeRelation.from_repository(repo, show_progress=False)
    before = rel.weights.nnz
    for path, text in changes.items():
        report = rel.update_file(path, text) if text is not None else rel.remove_file(path)
        assert report.action in ("updated", "added", "removed")
        assert report.rows_recomputed <= len(rel.fragments)
    _assert_same(rel, _rebuild(repo, tmp_path, changes))
    assert before > 0


def test_incremental_update_with_other_edge_weights(repo, tmp_path):
    # syntax * file_root * directory (0.9 * 1 * 0.5) > call (0.2): the seed radius must use the larger one
    weights = EdgeWeights(syntax=0.9, directory=0.5, call=0.2)
    rel = CodeRelation.from_repository(repo, edge_weights=weights, threshold=0.05, show_progress=False)
    rel.update_file("pkg/b.py", "def h():\n    return g()\n\n\ndef g():\n    return 1\n")
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy, symlinks=True)
    (copy / "pkg" / "b.py").write_text("def h():\n    return g()\n\n\ndef g():\n    return 1\n")
    _assert_same(rel, CodeRelation.from_repository(copy, edge_weights=weights, threshold=0.05, show_progress=False))


def test_update_from_disk_and_unchanged_files(repo):
    rel = CodeRelation.from_repository(repo, show_progress=False)
    assert rel.update_file("pkg/a.py").action == "unchanged"
    (repo / "pkg" / "a.py").write_text("def f():\n    return 0\n")
    assert rel.update_file("pkg/a.py").action == "updated"
    (repo / "pkg" / "a.py").unlink()
    report = rel.update_file("pkg/a.py")
    assert report.action == "removed" and report.fragments_added == 0
    assert "pkg/a.py" not in rel.graph.file_index
    with pytest.raises(ValueError, match="supported source extension"):
        rel.update_file("notes.txt", "hello")


def test_save_load_round_trip_and_no_pickle(repo, tmp_path):
    rel = CodeRelation.from_repository(repo, show_progress=False)
    path = tmp_path / "index.sqlite"
    rel.save(path)
    again = load_relation(path)
    _assert_same(rel, again)
    assert again.threshold == rel.threshold and again.root == rel.root
    assert [s.path for s in again.skipped] == [s.path for s in rel.skipped]
    with sqlite3.connect(path) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        blobs = [r[0] for r in conn.execute("SELECT arrays FROM files")]
    assert tables == {"header", "files", "skipped", "fragments", "relation"}
    assert all(b[:2] == b"PK" for b in blobs)  # .npz archives, read back with allow_pickle=False
    # the loaded index keeps working incrementally
    again.update_file("pkg/b.py", "def h():\n    return 2\n")
    rel.update_file("pkg/b.py", "def h():\n    return 2\n")
    _assert_same(rel, again)
    (tmp_path / "junk.sqlite").write_bytes(b"not a database")
    with pytest.raises(ValueError, match="not a FragRel code index"):
        load_relation(tmp_path / "junk.sqlite")


def test_cache_is_reused_without_parsing_and_synced_after_edits(repo, tmp_path, monkeypatch):
    cache = tmp_path / "idx.sqlite"
    first = CodeRelation.from_repository(repo, cache=cache, show_progress=False)
    assert cache.exists()

    def no_parse(*args, **kwargs):
        raise AssertionError("the stored index should have been reused")

    monkeypatch.setattr(relation_mod, "parse_source", no_parse)
    monkeypatch.setattr(graph_mod, "parse_source", no_parse)
    reused = CodeRelation.from_repository(repo, cache=cache, show_progress=False)
    _assert_same(first, reused)
    monkeypatch.undo()
    (repo / "pkg" / "b.py").write_text("def h():\n    return 2\n")
    (repo / "pkg" / "extra.py").write_text("def e():\n    return 3\n")
    synced = CodeRelation.from_repository(repo, cache=cache, show_progress=False)
    _assert_same(synced, CodeRelation.from_repository(repo, show_progress=False))
    other = CodeRelation.from_repository(repo, cache=cache, threshold=0.05, show_progress=False)
    assert other.threshold == 0.05  # other settings: rebuilt, not the stored one


def test_windows_follow_tree_sitter_lines():
    text = "a = 1\fb = 2\r\nc = 3\n"
    assert code_lines(text) == ["a = 1\fb = 2", "c = 3"]
    frs = split_code(text, path="m.py", fragment_lines=1, stride=1)
    assert [(f.metadata["start_line"], f.text) for f in frs] == [(1, "a = 1\fb = 2"), (2, "c = 3")]
    assert frs[0].doc_id == "m.py" and frs[0].metadata["language"] == "python"
    with pytest.raises(ValueError, match="stride"):
        split_code("x", path="m.py", fragment_lines=2, stride=3)


def test_bad_arguments(graph):
    with pytest.raises(ValueError, match="threshold must be in"):
        fragment_relation(graph, [], threshold=0.0)
    with pytest.raises(TypeError, match="threshold must be a number"):
        CodeRelation(graph, threshold="high")
    with pytest.raises(TypeError, match="graph must be a CodeGraph"):
        CodeRelation("not a graph")
    with pytest.raises(ValueError, match="rows must be indices"):
        fragment_relation(graph, [("pkg/a.py", 1, 2)], rows=[3])
