"""A filtered search over one shared vector store, as users scope a search to one conversation.

All LoCoMo dev conversations (0-4) go into ONE LangChain FAISS store (one Document per turn, tagged with
``add_positions``, ``source`` = the conversation); each question is asked with ``filter={"source": its
conversation}``. FAISS searches ``fetch_k`` candidates (20 by default) and filters afterwards, so a wrapper that
raises only ``k`` gets a short pool. Reported: the base (k=5), ``FragRelRetriever(base, k=5)`` with defaults, and
the wrapper's pool size (mean / minimum), in the same run.

    python benchmarks/bench_filtered_store.py            # dev: LoCoMo conversations 0-4
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings

import numpy as np
from _common import RESULTS_DIR, CachedEmbedder, default_data_dir, load_locomo, paired_bootstrap, recall_at_k

__all__ = ["main"]

K = 5


def run(n_boot: int) -> dict:
    from langchain_community.vectorstores import FAISS
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings

    from fragrel_integrations.langchain import FragRelRetriever, add_positions

    try:
        from fragrel_integrations.langchain import with_store_scores
    except ImportError:  # a version before it: the pool as the wrapper asked for it then (k raised, fetch_k not)
        with_store_scores = None

    ds = load_locomo(default_data_dir(), range(0, 5))
    cached = CachedEmbedder(ds.cache_name)

    class Emb(Embeddings):
        def embed_documents(self, texts):
            return cached.embed_documents(texts).tolist()

        def embed_query(self, text):
            return cached.embed_query(text).tolist()

    docs, index_of = [], {}
    for corpus in ds.corpora:
        tagged = add_positions([Document(f.text, metadata={"source": corpus.name}) for f in corpus.fragments])
        for i, d in enumerate(tagged):
            index_of[(corpus.name, d.page_content)] = i
        docs += tagged
    store = FAISS.from_documents(docs, Emb())
    t0 = time.perf_counter()
    base_r, wrap_r, pools = [], [], []
    for corpus in ds.corpora:
        base = store.as_retriever(search_kwargs={"k": K, "filter": {"source": corpus.name}})
        wrapper = FragRelRetriever(base_retriever=base, k=K)
        sized = with_store_scores(base, k=50) if with_store_scores else None  # the wrapper's default pool
        for q in corpus.queries:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got_base = base.invoke(q.text)
                got = wrapper.invoke(q.text)
                if sized is None:
                    pools.append(
                        len(store.similarity_search_with_score(q.text, k=50, filter=base.search_kwargs["filter"]))
                    )
                else:
                    pools.append(len(sized.invoke(q.text)))  # the pool the wrapper re-ranks
            base_r.append(recall_at_k([index_of[(corpus.name, d.page_content)] for d in got_base], q.gold, K))
            wrap_r.append(recall_at_k([index_of[(corpus.name, d.page_content)] for d in got], q.gold, K))
    b, w = np.asarray(base_r), np.asarray(wrap_r)
    lo, hi = paired_bootstrap(w, b, n_boot=n_boot)
    return {
        "n_queries": len(b),
        "base_r5": round(100 * b.mean(), 1),
        "fragrel_r5": round(100 * w.mean(), 1),
        "diff_ci": [round(100 * lo, 1), round(100 * hi, 1)],
        "pool_mean": round(float(np.mean(pools)), 1),
        "pool_min": int(np.min(pools)),
        "seconds": round(time.perf_counter() - t0, 1),
    }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n-boot", type=int, default=1000)
    p.add_argument("--tag", default="", help="suffix of the result file")
    args = p.parse_args(argv)
    res = run(args.n_boot)
    res["command"] = "python benchmarks/bench_filtered_store.py " + " ".join(argv if argv is not None else sys.argv[1:])
    name = "filtered_store_dev" + (f"_{args.tag}" if args.tag else "")
    (RESULTS_DIR / f"{name}.json").write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))
    return res


if __name__ == "__main__":
    main()
