"""Speed of FragRel's context-relation re-scoring (core, O(N)) next to the dense N x N formula.

For N = 1e3 .. 1e6 fragments and two layouts (many documents of 100-500 fragments; one document of N) it
times, as the median of several repeats:
  * prepare   - ``ContextRelation(w).prepare(layout)``: once per corpus;
  * per query - ``environment_from_sums(*prepared.sums(s))`` and ``s + alpha * s_env``: what
                ``FragRelIndex.scores`` does after the base scorer;
  * dense     - ``context_weights`` (prepare) and ``relation_aware_scores(s, W, alpha)`` (per query) where the
                N x N matrix fits (``--dense-max``), with the ratio and the largest score difference.
Then ``FragRelIndex.scores``/``retrieve`` end to end at the largest N with a precomputed-scores callable
scorer, and the wrapper overhead: core ``rerank`` on a pool of 50 base-scored candidates vs the base alone.

    python benchmarks/bench_speed.py            # ~3-5 minutes on 2 shared cores
    python benchmarks/bench_speed.py --quick    # < 1 minute
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy
from _common import RESULTS_DIR, write_json

from fragrel_integrations import BM25Scorer, ContextRelation, Fragment, FragmentLayout, FragRelIndex, rerank
from fragrel_integrations.core.relation_aware import environment_from_sums, relation_aware_scores
from fragrel_integrations.core.relations import context_weights
from fragrel_integrations.core.selection import select

__all__ = ["main"]


def timed(fn: Callable[[], object], repeats: int, warmup: bool = True) -> dict[str, float]:
    """Median and min wall time (seconds) of ``repeats`` calls (after one warm-up call unless ``warmup=False``)."""
    if warmup:
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(times), "min_s": min(times), "repeats": repeats}


def make_layout(n: int, kind: str, rng: np.random.Generator) -> FragmentLayout:
    """``many``: documents of 100-500 fragments (shuffled order, as in a real index); ``one``: one document."""
    if kind == "one":
        return FragmentLayout(np.zeros(n, np.int64), np.arange(n, dtype=np.int64))
    sizes = []
    while sum(sizes) < n:
        sizes.append(int(rng.integers(100, 501)))
    sizes[-1] -= sum(sizes) - n
    codes = np.repeat(np.arange(len(sizes)), sizes)
    positions = np.concatenate([np.arange(s) for s in sizes])
    perm = rng.permutation(n)  # fragments need not be stored in document order
    return FragmentLayout(codes[perm], positions[perm])


def bench_sizes(sizes: list[int], w: float, alpha: float, repeats: int, dense_max: int, seed: int) -> list[dict]:
    rows = []
    for n in sizes:
        for kind in ("many", "one"):
            rng = np.random.default_rng(seed)
            layout = make_layout(n, kind, rng)
            s = rng.random(n)
            rel = ContextRelation(w)
            prep_reps = max(3, repeats // 2) if n >= 10**6 else repeats
            prepare = timed(lambda rel=rel, layout=layout: rel.prepare(layout), prep_reps)
            prepared = rel.prepare(layout)

            def query(prepared=prepared, s=s):
                return s + alpha * environment_from_sums(*prepared.sums(s))

            row = {
                "n": n,
                "layout": kind,
                "n_docs": int(np.unique(layout.doc_codes).size),
                "prepare": prepare,
                "query": timed(query, repeats),
            }
            if n <= dense_max:
                dense_prepare = timed(lambda layout=layout: context_weights(layout, w), 3, warmup=n < 5000)
                weights = context_weights(layout, w)
                dense_query = timed(lambda weights=weights, s=s: relation_aware_scores(s, weights, alpha), repeats)
                diff = float(np.max(np.abs(relation_aware_scores(s, weights, alpha) - query())))
                del weights
                row["dense"] = {
                    "prepare": dense_prepare,
                    "query": dense_query,
                    "query_ratio": dense_query["median_s"] / row["query"]["median_s"],
                    "prepare_ratio": dense_prepare["median_s"] / prepare["median_s"],
                    "max_abs_diff": diff,
                }
            rows.append(row)
            dense_txt = (
                f"  dense {row['dense']['query']['median_s'] * 1e3:9.2f} ms  x{row['dense']['query_ratio']:.0f}"
                if "dense" in row
                else ""
            )
            print(
                f"N={n:>8} {kind:4}  prepare {prepare['median_s'] * 1e3:9.2f} ms  "
                f"query {row['query']['median_s'] * 1e3:8.2f} ms{dense_txt}",
                flush=True,
            )
    return rows


def bench_index(n: int, w: float, alpha: float, repeats: int, seed: int) -> dict:
    """``FragRelIndex`` end to end with a callable scorer returning precomputed scores (many-documents layout)."""
    rng = np.random.default_rng(seed)
    layout = make_layout(n, "many", rng)
    t0 = time.perf_counter()
    pairs = zip(layout.doc_codes.tolist(), layout.positions.tolist(), strict=True)
    fragments = [Fragment("x", str(d), int(p)) for d, p in pairs]
    make_fragments = time.perf_counter() - t0
    s = rng.random(n)
    t0 = time.perf_counter()
    index = FragRelIndex(fragments, scorer=lambda q: s, relation=ContextRelation(w), alpha=alpha, show_progress=False)
    build = time.perf_counter() - t0
    out = {
        "n": n,
        "make_fragments_s": make_fragments,
        "build_index_s": build,
        "scores": timed(lambda: index.scores("q"), repeats),
        "retrieve_k10": timed(lambda: index.retrieve("q", k=10), repeats),
    }
    print(
        f"FragRelIndex N={n}: build {build:.2f} s, scores {out['scores']['median_s'] * 1e3:.1f} ms, "
        f"retrieve(k=10) {out['retrieve_k10']['median_s'] * 1e3:.1f} ms",
        flush=True,
    )
    return out


def bench_rerank(n_corpus: int, pool: int, w: float, alpha: float, repeats: int, seed: int) -> dict:
    """Base retriever (BM25 over a synthetic corpus, top ``pool``) alone vs followed by core ``rerank``."""
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(5000)]
    words = rng.zipf(1.3, size=(n_corpus, 40)) % len(vocab)
    texts = [" ".join(vocab[j] for j in row) for row in words]
    fragments = [Fragment(t, f"d{i // 200}", i % 200) for i, t in enumerate(texts)]
    bm25 = BM25Scorer(texts)
    query = " ".join(vocab[j] for j in words[0, :6])
    relation = ContextRelation(w)

    def base():
        s = bm25(query)
        top = select(s, k=pool)
        return [fragments[i] for i in top], s[top].tolist()

    def base_then_rerank():
        cands, scores = base()
        return rerank(query, cands, relation=relation, alpha=alpha, k=10, scores=scores)

    cands, scores = base()
    only = timed(lambda: rerank(query, cands, relation=relation, alpha=alpha, k=10, scores=scores), repeats * 5)
    b = timed(base, repeats * 5)
    br = timed(base_then_rerank, repeats * 5)
    out = {
        "corpus": n_corpus,
        "pool": pool,
        "base": b,
        "base_plus_rerank": br,
        "rerank_only": only,
        "added_ms": (br["median_s"] - b["median_s"]) * 1e3,
    }
    print(
        f"rerank pool={pool}: base {b['median_s'] * 1e3:.2f} ms, base+rerank {br['median_s'] * 1e3:.2f} ms, "
        f"rerank alone {only['median_s'] * 1e3:.3f} ms",
        flush=True,
    )
    return out


def to_markdown(res: dict) -> str:
    ms = lambda t: f"{t['median_s'] * 1e3:.2f}"  # noqa: E731
    lines = [
        "# FragRel speed (context relation)",
        "",
        f"Machine: {res['machine']['cpus']} CPUs ({res['machine']['processor'] or 'unknown'}), shared and noisy; "
        f"load average {res['machine']['load_before']} before, {res['machine']['load_after']} after. "
        f"numpy {res['machine']['numpy']}, scipy {res['machine']['scipy']}. "
        f"w_rel {res['w_rel']}, alpha {res['alpha']}. Times are medians (ms) of repeated runs.",
        "",
        "| N | layout | docs | prepare (ms, once) | per query (ms) | dense prepare (ms) | dense per query (ms) "
        "| dense / O(N) per query | max abs diff |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in res["sizes"]:
        d = r.get("dense")
        dense = (
            f"{ms(d['prepare'])} | {ms(d['query'])} | {d['query_ratio']:.1f}x | {d['max_abs_diff']:.1e}"
            if d
            else "- | - | - | -"
        )
        lines.append(
            f"| {r['n']:.0e} | {r['layout']} | {r['n_docs']} | {ms(r['prepare'])} | {ms(r['query'])} | {dense} |"
        )
    ix = res["index"]
    rr = res["rerank"]
    target = res["targets"]
    lines += [
        "",
        f"`FragRelIndex` end to end at N = {ix['n']:.0e} (callable scorer returning precomputed scores): "
        f"building the index {ix['build_index_s']:.2f} s (plus {ix['make_fragments_s']:.2f} s to create the "
        f"Fragment objects), `scores(query)` {ms(ix['scores'])} ms, "
        f"`retrieve(query, k=10)` {ms(ix['retrieve_k10'])} ms.",
        "",
        f"Wrapper overhead: BM25 over {rr['corpus']} fragments returning a pool of {rr['pool']}: base alone "
        f"{ms(rr['base'])} ms, base + core `rerank` {ms(rr['base_plus_rerank'])} ms (added {rr['added_ms']:.2f} ms; "
        f"`rerank` alone {ms(rr['rerank_only'])} ms).",
        "",
        f"Targets: context re-scoring per query at N = 1e6 < 200 ms: **{target['query_1e6']}**; "
        f"rerank adds < 20 ms: **{target['rerank']}**.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=lambda x: [int(float(v)) for v in x.split(",")], default=None)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--dense-max", type=int, default=10_000, help="largest N for the dense N x N formula")
    p.add_argument("--w-rel", type=float, default=0.3)
    p.add_argument("--alpha", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="N up to 1e5, dense only at 1e3, 3 repeats")
    p.add_argument("--out", default=str(RESULTS_DIR), help="folder for speed.json / speed.md")
    a = p.parse_args(argv)
    sizes = a.sizes or ([10**3, 10**4, 10**5] if a.quick else [10**3, 10**4, 10**5, 10**6])
    repeats = 3 if a.quick else a.repeats
    dense_max = min(a.dense_max, 1000) if a.quick else a.dense_max
    machine = {
        "cpus": os.cpu_count(),
        "processor": platform.processor(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "load_before": [round(x, 2) for x in os.getloadavg()],
    }
    t0 = time.perf_counter()
    res = {"w_rel": a.w_rel, "alpha": a.alpha, "machine": machine}
    res["sizes"] = bench_sizes(sizes, a.w_rel, a.alpha, repeats, dense_max, a.seed)
    res["index"] = bench_index(max(sizes), a.w_rel, a.alpha, repeats, a.seed)
    res["rerank"] = bench_rerank(10_000, 50, a.w_rel, a.alpha, repeats, a.seed)
    machine["load_after"] = [round(x, 2) for x in os.getloadavg()]
    res["total_s"] = time.perf_counter() - t0
    q6 = [r for r in res["sizes"] if r["n"] == 10**6]
    res["targets"] = {
        "query_1e6": (
            "met" if q6 and max(r["query"]["median_s"] for r in q6) < 0.2 else ("not met" if q6 else "not measured")
        ),
        "rerank": "met" if res["rerank"]["added_ms"] < 20 else "not met",
    }
    stem = "speed_quick" if a.quick else "speed"
    out = Path(a.out)
    write_json(out / f"{stem}.json", res)
    (out / f"{stem}.md").write_text(to_markdown(res))
    print(f"wrote {out / stem}.json/.md in {res['total_s']:.0f} s")
    return res


if __name__ == "__main__":
    main()
