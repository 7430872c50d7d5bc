"""Names a package exports but imports on first access (PEP 562), so importing it loads nothing heavy."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, where: Mapping[str, str], namespace: dict[str, Any], names: Sequence[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: ``where`` maps a name to the submodule (relative to
    ``package``) that defines it; a loaded name is kept in ``namespace`` (the package's globals).

    >>> ns = {}
    >>> getattr_, dir_ = lazy_exports("fragrel_integrations", {"split_words": "core.splitters"}, ns, ["split_words"])
    >>> getattr_("split_words").__name__, "split_words" in ns, dir_()
    ('split_words', True, ['split_words'])
    """

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__
