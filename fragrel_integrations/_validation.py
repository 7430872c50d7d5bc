"""Checks shared by the core, the models and the adapters: one wording for every "must be an int" error, for text
that cannot be stored, and for values read back from a saved file (a damaged file is a ValueError naming it).

>>> check_positive_int(3, "k")
3
>>> check_positive_int(True, "k")
Traceback (most recent call last):
...
ValueError: k must be a positive int, got True
>>> check_min_int(-1, "radius", 0, hint=" (neighbours on each side)")
Traceback (most recent call last):
...
ValueError: radius must be an int >= 0 (neighbours on each side), got -1
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

__all__ = [
    "MAX_JSON_DEPTH",
    "check_cosine",
    "check_min_int",
    "check_positive_int",
    "check_query",
    "check_text",
    "check_type",
    "json_depth_ok",
    "stored_int",
    "stored_json",
    "stored_vectors",
]

_T = TypeVar("_T")

#: Deepest nesting of JSON data accepted from a saved file (deeper data fails with a RecursionError when it is
#: parsed, copied or saved again).
MAX_JSON_DEPTH = 64


def check_min_int(value: object, name: str, minimum: int, *, hint: str = "") -> int:
    """``value`` if it is an int (not a bool) ``>= minimum``; else ValueError naming ``name`` (``hint`` is
    added after the rule, e.g. ``" or None"`` or ``" (the paper uses 5)"``)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}{hint}, got {value!r}")
    return value


def check_positive_int(value: object, name: str, *, hint: str = "") -> int:
    """``value`` if it is an int (not a bool) ``>= 1``; else ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int{hint}, got {value!r}")
    return value


def check_cosine(value: object, name: str, *, what: str = "a cosine") -> float:
    """``value`` as a float if it is a number (not a bool) in [-1, 1]; else ValueError naming ``name``.

    >>> check_cosine(2, "threshold")
    Traceback (most recent call last):
    ...
    ValueError: threshold must be a cosine in [-1, 1], got 2
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not -1.0 <= float(value) <= 1.0:
        raise ValueError(f"{name} must be {what} in [-1, 1], got {value!r}")
    return float(value)


def check_query(query: object, *, what: str = "query") -> str:
    """``query`` if it is a str holding something besides whitespace and no lone surrogate (:func:`check_text`);
    TypeError or ValueError naming the fix. Every retriever, wrapper and the CLI check a query with it.

    >>> check_query("  ")
    Traceback (most recent call last):
    ...
    ValueError: the query is blank: give the text to retrieve for (a question, or the code before the cursor)
    """
    if not isinstance(query, str):
        raise TypeError(f"{what} must be str, got {type(query).__name__}")
    if not query.strip():
        raise ValueError(
            f"the {what} is {'empty' if not query else 'blank'}: give the text to retrieve for (a question, or the "
            "code before the cursor)"
        )
    return check_text(query, f"the {what}")


def check_text(value: object, name: str) -> str:
    """``value`` if it is a str that a database or file can store (UTF-8 encodable: no lone surrogate); else a
    TypeError / ValueError naming ``name`` and the fix.

    >>> check_text("caf\\u00e9", "term")
    'café'
    >>> check_text("a\\ud800", "observation")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: observation contains '\\ud800' at position 1, a lone surrogate ... errors='replace'
    """
    if not isinstance(value, str):
        raise TypeError(f"{name} must be str, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{name} contains {value[exc.start]!r} at position {exc.start}, a lone surrogate that cannot be stored "
            "(not valid Unicode text): decode the input with errors='replace'"
        ) from None
    return value


def check_type(value: _T, types: type | tuple[type, ...], message: str, *, hint: str = "") -> _T:
    """``value`` if it is an instance of ``types``; else TypeError ``"{message}, got {type}{hint}"``: one wording for
    every "must be a ..." error.

    >>> check_type(3, str, "name must be str", hint="; pass the name as text")
    Traceback (most recent call last):
    ...
    TypeError: name must be str, got int; pass the name as text
    """
    if not isinstance(value, types):
        raise TypeError(f"{message}, got {type(value).__name__}{hint}")
    return value


# --------------------------------------------------------------------------------------------- saved data


def json_depth_ok(value: object, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``value`` (JSON data) nests at most ``limit`` levels (iterative: no recursion on hostile data).

    >>> json_depth_ok({"a": [1, {"b": 2}]}, 3), json_depth_ok([[[]]], 2)
    (True, False)
    """
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping | list | tuple):
            if depth > limit:
                return False
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, Mapping) else item))
    return True


def stored_json(text: object, where: str, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """JSON text read back from a saved file, parsed; anything else (not text, bad JSON, nested deeper than
    ``max_depth``) is a ValueError starting with ``where`` (which names the file and the field).

    >>> stored_json('{"a": 1}', "x.db: settings")
    {'a': 1}
    >>> stored_json("[" * 100_000, "x.db: settings")
    Traceback (most recent call last):
    ...
    ValueError: x.db: settings is damaged (JSON nested too deeply)
    """
    if isinstance(text, bytes | bytearray | memoryview):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{where} is damaged (not UTF-8 text)") from None
    if not isinstance(text, str):
        raise ValueError(f"{where} is damaged (JSON text expected, found {type(text).__name__})")
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError(f"{where} is damaged (JSON nested too deeply)") from None
    except ValueError as exc:
        raise ValueError(f"{where} is damaged (not JSON: {exc})") from None
    if not json_depth_ok(value, max_depth):
        raise ValueError(f"{where} is damaged (JSON nested more than {max_depth} levels deep)")
    return value


def stored_int(value: object, where: str, *, minimum: int | None = None) -> int:
    """An integer read back from a saved file (an int, not a bool, a float or text), at least ``minimum``;
    else a ValueError starting with ``where``.

    >>> stored_int(3, "x.db: meta.dim", minimum=1)
    3
    >>> stored_int("g", "x.db: meta.dim")
    Traceback (most recent call last):
    ...
    ValueError: x.db: meta.dim is damaged (an integer expected, found 'g')
    """
    if isinstance(value, np.integer):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        rule = "an integer" if minimum is None else f"an integer >= {minimum}"
        raise ValueError(f"{where} is damaged ({rule} expected, found {value!r:.60})")
    return value


def stored_vectors(
    blobs: Sequence[object], dim: int, where: str, *, names: Sequence[object] | None = None
) -> np.ndarray:
    """``(len(blobs), dim)`` float32 rows from raw little-endian float32 BLOBs read back from a saved file; a
    BLOB of another length or type, or a non-finite value, is a ValueError starting with ``where`` and naming
    the row (``names[i]``, else its position).

    >>> stored_vectors([b"\\x00\\x00\\x80?" * 2], 2, "x.db: terms.vector").tolist()
    [[1.0, 1.0]]
    >>> stored_vectors([b"\\x00\\x00\\x80?" * 3], 2, "x.db: terms.vector", names=[17])
    Traceback (most recent call last):
    ...
    ValueError: x.db: terms.vector of row 17 is damaged (12 bytes, expected 2 float32 values = 8 bytes)
    """
    size = 4 * dim
    for i, blob in enumerate(blobs):
        label = names[i] if names is not None else i
        if not isinstance(blob, bytes | bytearray | memoryview):
            found = type(blob).__name__
            raise ValueError(f"{where} of row {label} is damaged (a float32 BLOB expected, found {found})")
        if len(blob) != size:
            raise ValueError(
                f"{where} of row {label} is damaged ({len(blob)} bytes, expected {dim} float32 values = {size} bytes)"
            )
    out = np.frombuffer(b"".join(bytes(b) for b in blobs), dtype="<f4").reshape(len(blobs), dim)
    finite = np.isfinite(out).all(axis=1)
    if not finite.all():
        i = int(np.flatnonzero(~finite)[0])
        raise ValueError(f"{where} of row {names[i] if names is not None else i} is damaged (NaN or inf values)")
    return out.astype(np.float32)
