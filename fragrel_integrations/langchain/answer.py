"""Grounded answers as a LangChain ``Runnable``: question in,
:class:`~fragrel_integrations.core.grounding.GroundedAnswer` out (the answer the retrieved text supports, with
quoted evidence; or "not stated" and the evidence).

All logic is :func:`~fragrel_integrations.core.grounding.grounded_answer`; this module turns the retriever's
``Document`` objects into fragments (the position metadata :func:`add_positions` writes, ``fragrel_doc_id`` /
``fragrel_position``; a Document without them is cited by its rank).

>>> from langchain_core.documents import Document
>>> from langchain_core.runnables import RunnableLambda
>>> from fragrel_integrations.testing import ScriptedChatModel
>>> docs = [Document("The parrot was called Poll.", metadata={"doc_id": "crusoe", "position": 7})]
>>> chain = grounded_answer_runnable(RunnableLambda(lambda q: docs), ScriptedChatModel(["Poll"]))
>>> result = chain.invoke("What was the parrot called?")
>>> result.text, result.evidence[0].citation()
('Poll', 'crusoe, fragment 7, sentence 1')
"""

from __future__ import annotations

from functools import partial
from typing import Any

from langchain_core.documents import Document
from langchain_core.retrievers import RetrieverLike
from langchain_core.runnables import Runnable, RunnableLambda

from ..adapters.answer_step import AnswerStep, cited_fragments
from ..adapters.wrapper_settings import DEFAULT_DOC_ID_KEY, DEFAULT_POSITION_KEY
from ..core.fragments import Fragment
from ..core.grounding import GroundedAnswer
from ._documents import check_documents

__all__ = ["documents_to_fragments", "grounded_answer_runnable"]


def documents_to_fragments(
    documents: list[Document], *, doc_id_key: str = DEFAULT_DOC_ID_KEY, position_key: str = DEFAULT_POSITION_KEY
) -> list[Fragment]:
    """Core fragments for retrieved Documents, in their order (the position keys from the metadata; a
    Document without them gets doc_id ``"retrieved"`` and its rank as position)."""
    docs = check_documents(documents, "the retriever's result")
    return cited_fragments(((d.page_content, d.metadata) for d in docs), doc_id_key, position_key)


def grounded_answer_runnable(
    retriever: RetrieverLike,
    model: Any = None,
    *,
    embedder: Any = None,
    doc_id_key: str = DEFAULT_DOC_ID_KEY,
    position_key: str = DEFAULT_POSITION_KEY,
    **options: Any,
) -> Runnable[str, GroundedAnswer]:
    """A Runnable that retrieves with ``retriever`` and answers with ``model`` (a LangChain chat model, a core
    model such as ``LlamaCppChatModel``; None: the embedded SmolLM2), keeping only a supported answer.
    ``embedder`` (e.g. ``MiniLMEmbeddings()``) ranks the evidence sentences with the hybrid score (None: BM25);
    ``options`` go to :func:`~fragrel_integrations.core.grounding.grounded_answer` (``max_sentences``, ``max_tokens``,
    ``constrain``, ``options``; checked here: a misspelt one is a TypeError now, not at the first question).
    ``.invoke(question).format()`` is the text ``fragrel ask`` prints."""
    step = AnswerStep.of(model, embedder, options, doc_id_key=doc_id_key, position_key=position_key)
    fragments = partial(documents_to_fragments, doc_id_key=doc_id_key, position_key=position_key)

    def answer(question: str) -> GroundedAnswer:
        return step.answer(question, fragments(retriever.invoke(question)))

    async def aanswer(question: str) -> GroundedAnswer:
        return await step.aanswer(question, fragments(await retriever.ainvoke(question)))

    return RunnableLambda(answer, afunc=aanswer, name="GroundedAnswer")
