"""Triplet memory benchmark: fuzzy-lookup latency and recall of LSH against an exact brute-force cosine scan
at 1e4, 1e5 and 1e6 stored terms, and write throughput, on SQLite and PostgreSQL.

Term vectors are SYNTHETIC (random unit vectors, dimension 384 like all-MiniLM-L6-v2): an embedder that looks
each term up in a pre-drawn matrix stands in for the model, so the scale test measures the index, not the
model. Queries are stored vectors rotated to a chosen cosine (0.95, 0.85, 0.75) from their source; the ground
truth is the exact scan's best stored term with cosine >= the store's threshold (0.7). Recall = fraction of
queries where the store's fuzzy lookup returns that same term.

Compared per size:
* ``lsh-db``   - the store's fuzzy path: one indexed SQL query on band keys + exact re-check of candidates;
* ``scan-db``  - exact scan that reads every stored vector from the database (what a DB without an index does);
* ``scan-ram`` - exact scan over an in-memory float32 matrix (numpy; the fastest possible exact baseline);
* ``lsh-ram``  - the same LSH in memory (:class:`LSHIndex`), to separate algorithm from database cost.

Run: ``python benchmarks/bench_triplets.py`` (default: all sizes on SQLite, PostgreSQL up to 1e5, ~10 min on
2 cores); ``--sizes 10000 --queries 50`` for a quick look; ``--pg-sizes`` chooses the PostgreSQL sizes.
Writes ``benchmarks/results/triplets.md`` and ``triplets.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fragrel_integrations.core.triplets import LSHIndex, RandomHyperplaneLSH, TripletStore, TripletWrite
from fragrel_integrations.core.triplets.pg_server import TemporaryPostgres, find_pg_bin
from fragrel_integrations.core.triplets.store import _bytes_vec
from fragrel_integrations.testing import HashingEmbedder

RESULTS = Path(__file__).resolve().parent / "results"
DIM = 384
COSINES = (0.95, 0.85, 0.75)


class MatrixEmbedder:
    """``"t<i>"`` -> row ``i`` of a fixed matrix; any other text -> a fixed unit vector (relations, objects)."""

    def __init__(self, vectors: np.ndarray, extra: dict[str, np.ndarray] | None = None) -> None:
        self.vectors = vectors
        self.extra = extra or {}
        rng = np.random.default_rng(123)
        self.other = rng.standard_normal(vectors.shape[1]).astype(np.float32)

    def _one(self, text: str) -> np.ndarray:
        if text in self.extra:
            return self.extra[text]
        if text.startswith("t") and text[1:].isdigit():
            return self.vectors[int(text[1:])]
        return self.other

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self._one(t) for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        return self._one(text)


def unit_rows(n: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = np.empty((n, dim), dtype=np.float32)
    for s in range(0, n, 100_000):
        block = rng.standard_normal((min(100_000, n - s), dim)).astype(np.float32)
        out[s : s + block.shape[0]] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def rotate_to(rng: np.random.Generator, v: np.ndarray, cos: float) -> np.ndarray:
    r = rng.standard_normal(v.shape[0]).astype(np.float32)
    r -= (r @ v) * v
    r /= np.linalg.norm(r)
    return (cos * v + np.sqrt(1 - cos**2) * r).astype(np.float32)


def make_queries(vectors: np.ndarray, n_queries: int, seed: int) -> list[tuple[float, np.ndarray]]:
    rng = np.random.default_rng(seed)
    src = rng.choice(vectors.shape[0], size=n_queries, replace=False)
    return [
        (COSINES[i % len(COSINES)], rotate_to(rng, vectors[j], COSINES[i % len(COSINES)])) for i, j in enumerate(src)
    ]


def fill(store: TripletStore, n: int, batch: int = 5000) -> float:
    start = time.perf_counter()
    for s in range(0, n, batch):
        store.write_many([TripletWrite((f"t{i}", "rel", "obj")) for i in range(s, min(n, s + batch))])
    store.optimize()  # planner statistics after the bulk load
    return time.perf_counter() - start


def db_lookup(store: TripletStore, qv: np.ndarray) -> tuple[int | None, float]:
    """The store's fuzzy path for field t1 (what ``read(t1=...)`` does after the exact miss)."""
    scope, params = store._scope((), False, None)
    t = time.perf_counter()
    with store.backend.read() as cur:
        cands = store._lsh_candidates(cur, qv, ("t1",), scope, params)
        best = store._recheck(cur, qv, cands, store.threshold, 1)
    dt = time.perf_counter() - t
    return (int(best[0][1][1:]) if best else None), dt


def db_scan(store: TripletStore, qv: np.ndarray) -> tuple[int | None, float]:
    t = time.perf_counter()
    best, best_sim = None, store.threshold
    with store.backend.read() as cur:
        rows = cur.execute(
            "SELECT t.text, t.vector FROM terms t WHERE EXISTS (SELECT 1 FROM triplets r WHERE r.t1_id = t.id)"
        ).fetchall()
    texts = [r[0] for r in rows]
    mat = np.stack([_bytes_vec(r[1]) for r in rows])
    sims = mat @ qv
    i = int(np.argmax(sims))
    if sims[i] >= best_sim:
        best = int(texts[i][1:])
    return best, time.perf_counter() - t


def ram_scan(vectors: np.ndarray, qv: np.ndarray, threshold: float) -> tuple[int | None, float]:
    t = time.perf_counter()
    sims = vectors @ qv
    i = int(np.argmax(sims))
    return (i if sims[i] >= threshold else None), time.perf_counter() - t


def pct(xs: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(xs) * 1000, p))


def lookup_bench(
    backend_name: str,
    make_store,
    n: int,
    n_queries: int,
    scan_db_queries: int,
    settings: dict,
) -> dict:
    vectors = unit_rows(n, DIM, seed=n)
    store = make_store(MatrixEmbedder(vectors), settings)
    fill_s = fill(store, n)
    queries = make_queries(vectors, n_queries, seed=1)
    truth = [ram_scan(vectors, q, store.threshold)[0] for _, q in queries]
    lsh = RandomHyperplaneLSH(
        DIM, probe_radius=store.probe_radius, **{k: settings[k] for k in ("bits", "tables", "seed")}
    )
    index = LSHIndex(lsh)
    index.add(vectors)
    out: dict = {"backend": backend_name, "n": n, "fill_s": fill_s, "queries": n_queries}
    for name in ("lsh-db", "scan-ram", "lsh-ram", "scan-db"):
        times, hits, by_cos = [], 0, {c: [0, 0] for c in COSINES}
        qs = queries if name != "scan-db" else queries[:scan_db_queries]
        if not qs:
            continue
        for (cos, q), want in zip(qs, truth, strict=False):
            if name == "lsh-db":
                got, dt = db_lookup(store, q)
            elif name == "scan-db":
                got, dt = db_scan(store, q)
            elif name == "scan-ram":
                got, dt = ram_scan(vectors, q, store.threshold)
            else:
                t = time.perf_counter()
                res = index.query(q, threshold=store.threshold, k=1, max_candidates=store.max_candidates)
                dt = time.perf_counter() - t
                got = res[0][0] if res else None
            times.append(dt)
            ok = got == want
            hits += ok
            by_cos[cos][0] += ok
            by_cos[cos][1] += 1
        out[name] = {
            "queries": len(qs),
            "p50_ms": pct(times, 50),
            "p95_ms": pct(times, 95),
            "mean_ms": statistics.fmean(times) * 1000,
            "recall": hits / len(qs),
            "recall_by_cos": {str(c): h / max(t, 1) for c, (h, t) in by_cos.items()},
        }
    cands = [index.candidates(q, store.max_candidates).size for _, q in queries[:50]]
    out["mean_candidates"] = float(np.mean(cands))
    store.close()
    return out


def write_bench(backend_name: str, make_store, n: int, batch: int) -> dict:
    store = make_store(HashingEmbedder(dim=DIM), {})
    items = [TripletWrite((f"subject {i}", f"relation {i % 50}", f"object {i}")) for i in range(n)]
    t = time.perf_counter()
    for s in range(0, n, batch):
        store.write_many(items[s : s + batch])
    dt = time.perf_counter() - t
    t2 = time.perf_counter()
    store.write_many(items[:batch])  # rewriting existing triplets: idempotent, no new rows
    dt2 = time.perf_counter() - t2
    assert store.count() == n
    store.close()
    return {"backend": backend_name, "n": n, "batch": batch, "seconds": dt, "triplets_per_s": n / dt,
            "idempotent_rewrite_per_s": batch / dt2}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--pg-sizes", type=int, nargs="*", default=[10_000, 100_000])
    ap.add_argument("--queries", type=int, default=120)
    ap.add_argument("--scan-db-queries", type=int, default=20, help="DB-scan queries per size (slow at 1e6)")
    ap.add_argument("--bits", type=int, default=None)
    ap.add_argument("--tables", type=int, default=None)
    ap.add_argument("--probe-radius", type=int, default=1)
    ap.add_argument("--write-n", type=int, default=2000)
    ap.add_argument("--out", type=Path, default=RESULTS / "triplets.md")
    ap.add_argument("--render", type=Path, default=None, help="re-render --out from a saved results .json, no run")
    args = ap.parse_args(argv)
    if args.render is not None:
        saved = json.loads(args.render.read_text())
        args.out.write_text(render(saved["meta"], saved["lookups"], saved["writes"]))
        print(f"wrote {args.out}")
        return
    t_all = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="bench-triplets-"))
    from fragrel_integrations.core.triplets.store import DEFAULT_BITS, DEFAULT_TABLES

    settings = {
        "bits": args.bits or DEFAULT_BITS,
        "tables": args.tables or DEFAULT_TABLES,
        "seed": 0,
        "probe_radius": args.probe_radius,
    }
    counter = iter(range(10**6))

    def sqlite_store(embedder, s):
        path = tmp / f"s{next(counter)}.db"
        return TripletStore(path, embedder=embedder, **s)

    pg = None
    if find_pg_bin() is not None and (args.pg_sizes or args.write_n):  # else: PostgreSQL rows are left out
        pg = TemporaryPostgres(fsync=True).start()

    def pg_store(embedder, s):
        from fragrel_integrations.core.triplets import PostgresBackend

        return TripletStore(PostgresBackend(pg.url, schema=f"b{next(counter)}"), embedder=embedder, **s)

    lookups, writes = [], []
    try:
        for n in args.sizes:
            scan_q = args.scan_db_queries if n <= 100_000 else max(3, args.scan_db_queries // 4)
            r = lookup_bench("sqlite", sqlite_store, n, args.queries, scan_q, settings)
            lookups.append(r)
            print(json.dumps(r), flush=True)
        for n in args.pg_sizes if pg else []:
            r = lookup_bench("postgres", pg_store, n, args.queries, min(args.scan_db_queries, 10), settings)
            lookups.append(r)
            print(json.dumps(r), flush=True)
        for name, maker in [("sqlite", sqlite_store)] + ([("postgres", pg_store)] if pg else []):
            for batch in (1, 100, 1000) if args.write_n else ():
                n = args.write_n if batch > 1 else max(200, args.write_n // 10)
                r = write_bench(name, maker, n, batch)
                writes.append(r)
                print(json.dumps(r), flush=True)
    finally:
        if pg is not None:
            pg.stop()
    total = time.perf_counter() - t_all
    meta = {
        "settings": settings,
        "dim": DIM,
        "threshold": 0.7,
        "max_candidates": 2000,
        "total_s": total,
        "machine": f"{platform.machine()}, {__import__('os').cpu_count()} CPUs",
        "pg": bool(pg),
        "command": "python benchmarks/bench_triplets.py " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps({"meta": meta, "lookups": lookups, "writes": writes}, indent=1))
    args.out.write_text(render(meta, lookups, writes))
    print(f"wrote {args.out} in {total:.0f}s")


def render(meta: dict, lookups: list[dict], writes: list[dict]) -> str:
    s = meta["settings"]
    lines = [
        "# Triplet memory: LSH fuzzy lookup vs exact scan, and write throughput",
        "",
        f"Generated by `{meta.get('command', 'python benchmarks/bench_triplets.py').strip()}` in "
        f"{meta['total_s']:.0f} s on {meta['machine']} (shared).",
        f"LSH: {s['bits']} bits x {s['tables']} tables, seed {s['seed']}, multi-probe radius {s['probe_radius']}; "
        f"threshold {meta['threshold']}; at most {meta['max_candidates']} candidates re-checked.",
        "",
        f"**Vectors are synthetic**: random unit vectors of dimension {meta['dim']} (the size of all-MiniLM-L6-v2), "
        "one per stored term; queries are stored vectors rotated to cosine 0.95 / 0.85 / 0.75 (a third each). "
        "Random vectors are nearly orthogonal to each other, which is kinder to LSH than real embeddings "
        "(whose unrelated terms still have cosine 0.1-0.3), so expect more candidates, and slower lookups, "
        "on real data at the same size.",
        "",
        "Recall = share of queries where the method returns the exact scan's best term (>= threshold).",
        "`lsh-db` is the store's fuzzy path (indexed band-key query + exact re-check); `scan-db` reads every "
        "vector from the database; `scan-ram` is numpy over an in-memory matrix; `lsh-ram` is the same LSH "
        "in memory.",
        "",
        "| backend | stored terms | method | p50 ms | p95 ms | recall | recall @0.95 / 0.85 / 0.75 | "
        "p50 / lsh-db p50 (>1: lsh-db faster) |",
        "|---|---:|---|---:|---:|---:|---|---:|",
    ]
    for r in lookups:
        base = r["lsh-db"]["p50_ms"]
        for name in ("lsh-db", "scan-db", "scan-ram", "lsh-ram"):
            if name not in r:
                continue
            m = r[name]
            rc = " / ".join(f"{m['recall_by_cos'][str(c)]:.2f}" for c in COSINES)
            ratio = "" if name == "lsh-db" else f"{m['p50_ms'] / base:.2g}x"
            lines.append(
                f"| {r['backend']} | {r['n']:,} | {name} ({m['queries']} q) | {m['p50_ms']:.2f} | "
                f"{m['p95_ms']:.2f} | {m['recall']:.3f} | {rc} | {ratio} |"
            )
    lines += ["", "Mean LSH candidates per query (in-memory index): "
              + ", ".join(f"{r['backend']} {r['n']:,}: {r['mean_candidates']:.0f}" for r in lookups), ""]  # fmt: skip
    lines += ["Time to fill each store (write_many, batches of 5000): "
              + ", ".join(f"{r['backend']} {r['n']:,}: {r['fill_s']:.0f} s" for r in lookups), ""]  # fmt: skip
    if not writes:
        return "\n".join(lines) + "\n"
    lines += [
        "## Write throughput",
        "",
        "New triplets with new terms (3 new terms each; HashingEmbedder, so embedding cost is negligible), "
        "committed every `batch` triplets (one transaction per `write_many`). SQLite: WAL, synchronous=FULL. "
        "PostgreSQL 15: local server, fsync on. `rewrite` = writing already-stored triplets again (idempotent).",
        "",
        "| backend | batch | triplets | triplets/s | rewrite triplets/s |",
        "|---|---:|---:|---:|---:|",
    ]
    for w in writes:
        lines.append(
            f"| {w['backend']} | {w['batch']} | {w['n']:,} | {w['triplets_per_s']:.0f} | "
            f"{w['idempotent_rewrite_per_s']:.0f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
