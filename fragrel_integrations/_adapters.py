"""The argument helpers of the adapters; they live in :mod:`fragrel_integrations.core.kit.args` (a private module,
kept so that the adapters that import it from here keep working)."""

from .core.kit.args import check_wrapped_chat_model, split_kwargs, split_store_or_path

__all__ = ["check_wrapped_chat_model", "split_kwargs", "split_store_or_path"]
