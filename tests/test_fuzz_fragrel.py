"""Property/fuzz tests of the FragRel entry points: only the documented errors, bounded time, eq. 9-10 kept."""

import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.documents import Document

from fragrel_integrations import ContextRelation, Fragment, FragRelIndex, rerank
from fragrel_integrations.langchain import FragRelRetriever

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
texts = st.text(min_size=0, max_size=60)
positions = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=25),
    st.none(),
    st.booleans(),
)


@SETTINGS
@given(st.lists(st.tuples(texts, st.sampled_from(["a", "b"]), st.integers(-(2**60), 2**60)), max_size=12), texts)
def test_index_retrieves_or_raises_a_documented_error(items, query):
    start = time.perf_counter()
    try:
        frags = [Fragment(t, d, p) for t, d, p in items]
        index = FragRelIndex(frags, scorer="bm25", show_progress=False)
        hits = index.retrieve(query, k=5)
    except (ValueError, TypeError):
        return
    assert time.perf_counter() - start < 5
    assert len(hits) == min(5, len(frags))
    for h in hits:
        assert np.isfinite(h.score) and h.score == pytest.approx(h.independent_score + 0.5 * h.environment_score)


@SETTINGS
@given(
    st.lists(st.tuples(texts, positions, st.one_of(st.none(), st.floats(-1e6, 1e6))), max_size=15),
    texts,
    st.sampled_from(["floor", "ignore"]),
)
def test_langchain_wrapper_on_hostile_metadata(items, query, outside):
    docs = [
        Document(t or "x", metadata={"doc_id": "d", "position": p, **({} if s is None else {"score": s})})
        for t, p, s in items
    ]
    retriever = FragRelRetriever(base_retriever=lambda q: docs, k=3, outside=outside)
    try:
        got = retriever.invoke(query)
    except (ValueError, TypeError):
        return
    assert len(got) <= 3
    assert all(np.isfinite(d.metadata["relevance_score"]) for d in got)


@SETTINGS
@given(st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=30), st.floats(0.01, 0.99), st.floats(0, 3))
def test_floor_environment_lies_between_the_pool_extremes(scores, w, alpha):
    cands = [Fragment(f"t{i}", "d", 3 * i) for i in range(len(scores))]
    hits = rerank("q", cands, relation=ContextRelation(w), alpha=alpha, k=len(cands), scores=scores)
    lo, hi = min(scores), max(scores)
    for h in hits:  # a weighted mean of pool scores and the floor (= the lowest)
        assert lo - 1e-6 <= h.environment_score <= hi + 1e-6
