"""The surprise tree as a native LlamaIndex retriever (all tree logic lives in the core SurpriseTree).

>>> from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel
>>> llm = ScriptedChatModel(lambda m: "(Summary): Pets make noises.\\n(Surprise): None")
>>> retriever = SurpriseTreeRetriever.from_texts(
...     ["Cats purr softly. Dogs bark loudly."], chat_model=llm, embedder=HashingEmbedder(dim=64),
...     show_progress=False, similarity_top_k=2)
>>> nodes = retriever.retrieve("Do cats purr softly?")
>>> nodes[0].node.metadata["tree_field"], len(nodes)
('text', 2)
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Unpack

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.extractors import BaseExtractor
from llama_index.core.schema import BaseNode, Document, MetadataMode, NodeWithScore, QueryBundle, TextNode
from pydantic import Field, PrivateAttr

from .._validation import check_type
from ..adapters import tree_search as kit
from ..adapters.wrapper_settings import resolve_k
from ..core.tree import BuildReport, ExtractiveSummariser, Summariser, SurpriseTree, TreeHit
from ._convert import check_all

__all__ = ["SurpriseExtractor", "SurpriseTreeRetriever", "hit_to_node"]

_RETRIEVER_KWARGS = ("similarity_top_k", "k", *kit.SEARCH_OPTIONS, "callback_manager", "verbose")


def hit_to_node(hit: TreeHit) -> NodeWithScore:
    """A scored ``TextNode`` for one retrieved tree text (metadata as in the LangChain adapter:
    :func:`~fragrel_integrations.adapters.tree_search.hit_metadata`; the tree keys are hidden from the embed and LLM
    views)."""
    text_node = TextNode(
        id_=kit.hit_id(hit),
        text=hit.text,
        metadata=kit.hit_metadata(hit),
        excluded_embed_metadata_keys=list(kit.HIT_KEYS),
        excluded_llm_metadata_keys=list(kit.HIT_KEYS),
    )
    return NodeWithScore(node=text_node, score=hit.score)


def _from_documents(documents: Sequence[Document]) -> dict[str, Any]:
    documents = check_all(documents, "documents", Document, "a llama_index Document")
    return kit.tree_inputs(
        [d.text for d in documents], [d.doc_id for d in documents], [dict(d.metadata) for d in documents]
    )


class SurpriseTreeRetriever(BaseRetriever):
    """Retrieve from a :class:`~fragrel_integrations.core.tree.SurpriseTree` (RAPTOR tree with surprise facts).

    Args:
        tree: a built core tree (or use :meth:`from_texts` / :meth:`from_documents` and their async forms).
        similarity_top_k: how many texts to return (default 4); ``k`` is an alias.
        budget_tokens, mode, fields, width, relation, alpha: the search settings, as in LangChain
            (:class:`~fragrel_integrations.adapters.tree_search.TreeSearch`: meanings in ``SEARCH_DOCS``, defaults those
            of :meth:`SurpriseTree.retrieve <fragrel_integrations.core.tree.SurpriseTree.retrieve>`); another
            keyword is a TypeError.

    ``aretrieve`` runs the search in a worker thread, so it is safe inside a running event loop.
    """

    def __init__(
        self,
        tree: SurpriseTree,
        similarity_top_k: int | None = None,
        *,
        k: int | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
        **search: Unpack[kit.TreeSearch],
    ) -> None:
        check_type(tree, SurpriseTree, "tree must be a SurpriseTree (or use SurpriseTreeRetriever.from_texts)")
        self.tree = tree
        self.similarity_top_k = resolve_k(similarity_top_k, k, 4)
        for name, value in kit.search_settings(search).items():
            setattr(self, name, value)
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @classmethod
    def from_texts(cls, texts: Sequence[str], **kwargs: Any) -> SurpriseTreeRetriever:
        """Build a tree over ``texts`` and wrap it. Keywords: ``chat_model`` (a LlamaIndex LLM; None = no model:
        extractive summaries and surprise notes), ``embedder`` (a LlamaIndex embedding; None = the embedded
        MiniLM), ``doc_ids``, ``metadatas``, retriever arguments and :class:`SurpriseTree` keywords
        (``summariser="extractive"`` or ``"llm"``, ``chunk_tokens``, ``seed``, ``show_progress``, ...)."""
        tree, own = kit.build_tree(texts, kwargs, _RETRIEVER_KWARGS)
        return cls(tree, **own)

    @classmethod
    async def afrom_texts(cls, texts: Sequence[str], **kwargs: Any) -> SurpriseTreeRetriever:
        """Async :meth:`from_texts` (summary calls via ``ainvoke`` with bounded concurrency)."""
        tree, own = await kit.abuild_tree(texts, kwargs, _RETRIEVER_KWARGS)
        return cls(tree, **own)

    @classmethod
    def from_documents(
        cls, documents: Sequence[Document], *, chat_model: Any = None, **kwargs: Any
    ) -> SurpriseTreeRetriever:
        """:meth:`from_texts` for LlamaIndex Documents (``doc_id`` = the document's id, metadata copied)."""
        return cls.from_texts(chat_model=chat_model, **_from_documents(documents), **kwargs)

    @classmethod
    async def afrom_documents(
        cls, documents: Sequence[Document], *, chat_model: Any = None, **kwargs: Any
    ) -> SurpriseTreeRetriever:
        """Async :meth:`from_documents`."""
        return await cls.afrom_texts(chat_model=chat_model, **_from_documents(documents), **kwargs)

    def insert(self, documents: Sequence[Document]) -> BuildReport:
        """Add Documents to the tree (only the branches they join are re-summarised)."""
        return self.tree.insert(**_from_documents(documents))

    async def ainsert(self, documents: Sequence[Document]) -> BuildReport:
        """Async :meth:`insert`."""
        return await self.tree.ainsert(**_from_documents(documents))

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [hit_to_node(h) for h in kit.search(self.tree, query_bundle.query_str, self.similarity_top_k, self)]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return await asyncio.to_thread(self._retrieve, query_bundle)

    def __repr__(self) -> str:
        return f"SurpriseTreeRetriever({self.tree!r}, similarity_top_k={self.similarity_top_k}, mode={self.mode!r})"


class SurpriseExtractor(BaseExtractor):
    """Per-node summary and surprising facts as node metadata (``tree_summary``, ``tree_surprise``): the leaf
    step of the surprise tree as a LlamaIndex extractor, for ingestion pipelines.

    ``summariser="llm"``: one call per node with the core :class:`~fragrel_integrations.core.tree.Summariser`
    (replies cached by content, failed calls never stop the pipeline, at most ``max_concurrency`` at once);
    ``"extractive"``: no model call (:class:`~fragrel_integrations.core.tree.ExtractiveSummariser`, sentences
    embedded with ``embedder``; None = the embedded MiniLM); None (the default): ``"llm"`` when a ``chat_model``
    is given, else ``"extractive"``, as the tree does. ``report`` accumulates the counts.

    >>> from llama_index.core.schema import TextNode
    >>> from fragrel_integrations.testing import ScriptedChatModel
    >>> extractor = SurpriseExtractor(ScriptedChatModel(lambda m: "(Summary): Cats.\\n(Surprise): They glow."))
    >>> extractor.extract([TextNode(text="Cats purr.")])
    [{'tree_summary': 'Cats.', 'tree_surprise': 'They glow.'}]
    """

    summary_tokens: int = Field(default=300, gt=0, description="Length of each summary, in tokens.")
    surprise_tokens: int = Field(default=150, gt=0, description="Room for the surprising facts, in tokens.")
    summariser: str = Field(default="llm", description="Who writes the metadata: 'llm' or 'extractive'.")
    _summariser: Summariser | ExtractiveSummariser = PrivateAttr()
    _report: BuildReport = PrivateAttr(default_factory=BuildReport)

    def __init__(
        self,
        chat_model: Any = None,
        *,
        summariser: str | None = None,
        embedder: Any = None,
        summary_tokens: int = 300,
        surprise_tokens: int = 150,
        max_concurrency: int = 4,
        show_progress: bool = False,
        **kwargs: Any,
    ) -> None:
        summariser, leaf = kit.leaf_summariser(
            chat_model,
            summariser,
            embedder,
            "SurpriseExtractor",
            summary_tokens=summary_tokens,
            surprise_tokens=surprise_tokens,
            max_concurrency=max_concurrency,
            show_progress=show_progress,
        )
        super().__init__(
            summariser=summariser,
            summary_tokens=summary_tokens,
            surprise_tokens=surprise_tokens,
            num_workers=max_concurrency,
            show_progress=show_progress,
            **kwargs,
        )
        self._summariser = leaf

    @classmethod
    def class_name(cls) -> str:
        return "SurpriseExtractor"

    @property
    def report(self) -> BuildReport:
        """Calls made, cache hits, unparsable replies and failed calls so far."""
        return self._report

    async def aextract(self, nodes: Sequence[BaseNode]) -> list[dict]:
        texts = [node.get_content(metadata_mode=MetadataMode.NONE) for node in nodes]
        results, report = await self._summariser.asummarise(texts)
        self._report.add(report)
        return [{"tree_summary": r.summary, "tree_surprise": r.surprise} for r in results]
