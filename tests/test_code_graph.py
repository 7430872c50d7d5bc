"""The appendix-A code graph: tree-sitter nodes, edges and weights, call resolution, Dis by hand."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from _code_fixtures import make_polyglot_repo, make_python_repo
from scipy.sparse.csgraph import dijkstra

from fragrel_integrations.core.code import CodeGraph, EdgeWeights, FileSyntax, SourceFile, parse_source


@pytest.fixture
def py_graph(tmp_path):
    return CodeGraph.from_path(make_python_repo(tmp_path), show_progress=False)


def test_python_call_edges_in_file_cross_file_and_through_imports(py_graph):
    assert sorted(py_graph.call_edge_labels()) == [
        ("pkg/a.py:5-5 call", "pkg/b.py:1-2 function_definition"),  # from .b import g; g()
        ("pkg/broken.py:8-8 call", "pkg/b.py:1-2 function_definition"),  # after the syntax error
        ("pkg/cycle.py:2-2 call", "pkg/cycle.py:5-6 function_definition"),  # ping -> pong
        ("pkg/cycle.py:6-6 call", "pkg/cycle.py:1-2 function_definition"),  # pong -> ping (a cycle)
        ("pkg/latin.py:6-6 call", "pkg/b.py:1-2 function_definition"),  # the latin-1 file
        ("pkg/runner.py:10-10 call", "pkg/cycle.py:1-2 function_definition"),  # from . import cycle; cycle.ping()
        ("pkg/runner.py:7-7 call", "pkg/b.py:1-2 function_definition"),  # import pkg.b as bb; bb.g()
        ("pkg/runner.py:7-7 call", "pkg/runner.py:9-10 function_definition"),  # self.step()
    ]


def test_polyglot_call_edges(tmp_path):
    g = CodeGraph.from_path(make_polyglot_repo(tmp_path), show_progress=False)
    assert sorted(g.call_edge_labels()) == [
        ("go/main.go:3-3 call_expression", "go/main.go:4-4 function_declaration"),  # same package
        ("go/main.go:3-3 call_expression", "go/util/u.go:2-2 function_declaration"),  # util.F via import path
        ("java/a/b/K.java:3-3 method_invocation", "java/a/b/K.java:3-3 method_declaration"),  # n()
        ("java/a/b/K.java:3-3 method_invocation", "java/a/b/util/U.java:2-2 method_declaration"),  # U.s()
        ("java/a/b/K.java:3-3 object_creation_expression", "java/a/b/util/U.java:2-2 class_declaration"),
        ("web/a.js:3-3 call_expression", "web/b.ts:1-1 function_declaration"),  # import {b as bb}
        ("web/a.js:3-3 call_expression", "web/c.js:1-1 function_declaration"),  # require('./c').cc
        ("web/b.ts:1-1 call_expression", "web/b.ts:2-2 function_declaration"),  # in-file
        ("web/k.js:2-2 call_expression", "web/k.js:3-3 method_definition"),  # this.step()
        ("web/k.js:5-5 call_expression", "web/k.js:2-2 method_definition"),  # unique-name fallback: .run()
        ("web/k.js:5-5 new_expression", "web/k.js:1-4 class_declaration"),  # new K()
    ]


def test_node_relation_hand_values(py_graph):
    g = py_graph
    f_def = g.definition("f", "pkg/a.py")[0]
    g_def = g.definition("g", "pkg/b.py")[0]
    call = g.nodes_at("pkg/a.py", 5, kind="call")[0]
    root_a, root_b = g.node("pkg/a.py", 0), g.node("pkg/b.py", 0)
    # call site -> definition: one 0.8 edge
    assert g.node_relation(call, g_def) == pytest.approx(0.8)
    # f -> block -> return -> call (0.5 ** 3) -> g (0.8) = 0.1; the folder route is 0.5 * 0.09 * 0.5 = 0.0225
    assert g.node_relation(f_def, g_def) == pytest.approx(0.1)
    # file node <-> syntax root is a weight-1.0 edge (cost 0 in -log space)
    assert g.node_relation(g.file_node("pkg/a.py"), root_a) == 1.0
    # root_a -1.0- file a -0.3- folder pkg -0.3- file b -1.0- root_b = 0.09 (two weight-1.0 edges on the path)
    assert g.node_relation(root_a, root_b) == pytest.approx(0.09)
    # the cycle ping <-> pong: siblings under the module 0.5 * 0.5 = 0.25 beat the call route 0.125 * 0.8 = 0.1
    ping, pong = g.definition("ping")[0], g.definition("pong")[0]
    assert g.node_relation(ping, pong) == pytest.approx(0.25)
    # the call inside ping to its enclosing definition: call -> return -> block -> ping is 0.5 ** 3 = 0.125, but
    # through the cycle edge call -0.8- pong -0.5- module -0.5- ping is 0.2 (the maximum-product path wins)
    ping_call = g.nodes_at("pkg/cycle.py", 2, kind="call")[0]
    assert g.node_relation(ping_call, ping) == pytest.approx(0.2)
    # pruning: below the threshold counts as 0
    assert g.node_relation(root_a, root_b, threshold=0.1) == 0.0


def test_weight_one_edges_are_never_a_zero_cost(py_graph):
    cost = py_graph.cost
    assert cost.data.min() > 0  # weight-1.0 edges get MIN_COST, not 0
    kept = cost.copy()
    kept.eliminate_zeros()
    assert kept.nnz == cost.nnz
    # the trap avoided: a cost of exactly 0 is dropped by eliminate_zeros (and by many sparse operations),
    # which cuts the file <-> root edges and disconnects every file from the folder tree
    naive = py_graph.adjacency.copy()
    naive.data = -np.log(naive.data)
    naive.eliminate_zeros()
    a, root_a = py_graph.file_node("pkg/a.py"), py_graph.node("pkg/a.py", 0)
    assert np.isinf(dijkstra(naive, indices=a)[root_a])
    assert dijkstra(cost, indices=a)[root_a] < 1e-6


def test_adjacency_is_symmetric_with_appendix_a_weights(py_graph):
    adj = py_graph.adjacency
    assert abs(adj - adj.T).max() == 0
    assert set(np.unique(adj.data).round(6)) == {0.3, 0.5, 0.8, 1.0}
    custom = CodeGraph(py_graph.files, weights=EdgeWeights(call=0.6))
    assert set(np.unique(custom.adjacency.data).round(6)) == {0.3, 0.5, 0.6, 1.0}
    with pytest.raises(ValueError, match="call must be a number in"):
        EdgeWeights(call=0.0)


def test_syntax_error_file_is_parsed_with_recovery(py_graph):
    broken = py_graph.syntax("pkg/broken.py")
    assert broken.has_error and not py_graph.syntax("pkg/a.py").has_error
    assert "ok" in [d.name for d in broken.definitions]  # its call to g() is resolved (see the call-edge test)
    worse = parse_source(SourceFile("w.py", "python", "x = (((\n)) ]]\n\n\ndef after():\n    return x\n"))
    assert worse.has_error
    assert "ERROR" in {worse.kind_name(i) for i in range(worse.n_nodes)}  # kept as an ordinary node
    assert [d.name for d in worse.definitions] == ["after"]


def test_definitions_scopes_and_records_round_trip(py_graph):
    runner = py_graph.syntax("pkg/runner.py")
    defs = {d.name: d for d in runner.definitions}
    assert defs["Runner"].kind == "class" and defs["Runner"].top_level
    assert defs["run"].scope == "Runner" and not defs["run"].top_level
    assert [c.enclosing_class for c in runner.calls] == ["Runner", "Runner", "Runner"]
    again = FileSyntax.from_records(runner.records(), runner.arrays())
    assert again.definitions == runner.definitions and again.calls == runner.calls
    assert np.array_equal(again.parent, runner.parent) and again.imports == runner.imports


def test_line_spans_follow_tree_sitter_rows():
    src = SourceFile("m.py", "python", "x = 1\n\ndef f():\n    return 2\n")
    f = parse_source(src)
    assert (int(f.start_line[0]), int(f.end_line[0])) == (1, 4)  # the module ends at the start of row 5: line 4
    fdef = next(d.node for d in f.definitions if d.name == "f")
    assert (int(f.start_line[fdef]), int(f.end_line[fdef])) == (3, 4)
    assert np.all(np.diff(f.start_line) >= 0)  # pre-order: start lines never go back (covers rely on it)


def test_with_file_replaces_adds_and_removes(py_graph):
    g2 = py_graph.with_file("pkg/b.py", parse_source(SourceFile("pkg/b.py", "python", "def h():\n    return 2\n")))
    assert not any("pkg/b.py" in b for _, b in g2.call_edge_labels())  # nobody calls h
    g3 = g2.with_file("pkg/b.py", None)
    assert "pkg/b.py" not in g3.file_index and g3.n_files == py_graph.n_files - 1
    with pytest.raises(ValueError, match="nothing to remove"):
        g3.with_file("pkg/b.py", None)
    with pytest.raises(ValueError, match="not a file of the graph"):
        g3.file_node("nope.py")


def test_graph_node_ids_layout(py_graph):
    g = py_graph
    assert g.describe(0) == "dir:." and g.describe(g.dir_node("pkg")) == "dir:pkg"
    assert g.describe(g.file_node("pkg/a.py")) == "file:pkg/a.py"
    assert g.n_nodes == g.n_dirs + g.n_files + sum(f.n_nodes for f in g.files)
    assert isinstance(g.adjacency, sp.csr_array) and g.adjacency.shape == (g.n_nodes, g.n_nodes)
