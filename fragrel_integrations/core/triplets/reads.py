"""Reads of the triplet store: RET-LLM's query shapes (exact term first, else a fuzzy one), free-text search,
and the plain listings (by key, in insertion order, by version, by namespace).

:class:`TripletReader` runs each read in one read transaction of the backend; fuzzy term lookups go through the
store's :class:`~.term_dictionary.TermDictionary`. Arguments arrive checked only as far as
:class:`~.store.TripletStore` checks them; the query-shape rules and their errors live here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..._validation import check_cosine, check_min_int, check_type
from .backend import StorageBackend
from .facts import FIELDS, Namespace, NamespaceLike, TermMatch, TripletRecord, decode_namespace, normalize_term
from .rows import ROW_COLUMNS, Time, record, scope
from .term_dictionary import TermDictionary

__all__ = ["TripletReader"]


class TripletReader:
    """The read side of a triplet store (see the module docstring); ``backend`` and ``terms`` are the store's."""

    def __init__(self, backend: StorageBackend, terms: TermDictionary) -> None:
        self.backend = backend
        self._terms = terms

    # ------------------------------------------------------------------------------------------ query shapes
    def read(
        self,
        given: dict[str, str | None],
        namespace: NamespaceLike,
        prefix: bool,
        as_of: Time,
        fuzzy: bool,
        threshold: float | None,
        fuzzy_k: int | None,
        defaults: tuple[float, int],
    ) -> list[TripletRecord]:
        """Triplets matching every given field (``None`` or blank = wildcard), oldest first; ``threshold`` and
        ``fuzzy_k`` default to the store's ``defaults``."""
        asked = {f: v for f, v in given.items() if v is not None and str(v).strip()}
        for f, v in asked.items():
            check_type(v, str, f"{f} must be str or None")
        if not asked:
            raise ValueError("give at least one of t1, t2, t3 (use records() to list everything)")
        threshold = defaults[0] if threshold is None else check_cosine(threshold, "threshold")
        k = defaults[1] if fuzzy_k is None else check_min_int(fuzzy_k, "fuzzy_k", 1)
        where_scope, scope_params = scope(namespace, prefix, as_of)
        ids: dict[str, dict[int, TermMatch]] = {}
        with self.backend.read() as cur:
            for f, q in asked.items():
                # the stored term equal to q used in f within the scope; the highest term id rides along (one round
                # trip, not two): the term index catches up to it if a fuzzy lookup follows
                top, tid, text = cur.execute(
                    "SELECT m.top, t.id, t.text FROM (SELECT MAX(id) AS top FROM terms) m LEFT JOIN terms t ON "
                    f"t.norm = ? AND EXISTS (SELECT 1 FROM triplets r WHERE r.{f}_id = t.id AND {where_scope})",
                    (normalize_term(q), *scope_params),
                ).fetchone()
                if tid is not None:
                    ids[f] = {int(tid): TermMatch(f, q, text, 1.0, True)}
                elif fuzzy:  # else up to k close terms
                    close = self._terms.fuzzy(cur, q, (f,), (where_scope, scope_params), threshold, k, top)
                    ids[f] = {i: TermMatch(f, q, txt, sim, False) for i, txt, sim in close}
                if not ids.get(f):
                    return []
            where = " AND ".join(f"r.{f}_id IN ({','.join('?' * len(v))})" for f, v in ids.items())
            rows = cur.execute(
                f"SELECT {ROW_COLUMNS} FROM triplets r WHERE {where} AND {where_scope} ORDER BY r.valid_from, r.id",
                (*(i for v in ids.values() for i in v), *scope_params),
            ).fetchall()
        out = []
        for row in rows:
            term_ids = dict(zip(FIELDS, row[10:13], strict=True))
            matches = tuple(ids[f][int(term_ids[f])] for f in asked)
            out.append(record(row, min(m.similarity for m in matches), matches, where=repr(self.backend)))
        return out

    def search(
        self,
        text: str,
        namespace: NamespaceLike,
        prefix: bool,
        as_of: Time,
        threshold: float | None,
        default_threshold: float,
        k: int,
    ) -> list[TripletRecord]:
        """Triplets with any term equal or close to ``text``, best score first (at most ``k``)."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError("search text must be a non-empty string")
        thr = default_threshold if threshold is None else check_cosine(threshold, "threshold")
        k = check_min_int(k, "k", 1)
        where_scope, scope_params = scope(namespace, prefix, as_of)
        with self.backend.read() as cur:
            row = cur.execute("SELECT id, text FROM terms WHERE norm = ?", (normalize_term(text),)).fetchone()
            close = self._terms.fuzzy(cur, text, FIELDS, (where_scope, scope_params), thr, k)
            sims = {tid: (txt, sim) for tid, txt, sim in close}
            if row is not None:  # the exact term, wherever it is used
                sims[int(row[0])] = (str(row[1]), 1.0)
            if not sims:
                return []
            marks = ",".join("?" * len(sims))
            rows = cur.execute(
                f"SELECT {ROW_COLUMNS} FROM triplets r "
                f"WHERE (r.t1_id IN ({marks}) OR r.t2_id IN ({marks}) OR r.t3_id IN ({marks})) AND {where_scope}",
                (*sims, *sims, *sims, *scope_params),
            ).fetchall()
        out = []
        for row in rows:
            found = [(f, *sims[int(tid)]) for f, tid in zip(FIELDS, row[10:13], strict=True) if int(tid) in sims]
            matches = tuple(TermMatch(f, text, txt, sim, sim >= 1.0 - 1e-6) for f, txt, sim in found)
            out.append(record(row, max(m.similarity for m in matches), matches, where=repr(self.backend)))
        out.sort(key=lambda r: (-r.score, r.id))
        return out[:k]

    # ------------------------------------------------------------------------------------------ listings
    def _records(self, where: str, params: Sequence[Any], order: str) -> list[TripletRecord]:
        """The records of the rows matching ``where``, ordered by ``order`` (with any LIMIT)."""
        with self.backend.read() as cur:
            rows = cur.execute(
                f"SELECT {ROW_COLUMNS} FROM triplets r WHERE {where} ORDER BY {order}", params
            ).fetchall()
        return [record(r, where=repr(self.backend)) for r in rows]

    def get(self, key: str, namespace: NamespaceLike, as_of: Time) -> TripletRecord | None:
        """The version of ``key`` current (or valid at ``as_of``), or None."""
        where_scope, params = scope(namespace, False, as_of)
        found = self._records(f"r.key = ? AND {where_scope}", (key, *params), "r.valid_from DESC, r.id DESC LIMIT 1")
        return found[0] if found else None

    def get_many(self, keys: Sequence[str], namespace: NamespaceLike) -> list[TripletRecord | None]:
        """Current records for ``keys`` (``None`` where absent), in order; one query per chunk."""
        where_scope, params = scope(namespace, False, None)
        sql = f"SELECT {ROW_COLUMNS} FROM triplets r WHERE {where_scope} AND r.key IN ({{marks}}) ORDER BY r.id"
        found: dict[str, TripletRecord] = {}
        with self.backend.read() as cur:
            for result in self.backend.each_chunk(cur, sql, list(dict.fromkeys(keys)), *params):
                found.update((str(row[1]), record(row, where=repr(self.backend))) for row in result.fetchall())
        return [found.get(k) for k in keys]

    def records(
        self, namespace: NamespaceLike, prefix: bool, as_of: Time, history: bool, limit: int | None, offset: int
    ) -> list[TripletRecord]:
        """Stored triplets in insertion order (see :meth:`~.store.TripletStore.records`)."""
        where_scope, params = scope(namespace, prefix, as_of, history=history)
        order = f"r.id LIMIT {self.backend.unlimited if limit is None else check_min_int(limit, 'limit', 0)}"
        if offset:
            order += f" OFFSET {check_min_int(offset, 'offset', 0)}"
        return self._records(where_scope, params, order)

    def history(self, t1: str, t2: str, namespace: NamespaceLike) -> list[TripletRecord]:
        """Every version of the facts with subject ``t1`` and relation ``t2`` (exact terms), oldest first."""
        where_scope, params = scope(namespace, False, None, history=True)
        n1, n2 = normalize_term(t1), normalize_term(t2)
        ids = self._terms.ids([n1, n2])
        if n1 not in ids or n2 not in ids:
            return []
        where = f"{where_scope} AND r.t1_id = ? AND r.t2_id = ?"
        return self._records(where, (*params, ids[n1], ids[n2]), "r.valid_from, r.id")

    def namespaces(self, prefix: NamespaceLike, history: bool) -> list[Namespace]:
        """Distinct namespaces holding current triplets (or any, with ``history``), sorted."""
        where_scope, params = scope(prefix, True, None, history=history)
        with self.backend.read() as cur:
            rows = cur.execute(f"SELECT DISTINCT r.namespace FROM triplets r WHERE {where_scope}", params).fetchall()
        return sorted(decode_namespace(r[0]) for r in rows)

    def count(self, namespace: NamespaceLike, prefix: bool) -> int:
        """Number of current triplets under ``namespace``."""
        where_scope, params = scope(namespace, prefix, None)
        with self.backend.read() as cur:
            return int(cur.execute(f"SELECT COUNT(*) FROM triplets r WHERE {where_scope}", params).fetchone()[0])
