"""One line to point LlamaIndex's global ``Settings`` at the embedded offline models.

LlamaIndex's ``Settings.embed_model`` and ``Settings.llm`` default to OpenAI, so ``VectorStoreIndex`` or
``index.as_query_engine()`` without ``embed_model=``/``llm=`` need ``llama-index-embeddings-openai`` and an API key.
Importing this package never changes ``Settings``; :func:`use_embedded_models` does, when you call it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["use_embedded_models"]


def use_embedded_models(*, embed_model: bool = True, llm: bool = True) -> tuple[Any, Any]:
    """Set ``Settings.embed_model`` to :class:`~fragrel_integrations.llama_index.MiniLMEmbedding` (all-MiniLM-L6-v2,
    ``[embed]`` extra; loaded on its first embedding call) and ``Settings.llm`` to
    :class:`~fragrel_integrations.llama_index.FragRelLLM` over the process-wide embedded SmolLM2-135M-Instruct
    (``[local]`` extra; loaded on its first call). ``embed_model=False`` / ``llm=False`` leave that setting alone.
    Returns ``(embed_model, llm)`` as set (``None`` for one left alone).

    >>> from llama_index.core import Settings                              # doctest: +SKIP
    >>> use_embedded_models()                                              # doctest: +SKIP
    >>> index = VectorStoreIndex.from_documents(docs)  # MiniLM, offline    # doctest: +SKIP
    """
    from llama_index.core import Settings

    from ..models.transformers_chat import default_chat_model
    from .embeddings import MiniLMEmbedding
    from .llm import FragRelLLM

    if not isinstance(embed_model, bool) or not isinstance(llm, bool):
        raise TypeError("embed_model and llm are True/False; to use your own models set Settings.embed_model/llm")
    # the LLM first: the one that can fail on a missing extra, before anything is changed
    chosen_llm = FragRelLLM(model=default_chat_model()) if llm else None
    chosen_embed = MiniLMEmbedding() if embed_model else None
    if chosen_embed is not None:
        Settings.embed_model = chosen_embed
    if chosen_llm is not None:
        Settings.llm = chosen_llm
    return chosen_embed, chosen_llm
