"""Old import paths kept for one release: a warning that names the new path (see CHANGELOG "Deprecated")."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["moved_attributes", "warn_moved"]


def warn_moved(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn (``DeprecationWarning``) that module ``old`` moved to ``new``; call it at the end of the old module.

    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_moved("pkg.old", "pkg.new")
    >>> str(caught[0].message)
    'pkg.old is deprecated: import from pkg.new'
    """
    warnings.warn(f"{old} is deprecated: import from {new}", DeprecationWarning, stacklevel=stacklevel)


def moved_attributes(old: str, new: str, names: Sequence[str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` (PEP 562) of ``old`` for ``names`` that moved to module ``new``: each access warns
    and returns the new object.

    >>> getattr_ = moved_attributes("pkg.old", "fragrel_integrations.core.scorers", ["code_tokens"])
    >>> import warnings
    >>> with warnings.catch_warnings(record=True):
    ...     warnings.simplefilter("always")
    ...     getattr_("code_tokens").__name__
    'code_tokens'
    """

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        warn_moved(f"{old}.{name}", new)
        return getattr(importlib.import_module(new), name)

    return __getattr__
