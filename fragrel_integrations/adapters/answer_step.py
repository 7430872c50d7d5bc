"""What the LangChain and LlamaIndex grounded-answer steps share (no framework is imported here).

An adapter turns its retrieved items into ``(text, metadata)`` pairs; :func:`cited_fragments` makes the
fragments the evidence is cited by, and :class:`AnswerStep` holds the model, the evidence embedder and the checked
settings of :func:`~fragrel_integrations.core.grounding.grounded_answer`.

>>> from fragrel_integrations.testing import ScriptedChatModel
>>> step = AnswerStep.of(ScriptedChatModel(["Poll"]), None, {"max_sentences": 1})
>>> hits = cited_fragments([("The parrot was called Poll.", {"doc_id": "crusoe", "position": 7})])
>>> step.answer("What was the parrot called?", hits).format().splitlines()[0]
'Poll'
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from ..core.fragments import Fragment
from ..core.grounding import GroundedAnswer, agrounded_answer, check_answer_settings, grounded_answer
from ..models.chat import ChatModel
from ..models.convert import as_chat_model, as_embedder
from ..models.embedder import Embedder
from .pools import read_location
from .wrapper_settings import DEFAULT_DOC_ID_KEY, DEFAULT_POSITION_KEY, check_keys

__all__ = ["AnswerStep", "aone_chunk", "cited_fragments", "one_chunk"]

Item = tuple[str, Mapping[str, Any]]
_RETRIEVED: ContextVar[list[Item] | None] = ContextVar("fragrel_retrieved_items", default=None)


def cited_fragments(
    items: Iterable[Item], doc_id_key: str = DEFAULT_DOC_ID_KEY, position_key: str = DEFAULT_POSITION_KEY
) -> list[Fragment]:
    """Fragments for retrieved ``(text, metadata)`` pairs, in their order: the position keys from the
    metadata (as the position taggers write them), else doc_id ``"retrieved"`` and the item's rank."""
    out = []
    for rank, (text, metadata) in enumerate(items):
        doc_id, position = read_location(metadata, doc_id_key, position_key) or ("retrieved", rank)
        out.append(Fragment(text, doc_id, position))
    return out


def one_chunk(text: str) -> Iterator[str]:
    """``text`` as a stream of one chunk (a grounded answer streams only after its support check)."""
    yield text


async def aone_chunk(text: str) -> AsyncIterator[str]:
    """Async :func:`one_chunk`."""
    yield text


@dataclass(frozen=True)
class AnswerStep:
    """A chat model, the evidence embedder (None: BM25 alone), the checked answer settings and the metadata keys
    that cite a retrieved item."""

    model: ChatModel
    embedder: Embedder | None
    settings: dict[str, Any]
    doc_id_key: str = DEFAULT_DOC_ID_KEY
    position_key: str = DEFAULT_POSITION_KEY

    @classmethod
    def of(cls, model: Any, embedder: Any, settings: Mapping[str, Any], **keys: object) -> AnswerStep:
        """Convert any framework's model and embedding (None: the embedded SmolLM2; no embedder) and check the
        settings now (:func:`~fragrel_integrations.core.grounding.check_answer_settings`), not at the first question;
        ``keys``: ``doc_id_key``, ``position_key`` (checked: non-empty and different)."""
        if model is None:
            from ..models.transformers_chat import default_chat_model

            model = default_chat_model()
        checked = check_answer_settings(settings)
        doc_id_key, position_key = check_keys(
            keys.get("doc_id_key", DEFAULT_DOC_ID_KEY), keys.get("position_key", DEFAULT_POSITION_KEY)
        )
        embedder = None if embedder is None else as_embedder(embedder)
        return cls(as_chat_model(model), embedder, checked, doc_id_key, position_key)

    @contextmanager
    def retrieved(self, items: Iterable[Item]) -> Iterator[None]:
        """Within the block (this thread or task), :meth:`text_fragments` cites texts by these items' metadata: for
        a framework that hands the answer step only the texts."""
        token = _RETRIEVED.set(list(items))
        try:
            yield
        finally:
            _RETRIEVED.reset(token)

    def text_fragments(self, texts: Sequence[str]) -> list[Fragment]:
        """Fragments for ``texts``: the items of :meth:`retrieved` when there are as many (their texts without the
        framework's metadata header, cited by their metadata), else ``texts`` cited by rank."""
        items = _RETRIEVED.get()
        if items is None or len(items) != len(texts):
            return cited_fragments((text, {}) for text in texts)
        return cited_fragments(items, self.doc_id_key, self.position_key)

    def answer(self, question: str, fragments: list[Fragment]) -> GroundedAnswer:
        """:func:`~fragrel_integrations.core.grounding.grounded_answer` with this step's model and settings."""
        return grounded_answer(question, fragments, self.model, embedder=self.embedder, **self.settings)

    async def aanswer(self, question: str, fragments: list[Fragment]) -> GroundedAnswer:
        """Async :meth:`answer`."""
        return await agrounded_answer(question, fragments, self.model, embedder=self.embedder, **self.settings)
