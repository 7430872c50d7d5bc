"""What the LangChain FragRel re-rankers share: their settings fields (checked by the kit) and the re-ranking of a
list of Documents. :class:`~fragrel_integrations.langchain.FragRelRetriever` asks its base for the pool;
:class:`~fragrel_integrations.langchain.FragRelCompressor` is handed it (``ContextualCompressionRetriever``)."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any, Literal, Self

from langchain_core.documents import Document
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from .. import adapters as kit
from ..adapters import pools as pool
from ..core.fragments import Fragment
from ..core.presets import DEFAULT_PRESET
from ..core.relations import Relation
from ._documents import check_documents, fragment_to_document, isolated_key, with_scores
from ._pool import BASE_SCORE_KEY

__all__ = ["FragRelFields", "rerank_documents"]

logger = logging.getLogger(__name__)

_MISSING_POSITION = (
    "document {i} from the base retriever has no {doc_id_key!r} / {position_key!r} metadata, which the context "
    "relation needs. Index the chunks with fragrel_integrations.langchain.add_positions(chunks) before adding "
    "them to the vector store, set doc_id_key / position_key to the metadata keys you use, or pass "
    "on_missing_position='isolate' to score such documents on their own (no environment)."
)

#: The settings kit's check of each field (run before pydantic's own type check, so the words are the kit's).
_CHECKS = kit.field_checks(("k", "score_key", *kit.FIELD_SETTINGS), links=False)


def _check_k(value: object) -> int:
    """``k`` of a LangChain re-ranker: a positive int (None is not "all": the field is an int)."""
    if value is None:
        raise ValueError("k must be a positive int (the number of documents to return), got None")
    return _CHECKS_K(value)


_CHECKS_K, _CHECKS["k"] = _CHECKS["k"], _check_k
_DOCS = kit.SETTING_DOCS
#: where a pydantic model keeps its fields, which of them were given, and its private attributes
_STATE = ("__dict__", "__pydantic_fields_set__", "__pydantic_private__")


class FragRelFields(BaseModel):
    """The FragRel settings of a LangChain re-ranker, each checked by the kit and resolved once
    (:class:`~fragrel_integrations.adapters.WrapperSettings`; ``.settings`` shows them resolved)."""

    model_config = ConfigDict(arbitrary_types_allowed=True, validate_assignment=True)

    k: int = 5
    """Number of documents to return."""
    preset: str = Field(DEFAULT_PRESET, description=_DOCS["preset"])
    alpha: float | None = Field(None, description=_DOCS["alpha"])
    top_m: int | None = Field(None, description=_DOCS["top_m"])
    relation: Relation | None = Field(None, description=_DOCS["relation"])
    lexical: float | None = Field(None, description=_DOCS["lexical"])
    embedder: Any = Field(None, description=_DOCS["embedder"])
    score_embedder: Any = Field(None, description=_DOCS["score_embedder"])
    store: Any = Field(None, description=_DOCS["store"])
    expand: int | None = Field(None, description=_DOCS["expand"])
    outside: Literal["floor", "ignore"] = Field("floor", description=_DOCS["outside"])
    doc_id_key: str = Field(kit.DEFAULT_DOC_ID_KEY, description=_DOCS["doc_id_key"])
    position_key: str = Field(kit.DEFAULT_POSITION_KEY, description=_DOCS["position_key"])
    score_key: str | None = Field(None, description=_DOCS["score_key"])
    on_missing_position: Literal["raise", "error", "isolate"] = Field("raise", description=_DOCS["on_missing_position"])
    order: Literal["score", "position"] | None = Field(None, description=_DOCS["order"])

    _settings: kit.WrapperSettings = PrivateAttr()
    _warned: bool = PrivateAttr(default=False)

    @field_validator(*_CHECKS, mode="before")
    @classmethod
    def _check_setting(cls, value: Any, info: ValidationInfo) -> Any:
        return _CHECKS[info.field_name](value)  # the kit's check: the same words as in LlamaIndex

    @model_validator(mode="after")
    def _resolve_settings(self) -> Self:
        # resolved from the settings given (at construction or reassigned since), not from the fields shown: a
        # reassigned preset fills the settings it was not given from itself
        declared = type(self).model_fields
        given = {n: getattr(self, n) if n in self.model_fields_set else declared[n].default for n in kit.SETTING_NAMES}
        settings = kit.WrapperSettings.resolve(**given, links=False)
        self._settings = settings
        # the fields show the resolved settings (None with preset="auto": chosen per pool; top_m 0: all lend
        # support); written past validation, which would resolve again, and without marking them as given
        self.__dict__.update(
            alpha=settings.alpha,
            top_m=settings.top_m,
            relation=settings.relation,
            order=settings.order,
            expand=settings.expand,
            lexical=settings.lexical,
            on_missing_position=settings.on_missing_position,
        )
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):  # private state: not a setting
            return super().__setattr__(name, value)
        # a reassignment the checks after it refuse (e.g. expand > 0 without a store) leaves the object as it was
        saved = (dict(self.__dict__), set(self.__pydantic_fields_set__), dict(self.__pydantic_private__ or {}))
        try:
            super().__setattr__(name, value)
        except Exception:
            for attribute, kept in zip(_STATE, saved, strict=True):
                object.__setattr__(self, attribute, kept)
            raise
        return None

    @property
    def settings(self) -> kit.WrapperSettings:
        """The resolved, checked FragRel settings (the kit's :class:`WrapperSettings`)."""
        return self._settings


def _base_score(doc: Document, score_key: str | None) -> tuple[Document, float | None]:
    """``doc`` without the base's score that a sized copy put in its metadata, and that score (else the
    ``score_key`` metadata)."""
    if BASE_SCORE_KEY not in doc.metadata:
        return doc, pool.read_score(doc.metadata, score_key)
    metadata = dict(doc.metadata)
    score = float(metadata.pop(BASE_SCORE_KEY))
    return doc.model_copy(update={"metadata": metadata}), score


def rerank_documents(
    fields: FragRelFields,
    query: str,
    documents: object,
    k: int,
    *,
    ranks_by_words: bool = False,
    advice: Callable[[], str] | None = None,
) -> list[Document]:
    """Re-rank the base's ``documents`` (best first) with the settings of ``fields``: copies with the three
    FragRel scores in their metadata. With ``advice``, warn once when the pool is no larger than ``k``."""
    docs = check_documents(documents, "the base retriever's result")
    if not docs:
        return []
    if advice is not None and len(docs) <= k and not fields._warned:
        fields._warned = True
        warnings.warn(
            f"{type(fields).__name__}: got {len(docs)} documents for k={k}, so FragRel can only re-order them; "
            + advice(),
            UserWarning,
            stacklevel=5,
        )
    kept, scores = zip(*(_base_score(doc, fields.score_key) for doc in docs), strict=True)
    doc_id_key, position_key = fields.doc_id_key, fields.position_key
    ranked = pool.rerank_items(
        fields.settings,
        query,
        kept,
        locate=lambda doc: pool.read_location(doc.metadata, doc_id_key, position_key),
        fragment=lambda doc, key: Fragment(doc.page_content, *key, dict(doc.metadata)),
        isolated=lambda i: (isolated_key(docs[i]), 0),  # the Document as the base returned it
        error=lambda missing: ValueError(
            _MISSING_POSITION.format(i=missing[0], doc_id_key=doc_id_key, position_key=position_key)
        ),
        scores=None if all(s is None for s in scores) else list(scores),
        k=k,
        ranks_by_words=ranks_by_words,
        neighbour=partial(fragment_to_document, doc_id_key=doc_id_key, position_key=position_key),
    )
    logger.debug("FragRel re-ranked %d candidates into %d documents", len(docs), len(ranked))
    return [with_scores(doc, hit) for doc, hit in ranked]
