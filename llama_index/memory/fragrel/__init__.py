"""SCM self-controlled chat memory in LlamaIndex's namespace (re-exported from :mod:`fragrel_integrations.llama_index`):
:class:`SCMMemory` (a ``BaseMemory``), :class:`SCMMemoryBlock` (a block for ``llama_index.core.memory.Memory``) and
:class:`VectorStoreStreamIndex` (activation over a vector store you run).

>>> from llama_index.memory.fragrel import SCMMemoryBlock
"""

from fragrel_integrations.llama_index import SCMMemory, SCMMemoryBlock, VectorStoreStreamIndex

__all__ = ["SCMMemory", "SCMMemoryBlock", "VectorStoreStreamIndex"]
