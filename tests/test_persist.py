"""FragRelIndex.save / load: one SQLite file, validated on load, never pickle, never overwriting foreign files."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest
from conftest import BagOfWordsEmbedder

from fragrel_integrations import (
    CallableRelation,
    CompositeRelation,
    ContextRelation,
    Fragment,
    FragRelIndex,
    SemanticRelation,
)
from fragrel_integrations.testing import HashingEmbedder

TEXTS = [
    "the lighthouse keeper polished the lamp every evening " * 8 + "and the parrot named Poll spoke",
    "fishing boats came back to the harbour with nets full of herring",
    "children built castles out of wet sand on the beach",
]


@pytest.fixture
def index(bow_embedder):
    fragments = [Fragment(t, "book", i, {"page": i, "tags": ["a", "b"]}) for i, t in enumerate(TEXTS)]
    return FragRelIndex(
        fragments,
        embedder=bow_embedder,
        window_words=20,
        relation=CompositeRelation([(ContextRelation(0.5), 1.0), (SemanticRelation(top_m=2), 0.5)]),
        alpha=0.7,
        scorer="hybrid",
        show_progress=False,
    )


def test_round_trip_keeps_fragments_embeddings_settings_and_scores(index, bow_embedder, tmp_path):
    path = index.save(tmp_path / "sub" / "book.fragrel", metadata={"source": "book.txt"})
    calls = bow_embedder.calls
    loaded = FragRelIndex.load(path, embedder=bow_embedder)
    assert bow_embedder.calls == calls + 1  # nothing re-embedded: one call for the identity probe
    assert loaded.fragments == index.fragments and loaded.fragments[1].metadata == {"page": 1, "tags": ["a", "b"]}
    np.testing.assert_array_equal(loaded.window_embeddings, index.window_embeddings)
    np.testing.assert_array_equal(loaded.window_offsets, index.window_offsets)
    settings = (loaded.alpha, loaded.relation, loaded.scorer_name, loaded.window_words)
    assert settings == (0.7, index.relation, "hybrid", 20)
    assert loaded.saved_metadata == {"source": "book.txt"}
    for got, want in zip(loaded.scores("parrot Poll"), index.scores("parrot Poll"), strict=True):
        np.testing.assert_allclose(got, want)
    # settings can be changed on load
    other = FragRelIndex.load(path, embedder=bow_embedder, relation=ContextRelation(0.0), alpha=0.0, scorer="bm25")
    assert other.retrieve("harbour herring", k=1)[0].fragment.position == 1
    # a FragRel index file may be replaced by a newer save
    index.save(path, metadata={"source": "v2"})
    assert FragRelIndex.load(path, embedder=bow_embedder).saved_metadata == {"source": "v2"}


def test_bm25_index_without_embeddings_round_trips(tmp_path):
    index = FragRelIndex.from_fragments(TEXTS, scorer="bm25")
    loaded = FragRelIndex.load(index.save(tmp_path / "bm25.fragrel"))
    assert loaded.embeddings is None
    assert [h.fragment.text for h in loaded.retrieve("herring", k=2)] == [
        h.fragment.text for h in index.retrieve("herring", k=2)
    ]


def test_foreign_files_are_refused_and_never_overwritten(index, bow_embedder, tmp_path):
    text_file = tmp_path / "notes.txt"
    text_file.write_bytes(b"my precious notes " * 100)
    other_db = tmp_path / "app.sqlite"
    with sqlite3.connect(other_db) as conn:
        conn.execute("CREATE TABLE users (name TEXT)")
        conn.execute("INSERT INTO users VALUES ('ann')")
    conn.close()
    for path in (text_file, other_db):
        before = path.read_bytes()
        with pytest.raises(ValueError, match=f"{path.name} is not a FragRel index file"):
            FragRelIndex.load(path, embedder=bow_embedder)
        with pytest.raises(ValueError, match=f"refusing to overwrite .*{path.name}"):
            index.save(path)
        assert path.read_bytes() == before
    with pytest.raises(ValueError, match="is a directory"):
        index.save(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"missing\.fragrel"):
        FragRelIndex.load(tmp_path / "missing.fragrel")
    assert not (tmp_path / "missing.fragrel").exists()


def _corrupt(path, sql, *args):
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(sql, args)
    conn.close()


@pytest.mark.parametrize(
    ("sql", "args", "match"),
    [
        ("UPDATE fragments SET vectors = ? WHERE idx = 1", (b"\x00" * 7,), "damaged .*embeddings of fragment 1"),
        ("UPDATE fragments SET vectors = ? WHERE idx = 0", (np.full(64 * 4, np.nan, "<f4").tobytes(),), "NaN"),
        ("DELETE FROM fragments WHERE idx = 2", (), "expected fragments 0..2"),
        ("UPDATE fragments SET metadata = ? WHERE idx = 0", ("{not json",), "damaged .*metadata of fragment 0"),
        ("UPDATE header SET value = ? WHERE key = 'version'", ("99",), "version 99.*rebuild it"),
        ("UPDATE header SET value = ? WHERE key = 'settings'", ("[]",), "damaged FragRel index"),
        ("UPDATE header SET value = ? WHERE key = 'format'", ('"other"',), "not a FragRel index file"),
    ],
)
def test_damaged_index_is_a_clear_error_naming_the_file(index, bow_embedder, tmp_path, sql, args, match):
    path = index.save(tmp_path / "book.fragrel")
    _corrupt(path, sql, *args)
    with pytest.raises(ValueError, match=match) as err:
        FragRelIndex.load(path, embedder=bow_embedder)
    assert "book.fragrel" in str(err.value)


def test_truncated_file_is_refused(index, bow_embedder, tmp_path):
    path = index.save(tmp_path / "book.fragrel")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    with pytest.raises(ValueError, match=r"book\.fragrel"):
        FragRelIndex.load(path, embedder=bow_embedder)


def test_other_embedder_custom_relation_and_stale_metadata_are_refused(index, bow_embedder, tmp_path):
    path = index.save(tmp_path / "book.fragrel", metadata={"file_sha256": "abc"})

    class Other(BagOfWordsEmbedder):
        model_name = "other-model"

    with pytest.raises(ValueError, match=r"was embedded with .*BagOfWordsEmbedder.*pass embedder="):
        FragRelIndex.load(path, embedder=Other())
    with pytest.raises(ValueError, match="stale"):
        FragRelIndex.load(path, embedder=bow_embedder, expect={"file_sha256": "def"})
    custom = FragRelIndex.from_fragments(
        TEXTS, scorer=lambda q: np.arange(3.0), relation=CallableRelation(lambda frs: np.ones((3, 3)))
    )
    path = custom.save(tmp_path / "custom.fragrel")
    with pytest.raises(ValueError, match="custom relation: pass relation="):
        FragRelIndex.load(path)
    with pytest.raises(ValueError, match="custom scorer: pass scorer="):
        FragRelIndex.load(path, relation=ContextRelation(0.3))
    assert len(FragRelIndex.load(path, relation=ContextRelation(0.3), scorer="bm25")) == 3
    with pytest.raises(TypeError, match="JSON-serialisable"):
        index.save(tmp_path / "x.fragrel", metadata={"bad": object()})
    assert not (tmp_path / "x.fragrel").exists()
    assert not list(tmp_path.glob(".*.tmp"))  # no temporary file left behind


def test_top_m_is_saved_and_can_be_overridden(tmp_path):
    index = FragRelIndex.from_fragments(["a cat", "sat on", "the mat"], scorer="bm25", top_m=2)
    path = index.save(tmp_path / "i.fragrel")
    assert FragRelIndex.load(path).top_m == 2
    assert FragRelIndex.load(path, top_m=None).top_m is None


DEEP = "[" * 100_000 + "]" * 100_000  # a RecursionError in json.loads
NESTED = json.dumps({"page": 1, "x": json.loads("[" * 200 + "]" * 200)})  # parses, nested deeper than any save


@pytest.mark.parametrize("text", [DEEP, NESTED], ids=["deep", "nested"])
@pytest.mark.parametrize("where", ["settings", "metadata", "fragment"])
def test_deeply_nested_json_is_a_value_error_naming_the_file(index, bow_embedder, tmp_path, where, text):
    path = index.save(tmp_path / "book.fragrel")
    if where == "fragment":
        _corrupt(path, "UPDATE fragments SET metadata = ? WHERE idx = 1", text)
    else:
        _corrupt(path, "UPDATE header SET value = ? WHERE key = ?", text, where)
    with pytest.raises(ValueError, match="nested") as err:
        FragRelIndex.load(path, embedder=bow_embedder)
    assert "book.fragrel" in str(err.value)
    index.save(path)  # a damaged index of ours may be replaced
    assert len(FragRelIndex.load(path, embedder=bow_embedder)) == 3
    with pytest.raises(TypeError, match="nest at most 64"):
        index.save(tmp_path / "deep.fragrel", metadata={"x": json.loads("[" * 100 + "]" * 100)})


def test_an_index_refuses_another_embedder_of_the_same_class_and_dimension(tmp_path):
    index = FragRelIndex.from_fragments(TEXTS, embedder=HashingEmbedder(dim=64), show_progress=False)
    path = index.save(tmp_path / "book.fragrel")
    want = [h.fragment.position for h in index.retrieve("harbour herring", k=3)]
    loaded = FragRelIndex.load(path, embedder=HashingEmbedder(dim=64))
    assert [h.fragment.position for h in loaded.retrieve("harbour herring", k=3)] == want
    with pytest.raises(ValueError, match=r"book\.fragrel was .*fingerprint .*pass the embedder it was built with"):
        FragRelIndex.load(path, embedder=HashingEmbedder(dim=64, seed=1))  # another model behind the same name
    windowed = HashingEmbedder(dim=64)
    windowed.max_input_tokens = 128  # same vectors, another input window: fragments would be split otherwise
    with pytest.raises(ValueError, match=r"book\.fragrel was .*reading None tokens per text, this one reads 128"):
        FragRelIndex.load(path, embedder=windowed)
    # a header that lost the embedder's identity is damaged (the one damage rule), not trusted by name
    _corrupt(path, "UPDATE header SET value = ? WHERE key = 'built_by'", json.dumps({"package": "x"}))
    with pytest.raises(ValueError, match=r"book\.fragrel is a damaged FragRel index \(embedder="):
        FragRelIndex.load(path, embedder=HashingEmbedder(dim=64))
