"""Argument checks shared by the core, the models and the adapters: one wording for every "must be an int" error.

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

__all__ = ["check_cosine", "check_min_int", "check_positive_int", "check_query"]


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
    """``query`` if it is a str holding something besides whitespace; TypeError or ValueError naming the fix.

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
    return query
