"""The generation parameters every chat model takes (``temperature``, ``max_tokens``, ``stop``): their checks.

>>> check_params(0, 16, "\\n")
(0.0, 16, ['\\n'])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from .messages import Messages, to_messages

__all__ = ["GenerationParams", "check_context_window", "check_params", "given_params", "prepare_call"]


def check_params(
    temperature: float | None, max_tokens: int | None, stop: str | Sequence[str] | None
) -> tuple[float | None, int | None, list[str] | None]:
    """Validate the shared generation parameters; ``stop`` may be one string or a list.

    >>> check_params(0, 16, "\\n")
    (0.0, 16, ['\\n'])
    """
    if temperature is not None:
        if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not 0 <= temperature <= 2:
            raise ValueError(f"temperature must be a number in [0, 2] or None, got {temperature!r}")
        temperature = float(temperature)
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise ValueError(f"max_tokens must be a positive int or None, got {max_tokens!r}")
    if stop is not None:
        stop = [stop] if isinstance(stop, str) else list(stop)
        if not all(isinstance(s, str) and s for s in stop):
            raise ValueError(f"stop must be a non-empty string or a list of them, got {stop!r}")
        stop = stop or None
    return temperature, max_tokens, stop


def check_context_window(value: int | None) -> int | None:
    """A context-window override: a positive int or None (ValueError otherwise)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"context_window must be a positive int or None, got {value!r}")
    return value


def given_params(temperature: float | None, max_tokens: int | None, stop: list[str] | None) -> dict[str, Any]:
    """The generation parameters that are set, as keywords for a backend (None and an empty ``stop`` left out).

    >>> given_params(0.0, None, ["\\n"])
    {'temperature': 0.0, 'stop': ['\\n']}
    """
    params: dict[str, Any] = {}
    if temperature is not None:
        params["temperature"] = temperature
    if max_tokens is not None:
        params["max_tokens"] = max_tokens
    if stop:
        params["stop"] = stop
    return params


class GenerationParams(TypedDict, total=False):
    """The keywords of every chat model's ``invoke`` / ``ainvoke`` / ``stream`` (None: the backend's default)."""

    temperature: float | None
    max_tokens: int | None
    stop: str | Sequence[str] | None


def prepare_call(
    messages: Messages, params: Mapping[str, Any]
) -> tuple[list[dict[str, str]], float | None, int | None, list[str] | None]:
    """``messages`` normalised and ``params`` checked: the arguments of ``ChatModelBase._generate`` and its siblings."""
    unknown = sorted(set(params) - GenerationParams.__optional_keys__)
    if unknown:
        raise TypeError(
            f"unexpected keyword argument(s) {unknown}: a chat model takes temperature, max_tokens and stop"
            " (invoke and ainvoke also reply_format)"
        )
    return (
        to_messages(messages),
        *check_params(params.get("temperature"), params.get("max_tokens"), params.get("stop")),
    )
