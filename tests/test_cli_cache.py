"""`fragrel retrieve`/`ask`: the on-disk embedding cache and --preset (a counting stand-in for the embedded model)."""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3

import numpy as np
import pytest
from conftest import BagOfWordsEmbedder

from fragrel_integrations.cli import main
from fragrel_integrations.core.embedder_identity import IDENTITY_PROBE
from fragrel_integrations.core.saved_index import VERSION
from fragrel_integrations.models import local

BOOK = " ".join(f"filler{i % 37} words here" for i in range(400)) + " the captain was killed by the cook " + "x " * 90


class CountingEmbedder(BagOfWordsEmbedder):
    max_input_tokens = 52  # windows of 30 words
    model_id = "counting-test-model"

    def __init__(self) -> None:
        super().__init__(dim=256)
        self.n_texts = 0

    def embed_documents(self, texts):
        self.n_texts += sum(t != IDENTITY_PROBE for t in texts)  # the saved index's identity check is not counted
        return super().embed_documents(texts)


@pytest.fixture
def model(monkeypatch):
    emb = CountingEmbedder()
    monkeypatch.setattr(local, "default_embedder", lambda: emb)
    monkeypatch.setattr(local, "default_embedder_id", lambda: emb.model_id)
    return emb


@pytest.fixture
def book(tmp_path):
    path = tmp_path / "book.txt"
    path.write_text(BOOK, encoding="utf-8")
    return path


def retrieve(capsys, book, *extra):
    argv = ["retrieve", str(book), "who killed the captain", "--json", "--quiet", "--fragment-words", "100", *extra]
    code = main(argv)
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out), out.err


def test_second_run_reads_the_cache_and_a_changed_file_is_embedded_again(model, book, tmp_path, capsys):
    cache = tmp_path / "cache"
    whole = ("--dense-candidates", "0")  # the whole file embedded first, cached as one index
    first, _ = retrieve(capsys, book, "--cache-dir", str(cache), *whole)
    embedded = model.n_texts
    assert embedded > 13  # 14 fragments of 100 words, several windows each
    [entry] = cache.iterdir()
    assert entry.name.startswith("book-") and entry.suffix == ".fragrel"
    second, _ = retrieve(capsys, book, "--cache-dir", str(cache), *whole)
    assert model.n_texts == embedded  # nothing embedded again
    assert second == first and "captain" in first[0]["text"]
    # other settings that do not change the embeddings reuse the same cache entry
    retrieve(capsys, book, "--cache-dir", str(cache), "--preset", "haystack", "--scorer", "dense")
    assert model.n_texts == embedded
    # a changed file is embedded again, into its own entry
    book.write_text(BOOK.replace("captain", "admiral"), encoding="utf-8")
    changed, _ = retrieve(capsys, book, "--cache-dir", str(cache), *whole)
    assert model.n_texts > embedded and "admiral" in " ".join(h["text"] for h in changed)
    assert len(list(cache.iterdir())) == 2
    # another fragment size is another entry
    retrieve(capsys, book, "--cache-dir", str(cache), "--fragment-words", "120", *whole)
    assert len(list(cache.iterdir())) == 3


def ask_retrieve(capsys, book, question, *extra):
    code = main(["retrieve", str(book), question, "--json", "--quiet", "--fragment-words", "100", *extra])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out), out.err


def test_staged_default_embeds_only_candidates_and_caches_them_as_they_accumulate(model, book, tmp_path, capsys):
    cache = tmp_path / "cache"
    opts = ("--cache-dir", str(cache), "--dense-candidates", "3")
    first, _ = ask_retrieve(capsys, book, "who killed the captain", *opts)
    assert "captain" in first[0]["text"]
    [entry] = cache.iterdir()
    assert entry.name.startswith("book-") and entry.suffix == ".vectors"
    once = model.n_texts
    assert 0 < once <= 12  # three fragments of four 30-word windows, not all 14 fragments
    again, _ = ask_retrieve(capsys, book, "who killed the captain", *opts)
    assert again == first and model.n_texts == once  # nothing embedded again
    ask_retrieve(capsys, book, "filler3 words", *opts)  # another question embeds its own new candidates only
    grown = model.n_texts
    assert grown > once
    ask_retrieve(capsys, book, "filler3 words", *opts)
    assert model.n_texts == grown
    # the whole-file path gives the same ranking when every fragment is a candidate
    full, _ = ask_retrieve(capsys, book, "who killed the captain", "--no-cache", "--dense-candidates", "0")
    every, _ = ask_retrieve(capsys, book, "who killed the captain", "--no-cache", "--dense-candidates", "14")
    assert [h["position"] for h in every] == [h["position"] for h in full]
    assert [h["score"] for h in every] == pytest.approx([h["score"] for h in full], abs=1e-6)


@pytest.mark.parametrize(
    "damage",
    [b"", b"not a vector file" * 20, "truncated"],
    ids=["empty-failed-first-write", "junk", "truncated"],
)
def test_an_unreadable_vector_cache_is_rebuilt_with_one_logged_line(model, book, tmp_path, capsys, damage):
    cache = tmp_path / "cache"
    first, _ = ask_retrieve(capsys, book, "who killed the captain", "--cache-dir", str(cache))
    [entry] = cache.iterdir()
    entry.write_bytes(entry.read_bytes()[:1500] if damage == "truncated" else damage)
    again, err = ask_retrieve(capsys, book, "who killed the captain", "--cache-dir", str(cache))
    assert again == first and "ignoring the cache file" not in err
    assert (
        err.count("\n") == 1 and err.startswith("fragrel: warning: rebuilding the vector cache") and entry.name in err
    )
    embedded = model.n_texts
    third, err = ask_retrieve(capsys, book, "who killed the captain", "--cache-dir", str(cache))
    assert third == first and model.n_texts == embedded and "warning" not in err  # the rebuilt file is read
    code = main(["retrieve", str(book), "q", "--dense-candidates", "-1"])
    assert code == 2 and "--dense-candidates" in capsys.readouterr().err


def test_another_sqlite_database_at_the_vector_cache_path_is_reported_and_left_alone(model, book, tmp_path, capsys):
    cache = tmp_path / "cache"
    first, _ = ask_retrieve(capsys, book, "who killed the captain", "--cache-dir", str(cache))
    [entry] = cache.iterdir()
    entry.unlink()
    conn = sqlite3.connect(entry)
    conn.execute("CREATE TABLE mine (x)")
    conn.commit()
    conn.close()
    again, err = ask_retrieve(capsys, book, "who killed the captain", "--cache-dir", str(cache))
    assert again == first and "ignoring the cache file" in err and "not a FragRel vector cache" in err
    assert sqlite3.connect(entry).execute("SELECT name FROM sqlite_master").fetchall() == [("mine",)]


class OtherModel(CountingEmbedder):
    """The same model id (the same URL and name), another model behind it."""

    def __init__(self, dim: int, seed: int = 0) -> None:
        super().__init__()
        self.dim, self.seed = dim, seed

    def embed_documents(self, texts):
        self.n_texts += sum(t != IDENTITY_PROBE for t in texts)
        rng = np.random.default_rng([self.seed, *(sum(map(ord, t)) for t in texts)])
        vectors = rng.standard_normal((len(texts), self.dim))
        return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("dim", [64, 256], ids=["other-dimension", "same-dimension"])
def test_the_vector_cache_records_its_embedder_and_is_rebuilt_for_another(book, tmp_path, capsys, monkeypatch, dim):
    """A served model replaced behind the same name: its vectors are never mixed with the cached ones."""
    cache = tmp_path / "cache"
    first = CountingEmbedder()
    monkeypatch.setattr(local, "default_embedder", lambda: first)
    monkeypatch.setattr(local, "default_embedder_id", lambda: first.model_id)
    ask_retrieve(capsys, book, "who killed the captain", "--cache-dir", str(cache), "--dense-candidates", "3")
    [entry] = cache.iterdir()
    with sqlite3.connect(entry) as conn:
        recorded = json.loads(dict(conn.execute("SELECT key, value FROM header"))["built_by"])["embedder"]
    assert recorded["id"] == "counting-test-model" and recorded["dim"] == 256 and len(recorded["fingerprint"]) == 32
    other = OtherModel(dim, seed=1)
    monkeypatch.setattr(local, "default_embedder", lambda: other)
    hits, err = ask_retrieve(
        capsys, book, "who killed the captain", "--cache-dir", str(cache), "--dense-candidates", "3"
    )
    assert err.count("\n") == 1 and "rebuilding the vector cache" in err
    assert ("256-dimensional" if dim == 64 else "fingerprint") in err
    assert other.n_texts > 0  # its own vectors, none of the first model's
    with sqlite3.connect(entry) as conn:
        dims = {d for (d,) in conn.execute("SELECT dim FROM vectors")}
        recorded = json.loads(dict(conn.execute("SELECT key, value FROM header"))["built_by"])["embedder"]
    assert dims == {dim} and recorded["dim"] == dim
    full, _ = ask_retrieve(capsys, book, "who killed the captain", "--no-cache", "--dense-candidates", "3")
    assert hits == full  # exactly what a run without a cache gives


def test_xdg_cache_home_and_no_cache(model, book, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    retrieve(capsys, book)
    assert len(list((tmp_path / "xdg" / "fragrel").iterdir())) == 1
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg2"))
    embedded = model.n_texts
    retrieve(capsys, book, "--no-cache")
    assert model.n_texts == 2 * embedded and not (tmp_path / "xdg2").exists()
    before = model.n_texts
    retrieve(capsys, book, "--scorer", "bm25")  # nothing to embed, nothing cached
    assert model.n_texts == before and not (tmp_path / "xdg2").exists()


def test_unreadable_cache_entry_is_reported_and_left_alone(model, book, tmp_path, capsys):
    cache = tmp_path / "cache"
    first, _ = retrieve(capsys, book, "--cache-dir", str(cache), "--dense-candidates", "0")
    [entry] = cache.iterdir()
    entry.write_bytes(b"not an index")
    again, err = retrieve(capsys, book, "--cache-dir", str(cache), "--dense-candidates", "0")
    assert again == first
    assert "ignoring the cache file" in err and entry.name in err and "not a FragRel index file" in err
    assert entry.read_bytes() == b"not an index"


def test_preset_sets_alpha_w_rel_and_options_override_it(model, book, tmp_path, capsys):
    hits, _ = retrieve(capsys, book, "--no-cache", "--preset", "haystack")
    for h in hits:
        assert h["score"] == pytest.approx(h["independent_score"] + 0.1 * h["environment_score"])
    hits, _ = retrieve(capsys, book, "--no-cache", "--preset", "haystack", "--alpha", "0.7")
    for h in hits:
        assert h["score"] == pytest.approx(h["independent_score"] + 0.7 * h["environment_score"])
    with pytest.raises(SystemExit):
        main(["retrieve", str(book), "q", "--preset", "nonsense"])
    assert "invalid choice: 'nonsense'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "damage", ["[" * 100_000 + "]" * 100_000, '{"a": ' * 300 + "1" + "}" * 300], ids=["deep", "nested"]
)
def test_a_damaged_cache_file_is_rebuilt_with_a_warning(model, book, tmp_path, capsys, caplog, damage):
    cache = tmp_path / "cache"
    first, _ = retrieve(capsys, book, "--cache-dir", str(cache), "--dense-candidates", "0")
    [entry] = cache.iterdir()
    conn = sqlite3.connect(entry)
    with conn:
        conn.execute("UPDATE header SET value = ? WHERE key = 'settings'", (damage,))
    conn.close()
    embedded = model.n_texts
    with caplog.at_level(logging.WARNING, logger="fragrel_integrations.core.file_index"):
        again, _ = retrieve(capsys, book, "--cache-dir", str(cache), "--dense-candidates", "0")
    assert again == first and model.n_texts > embedded  # embedded again
    assert "rebuilding the cache file" in caplog.text and entry.name in caplog.text and "nested" in caplog.text
    embedded = model.n_texts
    third, _ = retrieve(
        capsys, book, "--cache-dir", str(cache), "--dense-candidates", "0"
    )  # the rebuilt file is read: no crash, no embedding
    assert third == first and model.n_texts == embedded and list(cache.iterdir()) == [entry]


def test_the_cache_key_holds_the_served_embedders_window(book, tmp_path, capsys):
    pytest.importorskip("openai")
    from _llm_fixtures import FakeOpenAIServer

    cache = tmp_path / "cache"
    with FakeOpenAIServer() as server:
        argv = ["--cache-dir", str(cache), "--embed-model", "m", "--embed-base-url", server.base_url]
        argv += ["--dense-candidates", "0"]  # the whole book embedded and cached as one index
        texts = lambda: sum(len(r["input"]) for r in server.requests)  # noqa: E731
        retrieve(capsys, book, *argv, "--embed-window-tokens", "128")
        wide = texts()
        retrieve(capsys, book, *argv, "--embed-window-tokens", "32")  # smaller windows: embedded again
        narrow = texts() - wide
        retrieve(capsys, book, *argv, "--embed-window-tokens", "32")
        again = texts() - wide - narrow
    assert narrow > wide and again == 2  # the question and the identity probe; the book comes from the cache
    assert len(list(cache.iterdir())) == 2


def test_cache_files_keep_their_names_and_keys_so_files_cached_before_are_reused(model, book, tmp_path, capsys):
    """The key is a SHA-256 of these fields (the file's bytes, the model, the format, the cache layout, the
    splitting and the embedder's window): a cache written by an earlier version is read, not rebuilt."""
    cache = tmp_path / "cache"
    fields = {
        "file_sha256": hashlib.sha256(book.read_bytes()).hexdigest(),
        "model": "counting-test-model",
        "format": VERSION,
        "layout": 2,
        "fragment_words": 100,
        "window_words": "auto",
        "embed_window_tokens": 52,
    }
    key = hashlib.sha256(json.dumps(fields, sort_keys=True).encode("utf-8")).hexdigest()
    retrieve(capsys, book, "--cache-dir", str(cache), "--dense-candidates", "0")
    retrieve(capsys, book, "--cache-dir", str(cache))  # the staged scorer's vectors
    assert sorted(p.name for p in cache.iterdir()) == [f"book-{key[:32]}.fragrel", f"book-{key[:32]}.vectors"]
    with sqlite3.connect(cache / f"book-{key[:32]}.fragrel") as conn:
        metadata = json.loads(dict(conn.execute("SELECT key, value FROM header"))["metadata"])
    assert metadata == {"cache_key": key, **fields, "source": "book.txt"}
    embedded = model.n_texts
    retrieve(capsys, book, "--cache-dir", str(cache), "--dense-candidates", "0")
    retrieve(capsys, book, "--cache-dir", str(cache))
    assert model.n_texts == embedded
