"""The ``triplets`` table as the triplet store's parts read and write it: row layout, scope conditions, payloads.

Shared by :mod:`.versioned_writes`, :mod:`.reads` and :class:`~.store.TripletStore`, so a column or a validity rule
is written once.

>>> scope((), False, None, history=True)
('r.namespace = ?', [''])
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ..._validation import MAX_JSON_DEPTH, check_text, check_type, json_depth_ok, stored_int, stored_json
from .facts import (
    NamespaceLike,
    TermMatch,
    Triplet,
    TripletRecord,
    decode_namespace,
    encode_namespace,
    namespace_tuple,
    to_timestamp,
)

__all__ = ["ROW_COLUMNS", "Time", "TripletLike", "dump_payload", "record", "scope"]

#: what a triplet store accepts as a time: seconds since the epoch, a datetime, or None (now / current)
Time = float | int | datetime | None
#: what a triplet store accepts as a triplet: a :class:`Triplet`, three strings, or a mapping with t1, t2, t3
TripletLike = Triplet | Sequence[str] | Mapping[str, Any]

#: the columns :func:`record` decodes (row[0:10]), then the three term ids (row[10:13]), on the table alias ``r``
ROW_COLUMNS = (
    "r.id, r.key, r.namespace, r.t1, r.t2, r.t3, r.payload, r.valid_from, r.valid_to, r.created_at, r.t1_id, r.t2_id, "
    "r.t3_id"
)


def record(
    row: Sequence[Any], score: float = 1.0, matches: tuple[TermMatch, ...] = (), *, where: str = "the triplet store"
) -> TripletRecord:
    """The :class:`TripletRecord` of a row selected with :data:`ROW_COLUMNS`; a row a damaged file returns is a
    ValueError naming ``where`` (the database)."""
    try:
        payload = stored_json(row[6], "its payload")
        if not isinstance(payload, dict):
            raise ValueError("its payload is not a JSON object")
        ident = (stored_int(row[0], "its id"), str(row[1]), decode_namespace(row[2]), Triplet(row[3], row[4], row[5]))
        times = (float(row[7]), None if row[8] is None else float(row[8]), float(row[9]))  # valid from, to, created
        return TripletRecord(*ident, *times, payload, score, matches)
    except (TypeError, ValueError, AttributeError) as exc:
        raise ValueError(
            f"{where}: a damaged row in the triplets table (id {row[0]!r:.20}: {exc}); restore the file from a backup"
        ) from exc


def scope(namespace: NamespaceLike, prefix: bool, when: Time, *, history: bool = False) -> tuple[str, list[Any]]:
    """SQL condition on alias ``r``: the namespace (or prefix) and the time (current, ``when``, or any)."""
    enc = encode_namespace(namespace_tuple(namespace))
    as_of = to_timestamp(when, name="as_of")
    if not prefix:
        ns_sql, params = "r.namespace = ?", [enc]
    elif enc:
        ns_sql, params = "substr(r.namespace, 1, CAST(? AS INTEGER)) = ?", [len(enc), enc]
    else:
        ns_sql, params = "1 = 1", []
    if history:
        return ns_sql, params
    if as_of is None:  # current = not ended (facts dated in the past or future count once written)
        return f"{ns_sql} AND (r.valid_to IS NULL OR r.valid_to > ?)", [*params, time.time()]
    return f"{ns_sql} AND r.valid_from <= ? AND (r.valid_to IS NULL OR r.valid_to > ?)", [*params, as_of, as_of]


def dump_payload(payload: Mapping[str, Any] | None) -> str:
    """``payload`` as the JSON text stored beside a triplet or node (``"{}"`` for None); TypeError if it is not a
    JSON object, ValueError if it holds a lone surrogate (text no database can store)."""
    if payload is None:
        return "{}"
    check_type(payload, Mapping, "payload must be a mapping (JSON object)")
    try:
        text = json.dumps(dict(payload), sort_keys=True, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise TypeError(f"payload must be JSON-serialisable (str keys, finite numbers): {exc}") from exc
    if not json_depth_ok(dict(payload)):
        raise TypeError(f"payload must nest at most {MAX_JSON_DEPTH} levels deep")
    return check_text(text, "payload")
