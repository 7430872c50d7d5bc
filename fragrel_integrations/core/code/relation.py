"""Deprecated alias of :mod:`fragrel_integrations.core.code.code_relation` (kept for one release; import from there)."""

from ..._deprecation import warn_moved
from .code_relation import *  # noqa: F403
from .code_relation import __all__  # noqa: F401

warn_moved(__name__, "fragrel_integrations.core.code.code_relation")
