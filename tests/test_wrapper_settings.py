"""The settings kit: every FragRel wrapper (LangChain retriever, LlamaIndex retriever and postprocessor) takes the
same settings, fills the same defaults and rejects the same bad setting with the same words (the kit's)."""

import math
import re

import pytest
from langchain_core.documents import Document
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from fragrel_integrations import FragmentStore
from fragrel_integrations.core import conventions as kit
from fragrel_integrations.core.relations import ContextRelation
from fragrel_integrations.langchain import FragRelRetriever, add_positions
from fragrel_integrations.llama_index import FragRelPostprocessor, tag_positions
from fragrel_integrations.llama_index import FragRelRetriever as LlamaFragRelRetriever

TEXTS = [f"turn {i} about {'boats' if i % 5 == 0 else 'goats'}" for i in range(12)]


class ListRetriever(BaseRetriever):
    def __init__(self, nodes):
        self.nodes = nodes
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle):
        return list(self.nodes)


def _docs():
    return add_positions([Document(t, metadata={"source": "chat"}) for t in TEXTS])


def _nodes():
    nodes = tag_positions([TextNode(text=t, id_=f"n{i}", metadata={"doc_id": "chat"}) for i, t in enumerate(TEXTS)])
    return [NodeWithScore(node=n, score=1.0 / (i + 1)) for i, n in enumerate(nodes)]


def _build(framework: str, **settings):
    if framework == "langchain":
        return FragRelRetriever(base_retriever=lambda q: _docs(), **settings)
    if framework == "llama_index":
        return LlamaFragRelRetriever(ListRetriever(_nodes()), **settings)
    return FragRelPostprocessor(**settings)


FRAMEWORKS = ("langchain", "llama_index", "postprocessor")
BAD_SETTINGS = [
    {"alpha": -1},
    {"alpha": math.nan},
    {"alpha": math.inf},
    {"top_m": -1},
    {"top_m": 2.5},
    {"preset": "chat"},
    {"order": "time"},
    {"outside": "zero"},
    {"on_missing_position": "skip"},
    {"expand": -1},
    {"expand": 2},  # without a store
    {"doc_id_key": ""},
    {"position_key": 3},
    {"doc_id_key": "k", "position_key": "k"},
    {"relation": 0.3},
    {"store": "x.sqlite"},
    {"embedder": object()},
]


def _kit_error(settings) -> BaseException:
    with pytest.raises((ValueError, TypeError)) as info:
        kit.WrapperSettings.resolve(**settings)
    return info.value


def _setting_id(settings: dict) -> str:
    """A stable test id (an object's repr holds its address, which differs between runs)."""
    return ",".join(f"{k}={type(v).__name__ if type(v) is object else repr(v)}" for k, v in settings.items())


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("settings", BAD_SETTINGS, ids=_setting_id)
def test_a_bad_setting_fails_with_the_kits_words_in_every_wrapper(framework, settings):
    expected = _kit_error(settings)
    with pytest.raises(type(expected), match=re.escape(str(expected))):
        _build(framework, **settings)


@pytest.mark.parametrize("framework", ("langchain", "llama_index"))
def test_pool_size_is_checked_by_the_kit(framework):
    with pytest.raises(ValueError, match=re.escape("pool_size must be a positive int or None, got 0")):
        _build(framework, pool_size=0)


def test_old_spellings_are_accepted_and_links_needs_nodes():
    assert kit.check_on_missing_position("error") == "raise"
    assert FragRelRetriever(base_retriever=lambda q: [], on_missing_position="error").on_missing_position == "raise"
    assert FragRelPostprocessor(on_missing_position="error")._reranker().on_missing_position == "raise"
    with pytest.raises(ValueError, match="LangChain Documents do not have"):
        FragRelRetriever(base_retriever=lambda q: [], on_missing_position="links")
    assert LlamaFragRelRetriever(ListRetriever([]), on_missing_position="links")._reranker.on_missing_position == (
        "links"
    )


@pytest.mark.parametrize("preset", ["general", "dialogue", "haystack"])
def test_every_wrapper_resolves_the_same_defaults(preset, tmp_path):
    store = FragmentStore(str(tmp_path / "s.sqlite"))
    expected = kit.WrapperSettings.resolve(preset=preset, store=store)
    assert expected.expand == 1  # a store without expand: its neighbours within 1 position join the pool
    lc = FragRelRetriever(base_retriever=lambda q: [], preset=preset, store=store)._settings
    li = LlamaFragRelRetriever(ListRetriever([]), preset=preset, store=store)._reranker.settings
    pp = FragRelPostprocessor(preset=preset, store=store)._reranker().settings
    for got in (lc, li, pp):
        assert (got.alpha, got.top_m, got.order, got.expand, got.relation) == (
            expected.alpha,
            expected.top_m,
            expected.order,
            expected.expand,
            expected.relation,
        )
    store.close()


def test_explicit_settings_win_over_the_preset():
    got = kit.WrapperSettings.resolve(
        preset="general", alpha=0.0, top_m=0, order="position", relation=ContextRelation(0.5)
    )
    assert (got.alpha, got.top_m, got.order, got.relation.w_rel) == (
        0.0,
        0,
        "position",
        0.5,
    )  # 0: every candidate lends support
