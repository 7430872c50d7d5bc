"""Run inside a venv that has `.[langchain]` and no `[embed]`: torch is not installed, and the LangChain
FragRelRetriever works with the user's own embedding model (the README's "Without torch" promise)."""

import importlib.util

from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.vectorstores import InMemoryVectorStore

from fragrel_integrations.langchain import FragRelRetriever, add_positions

assert importlib.util.find_spec("torch") is None, "torch is installed: this check needs a venv without it"
texts = [f"turn {i} about {'boats' if i % 7 == 0 else 'goats'}" for i in range(60)]
store = InMemoryVectorStore(DeterministicFakeEmbedding(size=16))
store.add_documents(add_positions([Document(t, metadata={"source": "chat"}) for t in texts]))
got = FragRelRetriever(base_retriever=store.as_retriever()).invoke("boats")
assert len(got) == 5 and all("fragrel_environment_score" in d.metadata for d in got), got
print("torch-free install: FragRelRetriever returned", len(got), "documents")
