"""``with obj: ...`` for the package's objects that hold a resource and have ``close()``."""

from __future__ import annotations

from typing import Self

__all__ = ["Closing"]


class Closing:
    """Mixin: ``__enter__`` returns the object, ``__exit__`` calls its ``close()`` (also after an error)."""

    def close(self) -> None:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
