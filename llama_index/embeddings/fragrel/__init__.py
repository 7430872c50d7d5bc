"""The embedded offline all-MiniLM-L6-v2 in LlamaIndex's namespace (re-exported from
:mod:`fragrel_integrations.llama_index`).

>>> from llama_index.embeddings.fragrel import MiniLMEmbedding
"""

from fragrel_integrations.llama_index import MiniLMEmbedding

__all__ = ["MiniLMEmbedding"]
