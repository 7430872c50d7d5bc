"""The settings kit: every FragRel wrapper (LangChain retriever, LlamaIndex retriever and postprocessor) takes the
same settings, fills the same defaults and rejects the same bad setting with the same words (the kit's)."""

import inspect
import math
import re

import pytest
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.retrievers import BaseRetriever as LangChainBase
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode

from fragrel_integrations import FragmentStore
from fragrel_integrations import adapters as kit
from fragrel_integrations.core.presets import DEFAULT_PRESET
from fragrel_integrations.core.relations import ContextRelation
from fragrel_integrations.langchain import FragRelCompressor, FragRelRetriever, add_positions
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
    if framework == "compressor":
        return FragRelCompressor(**settings)
    return FragRelPostprocessor(**settings)


FRAMEWORKS = ("langchain", "llama_index", "postprocessor", "compressor")
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
    assert FragRelPostprocessor(on_missing_position="error").settings.on_missing_position == "raise"
    with pytest.raises(ValueError, match="LangChain Documents do not have"):
        FragRelRetriever(base_retriever=lambda q: [], on_missing_position="links")
    assert LlamaFragRelRetriever(ListRetriever([]), on_missing_position="links").settings.on_missing_position == (
        "links"
    )


@pytest.mark.parametrize("preset", ["general", "dialogue", "haystack"])
def test_every_wrapper_resolves_the_same_defaults(preset, tmp_path):
    store = FragmentStore(str(tmp_path / "s.sqlite"))
    expected = kit.WrapperSettings.resolve(preset=preset, store=store)
    assert expected.expand == 1  # a store without expand: its neighbours within 1 position join the pool
    lc = FragRelRetriever(base_retriever=lambda q: [], preset=preset, store=store).settings
    li = LlamaFragRelRetriever(ListRetriever([]), preset=preset, store=store).settings
    pp = FragRelPostprocessor(preset=preset, store=store).settings
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


# ------------------------------------------------------------------------------ every setting, every wrapper

#: Bad values for every setting of the three wrappers. A setting added to a wrapper without a row here fails
#: ``test_every_setting_has_bad_values``.
BAD_VALUES: dict[str, list] = {
    "k": [0, -1, 2.5, True, "5"],
    "preset": ["chat", 3],
    "alpha": [-1, -0.5, math.nan, math.inf, "0.5", True],
    "top_m": [-1, 2.5, True, "3"],
    "lexical": [-0.1, 1.5, math.nan, True, "0.3"],
    "relation": [0.3, "context"],
    "embedder": [object(), "minilm"],
    "score_embedder": [object(), 3],
    "pool_size": [0, -5, 2.5, True],
    "store": ["x.sqlite", 3],
    "expand": [-1, 1.5, True, 2],  # 2: without a store
    "order": ["time", 1],
    "outside": ["zero", None],
    "doc_id_key": ["", 3, None, kit.DEFAULT_POSITION_KEY],  # the same as position_key
    "position_key": ["", 3, kit.DEFAULT_DOC_ID_KEY],
    "score_key": ["", 3],
    "on_missing_position": ["skip", None, 3],
}

#: What each wrapper calls the number of results (the kit's words name it).
K_NAMES = {"langchain": "k", "llama_index": "similarity_top_k", "postprocessor": "top_n", "compressor": "k"}
FRAMEWORK_SETTINGS = {  # the settings each wrapper adds to its framework's base class
    "langchain": set(FragRelRetriever.model_fields) - set(LangChainBase.model_fields) - {"base_retriever"},
    "llama_index": set(inspect.signature(LlamaFragRelRetriever.__init__).parameters)
    - {"self", "retriever", "callback_manager", "verbose"},
    "postprocessor": set(FragRelPostprocessor.model_fields) - set(BaseNodePostprocessor.model_fields),
    "compressor": set(FragRelCompressor.model_fields) - set(BaseDocumentCompressor.model_fields),
}
CASES = [
    (framework, setting, value)
    for framework, settings in FRAMEWORK_SETTINGS.items()
    for setting in sorted(settings)
    for value in BAD_VALUES[{"similarity_top_k": "k", "top_n": "k"}.get(setting, setting)]
]


def _kit_words(framework: str, setting: str, value: object) -> BaseException:
    """The error the kit's own check gives for one bad value (the words every wrapper must show)."""
    name = {"similarity_top_k": "k", "top_n": "k"}.get(setting, setting)
    with pytest.raises((ValueError, TypeError)) as info:
        if name == "k":
            kit.check_k(value, setting)
        elif name in ("embedder", "score_embedder", "expand") or value in (
            kit.DEFAULT_POSITION_KEY,
            kit.DEFAULT_DOC_ID_KEY,
        ):
            kit.WrapperSettings.resolve(**{name: value})
        else:
            kit.field_checks([name], links=framework not in ("langchain", "compressor"))[name](value)
    return info.value


def test_every_setting_has_bad_values():
    for framework, settings in FRAMEWORK_SETTINGS.items():
        unknown = {s for s in settings if {"similarity_top_k": "k", "top_n": "k"}.get(s, s) not in BAD_VALUES}
        assert not unknown, f"{framework}: no bad values for {sorted(unknown)}"
    assert set(kit.SETTING_NAMES) <= set(BAD_VALUES)


@pytest.mark.parametrize(("framework", "setting", "value"), CASES, ids=lambda v: _setting_id({"": v})[1:])
def test_every_bad_setting_fails_in_every_wrapper_with_the_kits_words(framework, setting, value):
    expected = _kit_words(framework, setting, value)
    # a wrong value is a ValueError (pydantic's ValidationError is one); a wrong kind of object (a relation, a
    # store, an embedder that is none) a TypeError: in every wrapper the same class and the kit's words
    with pytest.raises(type(expected)) as info:
        _build(framework, **{setting: value})
    assert str(expected) in str(info.value)
    if isinstance(expected, ValueError):
        assert "Input should be" not in str(info.value)  # no pydantic constraint answers first


def test_the_same_candidates_give_the_same_hits_through_all_three():
    """Default settings, one pool with the base's scores and one without: the LangChain retriever, the LlamaIndex
    retriever and the postprocessor return the same fragments in the same order with bit-identical scores."""
    for scored in (True, False):
        docs = _docs()
        nodes = _nodes()
        if scored:
            docs = [
                Document(d.page_content, metadata={**d.metadata, "score": n.score})
                for d, n in zip(docs, nodes, strict=True)
            ]
        else:
            nodes = [NodeWithScore(node=n.node) for n in nodes]
        query = "which turns are about boats"
        lc = FragRelRetriever(base_retriever=lambda q, docs=docs: docs).invoke(query)
        li = LlamaFragRelRetriever(ListRetriever(nodes)).retrieve(query)
        pp = FragRelPostprocessor().postprocess_nodes(nodes, query_str=query)
        want = [
            (d.page_content, d.metadata["fragrel_doc_id"], d.metadata["fragrel_position"], *_scores(d.metadata))
            for d in lc
        ]
        assert len(want) == 5
        for got in (li, pp):
            assert [
                (
                    n.node.get_content(),
                    n.node.metadata["fragrel_doc_id"],
                    n.node.metadata["fragrel_position"],
                    *_scores(n.node.metadata),
                )
                for n in got
            ] == want
            assert [repr(n.score) for n in got] == [repr(d.metadata["relevance_score"]) for d in lc]


def test_identical_candidates_with_visible_metadata_give_identical_results_in_all_three():
    """Candidates whose metadata LlamaIndex shows as a "key: value" header (as every node's ``get_content()`` has by
    default): the preset detector and the scores see the node content alone, the text a LangChain Document holds,
    so the three entry points choose the same preset and return the same top 5 with the same scores."""
    texts = [
        f"turn {i}: the {w} crossed the bay before noon while the harbour master counted the crates"
        for i, w in enumerate(["ferry", "barge", "yacht", "ferry", "tug", "ferry", "dinghy", "barge", "ferry", "sloop"])
    ]
    shown = {"speaker": "Ann", "session_date": "8 May 2023"}  # not excluded: part of the node's header
    scores = [0.9 - 0.05 * i for i in range(len(texts))]
    docs = add_positions(
        [Document(t, metadata={**shown, "source": "chat", "score": s}) for t, s in zip(texts, scores, strict=True)]
    )
    nodes = tag_positions(
        [TextNode(text=t, id_=f"n{i}", metadata=dict(shown)) for i, t in enumerate(texts)], default_doc_id="chat"
    )
    assert nodes[0].get_content(MetadataMode.EMBED).startswith("speaker: Ann")  # the header LlamaIndex embeds
    pool = [NodeWithScore(node=n, score=s) for n, s in zip(nodes, scores, strict=True)]
    query = "when did the ferry cross the bay"
    lc = FragRelRetriever(base_retriever=lambda q: docs).invoke(query)
    li = LlamaFragRelRetriever(ListRetriever(pool)).retrieve(query)
    pp = FragRelPostprocessor().postprocess_nodes(pool, query_str=query)
    want = [(d.page_content, *_scores(d.metadata)) for d in lc]
    assert len(want) == 5
    for got in (li, pp):
        assert [(n.node.get_content(metadata_mode=MetadataMode.NONE), *_scores(n.node.metadata)) for n in got] == want


def _scores(metadata: dict) -> tuple[str, ...]:
    return tuple(repr(metadata[key]) for key in kit.SCORE_KEYS)


def test_kit_rerank_items_fills_missing_locations_by_the_policy():
    from fragrel_integrations.adapters.pools import rerank_items
    from fragrel_integrations.core.fragments import Fragment

    items = [("a", ("d", 0)), ("b", None), ("c", ("d", 1))]
    common = dict(
        locate=lambda item: item[1],
        fragment=lambda item, key: Fragment(item[0], *key),
        isolated=lambda i: (f"alone:{i}", 0),
        error=lambda missing: ValueError(f"missing {missing}"),
        scores=[3.0, 2.0, 1.0],
        k=None,
        ranks_by_words=False,
        neighbour=lambda fragment: ("neighbour", None),
    )
    isolate = kit.WrapperSettings.resolve(preset="general", on_missing_position="isolate")
    ranked = rerank_items(isolate, "q", items, **common)
    assert {hit.fragment.text: (hit.fragment.doc_id, hit.fragment.position) for _, hit in ranked} == {
        "a": ("d", 0),
        "b": ("alone:1", 0),
        "c": ("d", 1),
    }
    assert all(item[0] == hit.fragment.text for item, hit in ranked)  # each hit with its own item
    with pytest.raises(ValueError, match=r"missing \[1\]"):
        rerank_items(kit.WrapperSettings.resolve(preset="general"), "q", items, **common)
    with pytest.raises(ValueError, match="PREVIOUS/NEXT"):
        rerank_items(kit.WrapperSettings.resolve(preset="general", on_missing_position="links"), "q", items, **common)


def test_langchain_k_none_is_refused_in_the_kits_words():
    """``k`` is an int field in LangChain: None gets a message naming the setting, not pydantic's type error."""
    from langchain_core.runnables import RunnableLambda

    base = RunnableLambda(lambda q: [])
    for make in (lambda: FragRelRetriever(base_retriever=base, k=None), lambda: FragRelCompressor(k=None)):
        with pytest.raises(ValueError, match="k must be a positive int") as info:
            make()
        assert "Input should be" not in str(info.value)


def test_a_reassigned_top_n_is_checked_under_its_own_name():
    post = FragRelPostprocessor(top_n=5)
    post.top_n = 0  # LlamaIndex fields can be reassigned without validation
    nodes = [NodeWithScore(node=TextNode(text=f"t {i}", id_=str(i)), score=1.0 / (i + 1)) for i in range(3)]
    with pytest.raises(ValueError, match="top_n must be a positive int"):
        post.postprocess_nodes(nodes, query_str="t")


@pytest.mark.parametrize("framework", ["langchain", "compressor", "postprocessor"])
def test_a_reassigned_setting_takes_effect_as_if_given_at_construction(framework):
    """A setting reassigned on a built re-ranker is used by the next query (it was silently ignored by the LangChain
    ones); a reassigned preset fills the settings it was not given from itself, as at construction."""

    def scores(wrapper):
        if framework == "langchain":
            return [d.metadata["relevance_score"] for d in wrapper.invoke("boats")]
        if framework == "compressor":
            return [d.metadata["relevance_score"] for d in wrapper.compress_documents(_docs(), "boats")]
        return [n.score for n in wrapper.postprocess_nodes(_nodes(), query_str="boats")]

    k = {"top_n": 3} if framework == "postprocessor" else {"k": 3}
    wrapper = _build(framework, preset="general", **k)
    before = scores(wrapper)
    wrapper.alpha = 0.0
    assert scores(wrapper) == scores(_build(framework, preset="general", alpha=0.0, **k)) != before
    wrapper.preset = "dialogue"
    assert wrapper.settings.alpha == 0.0  # given: kept
    assert wrapper.settings.order == "position" == _build(framework, preset="dialogue", **k).settings.order
    assert scores(wrapper) == scores(_build(framework, preset="dialogue", alpha=0.0, **k))


@pytest.mark.parametrize("framework", ["langchain", "compressor"])
def test_a_bad_reassigned_setting_is_refused_when_assigned(framework):
    wrapper = _build(framework, k=3)
    with pytest.raises(ValueError, match="alpha must be a finite number"):
        wrapper.alpha = -1
    with pytest.raises(ValueError, match="preset must be"):
        wrapper.preset = "chat"
    assert wrapper.alpha is None and wrapper.settings.preset == DEFAULT_PRESET  # unchanged


@pytest.mark.parametrize("framework", ["langchain", "compressor"])
def test_a_reassignment_refused_by_a_cross_setting_check_leaves_the_wrapper_as_it_was(framework):
    wrapper = _build(framework, k=3)
    before = (wrapper.expand, wrapper.position_key, wrapper.settings, set(wrapper.model_fields_set))
    with pytest.raises(ValueError, match="store"):
        wrapper.expand = 2  # expand > 0 needs a store
    with pytest.raises(ValueError):
        wrapper.position_key = wrapper.doc_id_key
    assert (wrapper.expand, wrapper.position_key, wrapper.settings, set(wrapper.model_fields_set)) == before
    wrapper.alpha = 0.0  # later reassignments still work
    assert wrapper.settings.alpha == 0.0
