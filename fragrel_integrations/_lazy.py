"""Things made on first access, so importing a module loads nothing heavy: a package's exports (PEP 562) and
process-wide default models."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

__all__ = ["LazyInstance", "lazy_exports"]

T = TypeVar("T")


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


class LazyInstance(Generic[T]):
    """One process-wide object, made by ``factory`` on the first :meth:`get` (under a lock: a model loads once).

    >>> made = LazyInstance(lambda: object())
    >>> made.get() is made.get()
    True
    """

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._value: T | None = None
        self._lock = threading.Lock()

    def get(self) -> T:
        with self._lock:
            if self._value is None:
                self._value = self._factory()
            return self._value
