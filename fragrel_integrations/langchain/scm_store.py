"""The SCM memory stream in a LangGraph store: :class:`LangGraphStoreStream` over any ``BaseStore``.

Each interaction is one store item under ``namespace + (session_id,)``, keyed by the slot it claimed and a random
suffix (``"0000000000-3f2a..."``), so no write can ever replace another; the layout, concurrent writers and the
read cache are those of :class:`~fragrel_integrations.adapters.keyed_stream.KeyedStoreStream`. Use the same store
object you pass to ``create_agent(store=...)`` (an ``InMemoryStore``, a ``SqliteStore``, a ``PostgresStore``, ...).
The sync store methods are used; with an async store (``AsyncPostgresStore``) call the stream from a worker thread,
as the async methods of the SCM memory do.

>>> import numpy as np
>>> from langgraph.store.memory import InMemoryStore
>>> store = InMemoryStore()
>>> stream = LangGraphStoreStream(store)
>>> item = stream.append("ana", "Hi, I am Ana.", "Hello Ana!", summary="The user is Ana.", embedding=np.ones(2))
>>> item.index, stream.count("ana"), stream.count("bo"), stream.sessions()
(0, 1, 0, ['ana'])
>>> stream.last("ana").summary, stream.items("ana")[0].embedding.tolist()
('The user is Ana.', [1.0, 1.0])
>>> [(it.key[:10], it.value["response"]) for it in store.search(("fragrel", "scm", "ana"))]
[('0000000000', 'Hello Ana!')]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._optional import require

require("langgraph.store.base", "langchain")

from langgraph.store.base import BaseStore, GetOp, Item, PutOp, SearchOp  # noqa: E402

from .._validation import check_type  # noqa: E402
from ..adapters.keyed_stream import DEFAULT_NAMESPACE, KeyedStoreStream  # noqa: E402

__all__ = ["DEFAULT_NAMESPACE", "LangGraphStoreStream"]


class LangGraphStoreStream(KeyedStoreStream):
    """An SCM memory stream in a LangGraph ``BaseStore``: ``SelfControlledMemory(..., stream=LangGraphStoreStream(
    store))`` or ``SCMMiddleware(..., store=store)``.

    Args:
        store: the LangGraph store (the caller owns it: :meth:`close` leaves it open).
        namespace: prefix of the stream's namespaces; each session lives under ``namespace + (session_id,)``.
        page_size: items per ``store.search`` / ``store.list_namespaces`` call when reading a session.
    """

    def __init__(
        self, store: BaseStore, *, namespace: str | tuple[str, ...] = DEFAULT_NAMESPACE, page_size: int = 100
    ) -> None:
        check_type(
            store,
            BaseStore,
            "store must be a LangGraph BaseStore (e.g. langgraph.store.memory.InMemoryStore() or a PostgresStore)",
        )
        super().__init__(store, namespace=namespace, page_size=page_size)

    def _batch_ends(
        self,
        ns: tuple[str, ...],
        keys: tuple[str, str],
        refresh: bool,
        searches: Sequence[tuple[dict[str, Any] | None, int]],
    ) -> list[Any]:
        ops = [GetOp(ns, key, refresh) for key in keys]
        ops += [SearchOp(ns, f, self.page_size, offset) for f, offset in searches]
        first, last, *pages = self.store.batch(ops)
        return [first if isinstance(first, Item) else None, last if isinstance(last, Item) else None, *pages]

    def _batch_delete(self, ns: tuple[str, ...], keys: list[str]) -> None:
        self.store.batch([PutOp(ns, key, None) for key in keys])
