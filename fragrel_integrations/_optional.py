"""Lazy imports of optional dependencies with an error that names the extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["require"]


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` or raise ImportError naming the extra that provides it.

    >>> require("json", "core").__name__
    'json'
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - exercised through callers
        raise ImportError(
            f"{module!r} is not installed. Install it with: pip install 'fragrel-integrations[{extra}]'"
        ) from exc
