"""Versioned writes of the triplet store: new facts, replaced facts, single-valued relations and deletes.

Nothing is overwritten: a fact that changes gets a new row and the old row's validity interval ends where the new
one starts (``valid_to``), so ``as_of`` reads still see it. :class:`VersionedWriter` applies the rules of
:meth:`~.store.TripletStore.write_many` and :meth:`~.store.TripletStore.delete` inside one transaction per call,
storing new terms through the :class:`~.term_dictionary.TermDictionary`.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._validation import check_text
from .backend import Cursor, StorageBackend
from .facts import (
    Namespace,
    NamespaceLike,
    Triplet,
    TripletRecord,
    encode_namespace,
    namespace_tuple,
    normalize_term,
    to_timestamp,
)
from .rows import ROW_COLUMNS, Time, TripletLike, dump_payload, record, scope
from .term_dictionary import TermDictionary

__all__ = ["TripletWrite", "VersionedWriter"]

#: one checked write: triplet, key, namespace, payload JSON, valid_from, valid_to, single_valued
_Prepared = tuple[Triplet, str | None, Namespace, str, float, float | None, bool | None]


@dataclass(frozen=True, slots=True)
class TripletWrite:
    """One write for :meth:`TripletStore.write_many` (``None`` fields take the call's defaults)."""

    triplet: TripletLike
    key: str | None = None
    namespace: NamespaceLike = None
    payload: Mapping[str, Any] | None = None
    valid_from: Time = None
    valid_to: Time = None
    single_valued: bool | None = None


def _prepare(
    raw: TripletWrite | TripletLike, namespace: NamespaceLike, single_valued: bool | None, now: float
) -> _Prepared:
    """One item checked and filled with the call's defaults (ValueError / TypeError naming the bad field)."""
    w = raw if isinstance(raw, TripletWrite) else TripletWrite(raw)
    trip = Triplet.coerce(w.triplet)
    if w.key is not None and (not isinstance(w.key, str) or not w.key):
        raise ValueError(f"key must be a non-empty string or None, got {w.key!r}")
    if w.key is not None:
        check_text(w.key, "key")
    ns = namespace_tuple(w.namespace if w.namespace is not None else namespace)  # its labels checked there
    start = now if w.valid_from is None else to_timestamp(w.valid_from, name="valid_from")
    end = to_timestamp(w.valid_to, name="valid_to")
    if end is not None and end <= start:
        raise ValueError(f"valid_to ({end}) must be after valid_from ({start})")
    sv = w.single_valued if w.single_valued is not None else single_valued
    return trip, w.key, ns, dump_payload(w.payload), start, end, sv


class VersionedWriter:
    """Writes and deletes triplets as new versions, never in place (see the module docstring).

    Args:
        backend, lock: the store's backend and write lock.
        terms: the store's term dictionary (new terms are embedded and stored through it).
        single_valued: the normalised relations marked single-valued in the database.
    """

    def __init__(
        self, backend: StorageBackend, lock: threading.RLock, terms: TermDictionary, single_valued: Iterable[str]
    ) -> None:
        self.backend = backend
        self._lock = lock
        self._terms = terms
        self.single_valued: set[str] = set(single_valued)

    def mark_single_valued(self, *relations: str) -> None:
        """Mark relations single-valued for every later write (saved in the database)."""
        with self._lock:
            new = self.single_valued | {normalize_term(r) for r in relations}
            with self.backend.write() as cur:
                cur.execute(
                    "INSERT INTO meta (name, value) VALUES (?, ?) "
                    "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                    ("single_valued", json.dumps(sorted(new))),
                )
            self.single_valued = new

    def write_many(
        self, items: Iterable[TripletWrite | TripletLike], namespace: NamespaceLike, single_valued: bool | None
    ) -> list[TripletRecord]:
        """Store the items in ONE transaction and return their records (the rules are
        :meth:`~.store.TripletStore.write_many`'s)."""
        now = time.time()
        prepared = [_prepare(raw, namespace, single_valued, now) for raw in items]
        if not prepared:
            return []
        # embed the terms the store does not know yet, outside the write transaction
        norms: dict[str, str] = {}
        for trip, *_ in prepared:
            for term in trip:
                norms.setdefault(normalize_term(term), term)
        known = self._terms.ids(list(norms))
        missing = [n for n in norms if n not in known]
        vectors = self._terms.embed([norms[n] for n in missing]) if missing else None
        with self._lock:
            with self.backend.write() as cur:
                fresh = self._terms.insert(cur, missing, [norms[n] for n in missing], vectors) if missing else {}
                ids = self._terms.ids(list(norms), cur)
                out = [self.write_one(cur, ids, p, now=now, fresh=fresh.keys()) for p in prepared]
            if fresh:  # committed: only now may the in-memory index learn the new terms
                row = {n: i for i, n in enumerate(missing)}
                self._terms.committed(np.array(list(fresh.values()), dtype=np.int64), vectors[[row[n] for n in fresh]])
        return out

    def write_one(
        self, cur: Cursor, ids: dict[str, int], item: _Prepared, *, now: float, fresh: Collection[str] = ()
    ) -> TripletRecord:
        """Write one prepared item in ``cur``'s transaction; ``ids`` maps every normalised term to its id and
        ``fresh`` names the terms first stored in this transaction."""
        trip, key, ns, payload, start, end, single_valued = item
        enc = encode_namespace(ns)
        n1, n2, n3 = (normalize_term(t) for t in trip)
        t1_id, t2_id, t3_id = ids[n1], ids[n2], ids[n3]
        # a term first stored in this transaction is in no earlier triplet: skip the lookups that cannot match
        new_pair = n1 in fresh or n2 in fresh
        if key is not None:
            old = cur.execute(
                f"SELECT {ROW_COLUMNS} FROM triplets r WHERE r.namespace = ? AND r.key = ? AND r.valid_to IS NULL",
                (enc, key),
            ).fetchone()
            if old is not None:
                if tuple(old[10:13]) == (t1_id, t2_id, t3_id) and old[6] == payload and end is None:
                    return record(old, where=repr(self.backend))
                cur.execute("UPDATE triplets SET valid_to = ? WHERE id = ?", (max(start, float(old[7])), old[0]))
        elif new_pair or n3 in fresh:
            key = uuid.uuid4().hex
        else:
            valid, params = scope(ns, False, start)  # the same triplet, valid at start
            same = cur.execute(
                f"SELECT {ROW_COLUMNS} FROM triplets r WHERE {valid} AND r.t1_id = ? AND r.t2_id = ? AND r.t3_id = ? "
                "ORDER BY r.id LIMIT 1",
                (*params, t1_id, t2_id, t3_id),
            ).fetchone()
            if same is not None:
                return record(same, where=repr(self.backend))
            key = uuid.uuid4().hex
        if (n2 in self.single_valued if single_valued is None else single_valued) and not new_pair:
            cur.execute(
                "UPDATE triplets SET valid_to = ? WHERE namespace = ? AND t1_id = ? AND t2_id = ? AND t3_id <> ? "
                "AND valid_from <= ? AND (valid_to IS NULL OR valid_to > ?)",
                (start, enc, t1_id, t2_id, t3_id, start, start),
            )
            later = cur.execute(
                "SELECT MIN(valid_from) FROM triplets WHERE namespace = ? AND t1_id = ? AND t2_id = ? "
                "AND t3_id <> ? AND valid_from > ?",
                (enc, t1_id, t2_id, t3_id, start),
            ).fetchone()[0]
            if later is not None and (end is None or float(later) < end):
                end = float(later)
        row = cur.execute(
            "INSERT INTO triplets (namespace, key, t1, t2, t3, t1_id, t2_id, t3_id, payload, valid_from, valid_to, "
            "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (enc, key, trip.t1, trip.t2, trip.t3, t1_id, t2_id, t3_id, payload, start, end, now),
        ).fetchone()
        return TripletRecord(int(row[0]), key, ns, trip, start, end, now, json.loads(payload))

    def delete(
        self, key: str | None, triplet: TripletLike | None, namespace: NamespaceLike, hard: bool, at: Time
    ) -> int:
        """End (or with ``hard``, erase) the rows of ``key`` or of ``triplet`` (see
        :meth:`~.store.TripletStore.delete`); the number of rows affected."""
        if (key is None) == (triplet is None):
            raise ValueError("give exactly one of key= or triplet=")
        enc = encode_namespace(namespace_tuple(namespace))
        when = time.time() if at is None else to_timestamp(at, name="at")
        with self._lock, self.backend.write() as cur:
            if key is not None:
                where, params = "namespace = ? AND key = ?", [enc, key]
            else:
                norms = [normalize_term(t) for t in Triplet.coerce(triplet)]  # type: ignore[arg-type]
                ids = self._terms.ids(norms, cur)
                if any(n not in ids for n in norms):
                    return 0
                where = "namespace = ? AND t1_id = ? AND t2_id = ? AND t3_id = ?"
                params = [enc, *(ids[n] for n in norms)]
                if hard:  # every version of the keys holding the triplet
                    where, params = f"namespace = ? AND key IN (SELECT key FROM triplets WHERE {where})", [enc, *params]
            if hard:
                return cur.execute(f"DELETE FROM triplets WHERE {where}", params).rowcount
            return cur.execute(
                f"UPDATE triplets SET valid_to = (CASE WHEN valid_from > ? THEN valid_from ELSE ? END) "
                f"WHERE {where} AND (valid_to IS NULL OR valid_to > ?)",
                (when, when, *params, when),
            ).rowcount
