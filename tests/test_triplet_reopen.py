"""Reopening a triplet store: the term index is rebuilt from the stored term embeddings (exact scan or faiss),
a damaged stored vector is a ValueError naming the database, and a store refuses another embedder."""

from __future__ import annotations

import pytest
from _triplet_fixtures import BACKENDS, make_backend

from fragrel_integrations.core.triplets import PostgresBackend, SQLiteBackend, TripletStore
from fragrel_integrations.testing import HashingEmbedder

DIM = 64
SMALL = {"train_at": 60, "min_probe": 2}  # a faiss index on small stores (the default waits for 20,000 terms)


def emb() -> HashingEmbedder:
    return HashingEmbedder(dim=DIM, seed=1)


def reopen(store: TripletStore, **kwargs) -> TripletStore:
    b = store.backend
    other = SQLiteBackend(b.path) if isinstance(b, SQLiteBackend) else PostgresBackend(b.conninfo, schema=b.schema)
    new = TripletStore(other, embedder=emb(), **kwargs)
    new._terms.index_options = dict(SMALL)
    return new


def word(i: int) -> str:
    """A word of its own for each number (the HashingEmbedder ignores digits)."""
    return "".join(chr(97 + int(d)) for d in str(i))


def filled(kind: str, tmp_path, n: int = 150) -> TripletStore:
    store = TripletStore(make_backend(kind, tmp_path), embedder=emb())
    store.write_many([(f"subject {word(i)}", f"relation {i % 7}", f"object {word(i)}") for i in range(n)])
    return store


@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize("fuzzy_index", ["exact", "faiss"])
def test_the_index_is_rebuilt_from_the_stored_embeddings_on_open(kind, fuzzy_index, tmp_path):
    store = filled(kind, tmp_path)
    want = [(r.triplet, [m.term for m in r.matches]) for r in store.read(t1="subject ec again")]
    assert want and want[0][0].t1 == "subject ec"
    again = reopen(store, fuzzy_index=fuzzy_index)
    assert again._terms.index is None  # nothing is read before the first fuzzy lookup
    assert [(r.triplet, [m.term for m in r.matches]) for r in again.read(t1="subject ec again")] == want
    assert len(again._terms.index) == again.term_count()
    assert (again._terms.index.lists > 0) == (fuzzy_index == "faiss")
    store.write(("late subject", "relation 1", "late object"))  # another store object's commit ...
    assert [r.t1 for r in again.read(t3="late object !")] == ["late subject"]  # ... is read by the next lookup
    again.close()
    store.close()


@pytest.mark.parametrize("fuzzy_index", ["exact", "faiss"])
def test_a_damaged_term_vector_is_a_value_error_naming_the_database(fuzzy_index, tmp_path):
    store = filled("sqlite", tmp_path, n=20)
    with store.backend.write() as cur:
        cur.execute("UPDATE terms SET vector = ?", (b"\x00" * 10,))  # 10 bytes: not 64 float32 values
    again = reopen(store)
    again.fuzzy_index = fuzzy_index
    with pytest.raises(ValueError, match=r"terms\.vector of row id \d+ is damaged \(10 bytes, expected 64") as err:
        again.read(t1="subject 1x")
    assert str(store.backend.path) in str(err.value)
    assert again.read(t1="subject b", fuzzy=False)  # exact reads do not need the vectors
    again.close()
    store.close()


# ------------------------------------------------------------------------------------------ embedder identity
def test_a_store_refuses_another_embedder_of_the_same_class_and_dimension(tmp_path):
    path = tmp_path / "facts.db"
    store = TripletStore(path, embedder=emb())
    store.write(("Ana", "likes", "green tea"))
    store.close()
    with pytest.raises(ValueError, match=r"facts\.db.*fingerprint.*open it with the embedder it was built with"):
        TripletStore(path, embedder=HashingEmbedder(dim=DIM, seed=2))  # same class, name and dimension
    windowed = emb()
    windowed.max_input_tokens = 32
    with pytest.raises(ValueError, match="reading None tokens per text, this one reads 32"):
        TripletStore(path, embedder=windowed)
    same = TripletStore(path, embedder=emb())
    assert [r.t3 for r in same.read("Ana", "likes")] == ["green tea"]
    assert [r.t3 for r in same.read("ana", "likes a lot")] == ["green tea"]  # fuzzy: the vectors are comparable
    # a store made before the identity was recorded adopts the embedder of its next write, then keeps it
    with same.backend.write() as cur:
        cur.execute("DELETE FROM meta WHERE name = 'embedder'")
    same.close()
    older = TripletStore(path, embedder=emb())
    older.write(("Bo", "likes", "coffee"))
    older.close()
    with pytest.raises(ValueError, match="fingerprint"):
        TripletStore(path, embedder=HashingEmbedder(dim=DIM, seed=2))
