"""Grounded answers as a LangChain ``Runnable``: question in, :class:`~fragrel_integrations.core.answer.GroundedAnswer`
out (the answer the retrieved text supports, with quoted evidence; or "not stated" and the evidence).

All logic is :func:`~fragrel_integrations.core.answer.grounded_answer`; this module turns the retriever's
``Document`` objects into fragments (``doc_id``/``position`` metadata as :func:`add_positions` writes them; a
Document without them is cited by its rank).

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

from ..core.answer import GroundedAnswer, agrounded_answer, check_answer_settings, grounded_answer
from ..core.types import Fragment
from ..models.convert import as_chat_model, as_embedder
from ._documents import check_documents, read_location

__all__ = ["documents_to_fragments", "grounded_answer_runnable"]


def documents_to_fragments(
    documents: list[Document], *, doc_id_key: str = "doc_id", position_key: str = "position"
) -> list[Fragment]:
    """Core fragments for retrieved Documents, in their order (``doc_id``/``position`` from the metadata; a
    Document without them gets doc_id ``"retrieved"`` and its rank as position)."""
    out = []
    for rank, doc in enumerate(check_documents(documents, "the retriever's result")):
        doc_id, position = read_location(doc, doc_id_key, position_key) or ("retrieved", rank)
        out.append(Fragment(doc.page_content, doc_id, position))
    return out


def grounded_answer_runnable(
    retriever: RetrieverLike,
    model: Any = None,
    *,
    embedder: Any = None,
    doc_id_key: str = "doc_id",
    position_key: str = "position",
    **options: Any,
) -> Runnable[str, GroundedAnswer]:
    """A Runnable that retrieves with ``retriever`` and answers with ``model`` (a LangChain chat model, a core
    model such as ``LlamaCppChatModel``; None: the embedded SmolLM2), keeping only a supported answer.
    ``embedder`` (e.g. ``MiniLMEmbeddings()``) ranks the evidence sentences with the hybrid score (None: BM25);
    ``options`` go to :func:`~fragrel_integrations.core.answer.grounded_answer` (``max_sentences``, ``max_tokens``,
    ``constrain``, ``options``; checked here: a misspelt one is a TypeError now, not at the first question).
    ``.invoke(question).format()`` is the text ``fragrel ask`` prints."""
    options = check_answer_settings(options)
    if model is None:
        from ..models.llama_cpp_chat import default_chat_model

        chat = default_chat_model()
    else:
        chat = as_chat_model(model)
    core_embedder = None if embedder is None else as_embedder(embedder)

    fragments = partial(documents_to_fragments, doc_id_key=doc_id_key, position_key=position_key)

    def answer(question: str) -> GroundedAnswer:
        docs = retriever.invoke(question)
        return grounded_answer(question, fragments(docs), chat, embedder=core_embedder, **options)

    async def aanswer(question: str) -> GroundedAnswer:
        docs = await retriever.ainvoke(question)
        return await agrounded_answer(question, fragments(docs), chat, embedder=core_embedder, **options)

    return RunnableLambda(answer, afunc=aanswer, name="GroundedAnswer")
