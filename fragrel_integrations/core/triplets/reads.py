"""Reads of the triplet store: RET-LLM's query shapes (exact term first, else a fuzzy one), free-text search,
and the plain listings (by key, in insertion order, by version, by namespace).

:class:`TripletReader` runs each read in one read transaction of the backend; fuzzy term lookups go through the
store's :class:`~.term_dictionary.TermDictionary`. Arguments arrive checked only as far as
:class:`~.store.TripletStore` checks them; the query-shape rules and their errors live here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..._validation import check_cosine, check_min_int
from .backend import Cursor, StorageBackend
from .facts import (
    FIELDS,
    Namespace,
    TermMatch,
    TripletRecord,
    decode_namespace,
    encode_namespace,
    namespace_tuple,
    normalize_term,
    to_timestamp,
)
from .rows import ROW_COLUMNS, ROW_COLUMNS_WITH_TERM_IDS, Time, record, scope
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
        namespace: str | Sequence[str] | None,
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
            if not isinstance(v, str):
                raise TypeError(f"{f} must be str or None, got {type(v).__name__}")
        if not asked:
            raise ValueError("give at least one of t1, t2, t3 (use records() to list everything)")
        threshold = defaults[0] if threshold is None else check_cosine(threshold, "threshold")
        k = defaults[1] if fuzzy_k is None else check_min_int(fuzzy_k, "fuzzy_k", 1)
        where_scope, scope_params = scope(namespace_tuple(namespace), prefix, to_timestamp(as_of, name="as_of"))
        ids: dict[str, dict[int, TermMatch]] = {}
        with self.backend.read() as cur:
            for f, q in asked.items():
                found = self._resolve(cur, f, q, where_scope, scope_params, fuzzy=fuzzy, threshold=threshold, k=k)
                if not found:
                    return []
                ids[f] = dict(found)
            where = " AND ".join(f"r.{f}_id IN ({','.join('?' * len(v))})" for f, v in ids.items())
            params = [i for v in ids.values() for i in v]
            rows = cur.execute(
                f"SELECT {ROW_COLUMNS_WITH_TERM_IDS} FROM triplets r WHERE {where} AND {where_scope} "
                "ORDER BY r.valid_from, r.id",
                (*params, *scope_params),
            ).fetchall()
        out = []
        for row in rows:
            term_ids = dict(zip(FIELDS, row[10:13], strict=True))
            matches = tuple(ids[f][int(term_ids[f])] for f in asked)
            score = min(m.similarity for m in matches)
            out.append(record(row, score, matches, where=repr(self.backend)))
        return out

    def _resolve(
        self,
        cur: Cursor,
        field: str,
        query: str,
        where_scope: str,
        scope_params: list[Any],
        *,
        fuzzy: bool,
        threshold: float,
        k: int,
    ) -> list[tuple[int, TermMatch]]:
        """The stored term equal to ``query`` (after normalising) used in ``field`` within the scope, else (with
        ``fuzzy``) up to ``k`` close ones: ``(term id, match)``."""
        norm = normalize_term(query)
        # the highest term id rides along (one round trip, not two): the term index catches up to it if needed
        row = cur.execute(
            "SELECT m.top, t.id, t.text FROM (SELECT MAX(id) AS top FROM terms) m LEFT JOIN terms t ON t.norm = ? "
            f"AND EXISTS (SELECT 1 FROM triplets r WHERE r.{field}_id = t.id AND {where_scope})",
            (norm, *scope_params),
        ).fetchone()
        if row[1] is not None:
            return [(int(row[1]), TermMatch(field, query, row[2], 1.0, True))]
        if not fuzzy:
            return []
        top = None if row[0] is None else int(row[0])
        return [
            (tid, TermMatch(field, query, text, sim, False))
            for tid, text, sim in self._terms.fuzzy(
                cur, query, (field,), where_scope, scope_params, threshold, k, top=top
            )
        ]

    def search(
        self,
        text: str,
        namespace: str | Sequence[str] | None,
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
        where_scope, scope_params = scope(namespace_tuple(namespace), prefix, to_timestamp(as_of, name="as_of"))
        with self.backend.read() as cur:
            row = cur.execute("SELECT id, text FROM terms WHERE norm = ?", (normalize_term(text),)).fetchone()
            terms: list[tuple[int, str, float]] = [(int(row[0]), str(row[1]), 1.0)] if row is not None else []
            fuzzy = self._terms.fuzzy(cur, text, FIELDS, where_scope, scope_params, thr, k)
            terms += [t for t in fuzzy if row is None or t[0] != int(row[0])]
            if not terms:
                return []
            sims = {tid: (txt, sim) for tid, txt, sim in terms}
            marks = ",".join("?" * len(sims))
            rows = cur.execute(
                f"SELECT {ROW_COLUMNS_WITH_TERM_IDS} FROM triplets r "
                f"WHERE (r.t1_id IN ({marks}) OR r.t2_id IN ({marks}) OR r.t3_id IN ({marks})) AND {where_scope}",
                (*sims, *sims, *sims, *scope_params),
            ).fetchall()
        out = []
        for row in rows:
            matches = tuple(
                TermMatch(f, text, sims[int(tid)][0], sims[int(tid)][1], sims[int(tid)][1] >= 1.0 - 1e-6)
                for f, tid in zip(FIELDS, row[10:13], strict=True)
                if int(tid) in sims
            )
            out.append(record(row, max(m.similarity for m in matches), matches, where=repr(self.backend)))
        out.sort(key=lambda r: (-r.score, r.id))
        return out[:k]

    # ------------------------------------------------------------------------------------------ listings
    def get(self, key: str, namespace: str | Sequence[str] | None, as_of: Time) -> TripletRecord | None:
        """The version of ``key`` current (or valid at ``as_of``), or None."""
        where_scope, params = scope(namespace_tuple(namespace), False, to_timestamp(as_of, name="as_of"))
        with self.backend.read() as cur:
            row = cur.execute(
                f"SELECT {ROW_COLUMNS} FROM triplets r WHERE r.key = ? AND {where_scope} "
                "ORDER BY r.valid_from DESC, r.id DESC",
                (key, *params),
            ).fetchone()
        return None if row is None else record(row, where=repr(self.backend))

    def get_many(self, keys: Sequence[str], namespace: str | Sequence[str] | None) -> list[TripletRecord | None]:
        """Current records for ``keys`` (``None`` where absent), in order; one query per chunk."""
        where_scope, params = scope(namespace_tuple(namespace), False, None)
        found: dict[str, TripletRecord] = {}
        unique = list(dict.fromkeys(keys))
        with self.backend.read() as cur:
            for chunk in self.backend.iter_chunks(unique, self.backend.max_params - 4):
                marks = ",".join("?" * len(chunk))
                rows = cur.execute(
                    f"SELECT {ROW_COLUMNS} FROM triplets r WHERE r.key IN ({marks}) AND {where_scope} ORDER BY r.id",
                    (*chunk, *params),
                ).fetchall()
                for row in rows:
                    found[str(row[1])] = record(row, where=repr(self.backend))
        return [found.get(k) for k in keys]

    def records(
        self,
        namespace: str | Sequence[str] | None,
        prefix: bool,
        as_of: Time,
        history: bool,
        limit: int | None,
        offset: int,
    ) -> list[TripletRecord]:
        """Stored triplets in insertion order (see :meth:`~.store.TripletStore.records`)."""
        where_scope, params = scope(
            namespace_tuple(namespace), prefix, to_timestamp(as_of, name="as_of"), history=history
        )
        lim = self.backend.unlimited if limit is None else str(check_min_int(limit, "limit", 0))
        sql = f"SELECT {ROW_COLUMNS} FROM triplets r WHERE {where_scope} ORDER BY r.id LIMIT {lim}"
        if offset:
            sql += f" OFFSET {check_min_int(offset, 'offset', 0)}"
        with self.backend.read() as cur:
            return [record(r, where=repr(self.backend)) for r in cur.execute(sql, params).fetchall()]

    def history(self, t1: str, t2: str, namespace: str | Sequence[str] | None) -> list[TripletRecord]:
        """Every version of the facts with subject ``t1`` and relation ``t2`` (exact terms), oldest first."""
        enc = encode_namespace(namespace_tuple(namespace))
        ids = self._terms.ids([normalize_term(t1), normalize_term(t2)])
        if len(ids) < len({normalize_term(t1), normalize_term(t2)}):
            return []
        with self.backend.read() as cur:
            rows = cur.execute(
                f"SELECT {ROW_COLUMNS} FROM triplets r WHERE r.namespace = ? AND r.t1_id = ? AND r.t2_id = ? "
                "ORDER BY r.valid_from, r.id",
                (enc, ids[normalize_term(t1)], ids[normalize_term(t2)]),
            ).fetchall()
        return [record(r, where=repr(self.backend)) for r in rows]

    def namespaces(self, prefix: str | Sequence[str] | None, history: bool) -> list[Namespace]:
        """Distinct namespaces holding current triplets (or any, with ``history``), sorted."""
        where_scope, params = scope(namespace_tuple(prefix), True, None, history=history)
        with self.backend.read() as cur:
            rows = cur.execute(f"SELECT DISTINCT r.namespace FROM triplets r WHERE {where_scope}", params).fetchall()
        return sorted(decode_namespace(r[0]) for r in rows)

    def count(self, namespace: str | Sequence[str] | None, prefix: bool) -> int:
        """Number of current triplets under ``namespace``."""
        where_scope, params = scope(namespace_tuple(namespace), prefix, None)
        with self.backend.read() as cur:
            return int(cur.execute(f"SELECT COUNT(*) FROM triplets r WHERE {where_scope}", params).fetchone()[0])
