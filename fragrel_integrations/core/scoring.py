"""Deprecated alias of :mod:`fragrel_integrations.core.relation_aware` (kept for one release; import from there)."""

from .._deprecation import warn_moved
from .relation_aware import *  # noqa: F403
from .relation_aware import __all__  # noqa: F401

warn_moved(__name__, "fragrel_integrations.core.relation_aware")
