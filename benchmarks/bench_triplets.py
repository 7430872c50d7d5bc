"""Triplet memory benchmark: fuzzy-lookup latency and recall through the public ``TripletStore.read`` (the
default exact term index, and the faiss one) against a bare numpy scan, on embedding-like vectors, at 1e4 and 1e5
stored terms on SQLite and PostgreSQL, the term index alone at 1e6; write throughput; open time (the index is
built from the stored embeddings); and how soon a term written through one store object is found fuzzily
through another (PostgreSQL).

Term vectors are SYNTHETIC but embedding-like: every vector shares a common direction (unrelated terms have
cosine ~0.25, as real sentence embeddings do) and belongs to one of n/50 topic clusters (cosine ~0.55 inside
a cluster); dimension 384 like all-MiniLM-L6-v2. An embedder that looks each term up in the pre-drawn matrix
stands in for the model, so the test measures the index, not the model. Queries are stored vectors rotated to
cosine 0.95, 0.85 or 0.75; the ground truth is the exact scan's best stored term with cosine >= the store's
threshold (0.7). Recall = share of queries where the method returns that same term.

Compared per size, all in one run:
* ``read/exact``    - ``store.read(t1=query)``, default ``fuzzy_index="exact"`` (an exact scan of the term index);
* ``read/faiss``    - the same call with ``fuzzy_index="faiss"`` (faiss IVF, exact re-check of its candidates);
* ``scan-ram``      - exact scan over an in-memory float32 matrix (one numpy matrix-vector product).

Run: ``python benchmarks/bench_triplets.py`` (~10 min on 2 shared cores); ``--sizes 10000 --queries 50`` for a
quick look; ``--pg-sizes`` chooses the PostgreSQL sizes, ``--index-sizes`` the index-only sizes (no database).
Writes ``benchmarks/results/triplets.md`` and ``triplets.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from fragrel_integrations.core.triplets import PostgresBackend, TripletStore, TripletWrite
from fragrel_integrations.core.triplets.term_index import TermIndex
from fragrel_integrations.testing import HashingEmbedder

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the test helper that runs initdb/pg_ctl
from _pg_server import TemporaryPostgres, find_pg_bin

RESULTS = Path(__file__).resolve().parent / "results"
DIM = 384
COSINES = (0.95, 0.85, 0.75)
THRESHOLD = 0.7


class MatrixEmbedder:
    """``"t<i>"`` -> row ``i`` of a fixed matrix, ``"q<i>"`` -> query ``i``; any other text -> one fixed vector."""

    def __init__(self, vectors: np.ndarray, queries: np.ndarray | None = None) -> None:
        self.vectors = vectors
        self.queries = queries
        self.other = np.random.default_rng(123).standard_normal(vectors.shape[1]).astype(np.float32)

    def _one(self, text: str) -> np.ndarray:
        if text[:1] in "tq" and text[1:].isdigit():
            return (self.vectors if text[0] == "t" else self.queries)[int(text[1:])]
        return self.other

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self._one(t) for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        return self._one(text)


def embedding_like(n: int, dim: int, seed: int) -> np.ndarray:
    """Unit vectors = common direction (0.25 of the energy) + one of n/50 cluster centres (0.3) + noise (0.45)."""
    rng = np.random.default_rng(seed)
    common = rng.standard_normal(dim).astype(np.float32)
    common /= np.linalg.norm(common)
    centres = rng.standard_normal((max(1, n // 50), dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    out = np.empty((n, dim), dtype=np.float32)
    for s in range(0, n, 100_000):
        m = min(100_000, n - s)
        noise = rng.standard_normal((m, dim)).astype(np.float32)
        noise /= np.linalg.norm(noise, axis=1, keepdims=True)
        v = 0.5 * common + np.sqrt(0.3) * centres[rng.integers(0, centres.shape[0], m)] + np.sqrt(0.45) * noise
        out[s : s + m] = v / np.linalg.norm(v, axis=1, keepdims=True)
    return out


def make_queries(
    vectors: np.ndarray, n_queries: int, seed: int, src: np.ndarray | None = None
) -> tuple[np.ndarray, list[float]]:
    """Queries near stored vectors (``src``, default a random sample), at the cosines of ``COSINES`` in turn."""
    rng = np.random.default_rng(seed)
    src = rng.choice(vectors.shape[0], size=n_queries, replace=False) if src is None else src
    cosines = [COSINES[i % len(COSINES)] for i in range(n_queries)]
    out = np.empty((n_queries, vectors.shape[1]), dtype=np.float32)
    for i, (j, cos) in enumerate(zip(src, cosines, strict=True)):
        r = rng.standard_normal(vectors.shape[1]).astype(np.float32)
        r -= (r @ vectors[j]) * vectors[j]
        r /= np.linalg.norm(r)
        out[i] = cos * vectors[j] + np.sqrt(1 - cos**2) * r
    return out, cosines


def ram_scan(vectors: np.ndarray, qv: np.ndarray) -> int | None:
    sims = vectors @ qv
    i = int(np.argmax(sims))
    return i if sims[i] >= THRESHOLD else None


def pct(xs: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(xs) * 1000, p))


def summarise(times: list[float], got: list[int | None], truth: list[int | None], cosines: list[float]) -> dict:
    by_cos = {str(c): [0, 0] for c in COSINES}
    for g, w, c in zip(got, truth, cosines, strict=False):
        by_cos[str(c)][0] += g == w
        by_cos[str(c)][1] += 1
    hits = sum(h for h, _ in by_cos.values())
    return {
        "queries": len(times),
        "p50_ms": pct(times, 50),
        "p95_ms": pct(times, 95),
        "mean_ms": statistics.fmean(times) * 1000,
        "recall": hits / len(times),
        "recall_by_cos": {c: h / max(t, 1) for c, (h, t) in by_cos.items()},
    }


def fill(store: TripletStore, n: int, batch: int = 5000) -> float:
    start = time.perf_counter()
    for s in range(0, n, batch):
        store.write_many([TripletWrite((f"t{i}", "rel", "obj")) for i in range(s, min(n, s + batch))])
    store.optimize()  # planner statistics after the bulk load
    return time.perf_counter() - start


def timed(fn: Callable[[], object]) -> tuple[object, float]:
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def lookup_bench(backend_name: str, open_store: Callable[..., TripletStore], n: int, n_queries: int) -> dict:
    vectors = embedding_like(n, DIM, seed=n)
    queries, cosines = make_queries(vectors, n_queries, seed=1)
    embedder = MatrixEmbedder(vectors, queries)
    store = open_store(embedder, new=True)
    fill_s = fill(store, n)
    out: dict = {"backend": backend_name, "n": n, "fill_s": fill_s, "queries": n_queries}
    store.close()
    # open time: a new store object on the filled database; its first fuzzy read builds the index from the
    # stored embeddings (and, with faiss, trains the lists) and answers the query
    stores = {}
    for kind in ("exact", "faiss"):
        store, open_s = timed(lambda kind=kind: open_store(embedder, new=False, fuzzy_index=kind))
        _, first_s = timed(lambda store=store: store.read(t1="q0"))
        index = store._terms.index
        out[f"open/{kind}"] = {"open_s": open_s, "first_read_s": first_s, "index_mb": index.nbytes / 2**20,
                               "lists": index.lists, "nprobe": index.nprobe}  # fmt: skip
        stores[kind] = store

    scan_times, truth = [], []
    for q in queries:
        best, dt = timed(lambda q=q: ram_scan(vectors, q))
        scan_times.append(dt)
        truth.append(best)
    out["scan-ram"] = summarise(scan_times, truth, truth, cosines)

    def via_read(store: TripletStore, limit: int) -> tuple[list[float], list[int | None]]:
        times, got = [], []
        for i in range(limit):
            rows, dt = timed(lambda i=i: store.read(t1=f"q{i}"))
            times.append(dt)
            got.append(int(rows[0].t1[1:]) if rows else None)
        return times, got

    for kind, store in stores.items():
        times, got = via_read(store, n_queries)
        out[f"read/{kind}"] = summarise(times, got, truth, cosines)
        store.close()
    return out


def index_bench(n: int, n_queries: int) -> dict:
    """The term index alone (no database), both kinds: build, memory, search latency and recall against the
    numpy scan."""
    vectors = embedding_like(n, DIM, seed=n)
    queries, cosines = make_queries(vectors, n_queries, seed=1)
    scan_times, truth = [], []
    for q in queries:
        best, dt = timed(lambda q=q: ram_scan(vectors, q))
        scan_times.append(dt)
        truth.append(best)
    out: dict = {"n": n, "scan-ram": summarise(scan_times, truth, truth, cosines)}
    for kind in ("exact", "faiss"):
        index = TermIndex(DIM, kind=kind)
        _, build_s = timed(lambda index=index: index.add(np.arange(1, n + 1), vectors))
        times, got = [], []
        for q in queries:
            (ids, _), dt = timed(lambda q=q, index=index: index.search(q, THRESHOLD))
            times.append(dt)
            got.append(int(ids[0]) - 1 if ids.size else None)
        sizes = {"build_s": build_s, "index_mb": index.nbytes / 2**20, "lists": index.lists, "nprobe": index.nprobe}
        out[f"index/{kind}"] = {**summarise(times, got, truth, cosines), **sizes}
        del index
    return out


WRITER = """
import sys, time
sys.path.insert(0, sys.argv[4])
import numpy as np
from bench_triplets import DIM, MatrixEmbedder, embedding_like
from fragrel_integrations.core.triplets import PostgresBackend, TripletStore
n, rounds = int(sys.argv[2]), int(sys.argv[3])
store = TripletStore(PostgresBackend(sys.argv[1], schema=sys.argv[5]),
                     embedder=MatrixEmbedder(embedding_like(n + rounds, DIM, seed=7)))
store.read(t1="t0")  # this process's own index is built, so its commits also feed it
print("ready", flush=True)
for line in sys.stdin:
    i = int(line)
    store.write((f"t{i}", "rel", "obj"))
    print(f"{time.time():.6f}", flush=True)  # committed at
"""


def visibility_bench(url: str, schema_of: Callable[..., TripletStore], n: int, rounds: int) -> dict:
    """A writer PROCESS and this process (the reader) on one PostgreSQL schema of ``n`` terms: the writer commits a
    new term and reports when; the reader's very next fuzzy read asks for it. Delay = commit to found."""
    import subprocess

    import bench_triplets  # the writer's class, so both processes record the same embedder identity

    vectors = embedding_like(n + rounds, DIM, seed=7)
    queries, _ = make_queries(vectors, rounds, seed=2, src=np.arange(n, n + rounds))
    embedder = bench_triplets.MatrixEmbedder(vectors, queries)
    reader = schema_of(embedder, new=True)
    fill(reader, n)
    reader.read(t1="q0")  # build the reader's index
    schema = reader.backend.schema
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, url, str(n), str(rounds), str(Path(__file__).resolve().parent), schema],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    found, delay, catch_up, steady = 0, [], [], []
    try:
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the writer process did not start")
        for i in range(rounds):
            proc.stdin.write(f"{n + i}\n")
            proc.stdin.flush()
            committed = float(proc.stdout.readline())
            rows, dt = timed(lambda i=i: reader.read(t1=f"q{i}"))
            delay.append(time.time() - committed)
            found += bool(rows) and rows[0].t1 == f"t{n + i}"
            catch_up.append(dt)
            _, dt = timed(lambda i=i: reader.read(t1=f"q{i}"))
            steady.append(dt)
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    reader.close()
    return {
        "n": n,
        "rounds": rounds,
        "processes": 2,
        "found_on_first_read": found / rounds,
        "delay_p50_ms": pct(delay, 50),
        "delay_p95_ms": pct(delay, 95),
        "catch_up_p50_ms": pct(catch_up, 50),
        "catch_up_p95_ms": pct(catch_up, 95),
        "steady_p50_ms": pct(steady, 50),
    }


def write_bench(backend_name: str, open_store: Callable[..., TripletStore], n: int, batch: int) -> dict:
    store = open_store(HashingEmbedder(dim=DIM), new=True)
    store.write(("warm", "up", "index"))
    store.read(t1="warm up")  # the index exists, so every commit below also feeds it
    items = [TripletWrite((f"subject {i}", f"relation {i % 50}", f"object {i}")) for i in range(n)]
    t = time.perf_counter()
    for s in range(0, n, batch):
        store.write_many(items[s : s + batch])
    dt = time.perf_counter() - t
    t2 = time.perf_counter()
    store.write_many(items[:batch])  # rewriting existing triplets: idempotent, no new rows
    dt2 = time.perf_counter() - t2
    if store.count() != n + 1 or len(store._terms.index) != store.term_count():
        raise RuntimeError("write benchmark lost or duplicated something")
    store.close()
    return {"backend": backend_name, "n": n, "batch": batch, "seconds": dt, "triplets_per_s": n / dt,
            "idempotent_rewrite_per_s": batch / dt2}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    ap.add_argument("--pg-sizes", type=int, nargs="*", default=[10_000, 100_000])
    ap.add_argument("--index-sizes", type=int, nargs="*", default=[1_000_000])
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--write-n", type=int, default=2000)
    ap.add_argument("--out", type=Path, default=RESULTS / "triplets.md")
    ap.add_argument("--render", type=Path, default=None, help="re-render --out from a saved results .json, no run")
    args = ap.parse_args(argv)
    if args.render is not None:
        saved = json.loads(args.render.read_text())
        args.out.write_text(render(saved))
        print(f"wrote {args.out}")
        return
    t_all = time.perf_counter()
    load_start = os.getloadavg()[0]
    tmp = Path(tempfile.mkdtemp(prefix="bench-triplets-"))
    counter = iter(range(10**6))
    names: dict[str, str] = {}

    def sqlite_store(embedder, *, new: bool, fuzzy_index: str = "exact") -> TripletStore:
        if new:
            names["sqlite"] = str(tmp / f"s{next(counter)}.db")
        return TripletStore(names["sqlite"], embedder=embedder, fuzzy_index=fuzzy_index)

    pg = None
    if find_pg_bin() is not None and (args.pg_sizes or args.write_n):  # else: PostgreSQL rows are left out
        pg = TemporaryPostgres(fsync=True).start()

    def pg_store(embedder, *, new: bool, fuzzy_index: str = "exact") -> TripletStore:
        if new:
            names["pg"] = f"b{next(counter)}"
        return TripletStore(PostgresBackend(pg.url, schema=names["pg"]), embedder=embedder, fuzzy_index=fuzzy_index)

    res: dict = {"lookups": [], "index": [], "visibility": [], "writes": []}
    try:
        for n in args.index_sizes:
            res["index"].append(index_bench(n, args.queries))
            print(json.dumps(res["index"][-1]), flush=True)
        for name, maker, sizes in [("sqlite", sqlite_store, args.sizes)] + (
            [("postgres", pg_store, args.pg_sizes)] if pg else []
        ):
            for n in sizes:
                res["lookups"].append(lookup_bench(name, maker, n, args.queries))
                print(json.dumps(res["lookups"][-1]), flush=True)
        if pg:
            res["visibility"].append(visibility_bench(pg.url, pg_store, 10_000, 50))
            print(json.dumps(res["visibility"][-1]), flush=True)
        for name, maker in [("sqlite", sqlite_store)] + ([("postgres", pg_store)] if pg else []):
            for batch in (1, 100, 1000) if args.write_n else ():
                n = args.write_n if batch > 1 else max(200, args.write_n // 10)
                res["writes"].append(write_bench(name, maker, n, batch))
                print(json.dumps(res["writes"][-1]), flush=True)
    finally:
        if pg is not None:
            pg.stop()
    res["meta"] = {
        "dim": DIM,
        "threshold": THRESHOLD,
        "total_s": time.perf_counter() - t_all,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"),
        "loadavg": [load_start, os.getloadavg()[0]],
        "command": "python benchmarks/bench_triplets.py " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(res, indent=1))
    args.out.write_text(render(res))
    print(f"wrote {args.out} in {res['meta']['total_s']:.0f}s")


def _row(m: dict) -> str:
    rc = " / ".join(f"{m['recall_by_cos'][str(c)]:.2f}" for c in COSINES)
    return f"{m['p50_ms']:.2f} | {m['p95_ms']:.2f} | {m['recall']:.3f} | {rc}"


def render(res: dict) -> str:
    meta = res["meta"]
    lines = [
        "# Triplet memory: fuzzy lookup through `read` (exact term index vs faiss vs a bare numpy scan)",
        "",
        f"Generated by `{meta['command'].strip()}` in {meta['total_s']:.0f} s on {meta['machine']} (shared with "
        f"other work; OPENBLAS_NUM_THREADS={meta['blas_threads']}). Threshold {meta['threshold']}.",
        *(
            [f"1-minute load average at start / end: {meta['loadavg'][0]:.1f} / {meta['loadavg'][1]:.1f}."]
            if "loadavg" in meta
            else []
        ),
        *([meta["note"]] if meta.get("note") else []),
        "",
        *(["## Summary", "", meta["summary"], ""] if meta.get("summary") else []),
        f"**Vectors are synthetic but embedding-like** (dimension {meta['dim']}): a shared direction makes "
        "unrelated terms cosine ~0.25 apart, as real sentence embeddings are, and terms come in clusters of ~50 "
        "(cosine ~0.55 inside). Queries are stored vectors rotated to cosine 0.95 / 0.85 / 0.75 (a third each). "
        "Recall = share of queries where the method returns the exact scan's best term (>= threshold).",
        "",
        "`read/exact` = `store.read(t1=query)` with the default term index (an exact scan); `read/faiss` = the "
        'same call with `fuzzy_index="faiss"` (faiss IVF with 8-bit codes from 20,000 terms on, exact re-check of '
        "its candidates); `scan-ram` = one numpy matrix-vector product over all term vectors (exact). Both `read` "
        "columns include the exact-match query, the scope re-check in the database and building the records. "
        "`index/...` rows: the term index alone, no database.",
        "",
        "| backend | stored terms | method | p50 ms | p95 ms | recall | recall @0.95 / 0.85 / 0.75 | scan p50 / p50 |",
        "|---|---:|---|---:|---:|---:|---|---:|",
    ]
    for r in res["lookups"]:
        scan = r["scan-ram"]["p50_ms"]
        for name in ("read/exact", "read/faiss", "scan-ram"):
            m = r[name]
            lines.append(
                f"| {r['backend']} | {r['n']:,} | {name} ({m['queries']} q) | {_row(m)} | {scan / m['p50_ms']:.2g}x |"
            )
    for r in res["index"]:
        for name in ("index/exact", "index/faiss", "scan-ram"):
            m = r[name]
            lines.append(
                f"| (no database) | {r['n']:,} | {name} ({m['queries']} q) | {_row(m)} | "
                f"{r['scan-ram']['p50_ms'] / m['p50_ms']:.2g}x |"
            )
    lines += ["", "Open time and index size. `open s`: the constructor; `first fuzzy read s`: a new store object's "
              "first fuzzy `read` on the filled database, which reads every stored term embedding, builds the "
              "index (with faiss: trains its lists) and answers the query. `build s` (no database): adding all "
              "vectors to a new index.", "",
              "| backend | stored terms | index | fill s | open s | first fuzzy read s / build s | index MB | "
              "faiss lists (probed) |",
              "|---|---:|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in res["lookups"]:
        for kind in ("exact", "faiss"):
            o = r[f"open/{kind}"]
            lines.append(
                f"| {r['backend']} | {r['n']:,} | {kind} | {r['fill_s']:.0f} | {o['open_s']:.2f} | "
                f"{o['first_read_s']:.2f} | {o['index_mb']:.0f} | {o['lists']} ({o['nprobe']}) |"
            )
    for r in res["index"]:
        for kind in ("exact", "faiss"):
            o = r[f"index/{kind}"]
            lines.append(
                f"| (no database) | {r['n']:,} | {kind} | | | {o['build_s']:.1f} | {o['index_mb']:.0f} | "
                f"{o['lists']} ({o['nprobe']}) |"
            )
    for v in res["visibility"]:
        lines += [
            "",
            "## Cross-process visibility (PostgreSQL)",
            "",
            *(
                [
                    f"Two processes, each with its own connection and term index, on one schema of {v['n']:,} terms. "
                    f"{v['rounds']} rounds: the writer process commits a new term and reports the time; this process's "
                    f"next fuzzy read asks for it. Found on that first read: {v['found_on_first_read']:.0%}. Delay "
                    f"from the writer's commit to the reader holding the result: p50 {v['delay_p50_ms']:.2f} ms, p95 "
                    f"{v['delay_p95_ms']:.2f} ms (pipe round trip included). That read (which also reads the new "
                    f"term from the server) p50 {v['catch_up_p50_ms']:.2f} ms, p95 {v['catch_up_p95_ms']:.2f} ms; "
                    f"the same read again p50 {v['steady_p50_ms']:.2f} ms.",
                ]
                if v.get("processes") == 2
                else [
                    f"Two store objects on one schema of {v['n']:,} terms: found on the first read "
                    f"{v['found_on_first_read']:.0%}, that read p50 {v['catch_up_p50_ms']:.2f} ms."
                ]
            ),
        ]
    if res["writes"]:
        lines += [
            "",
            "## Write throughput",
            "",
            "New triplets with new terms (3 new terms each; HashingEmbedder, so embedding cost is negligible), "
            "committed every `batch` triplets (one transaction per `write_many`); the term index is built, so each "
            "commit also feeds it. SQLite: WAL, "
            "synchronous=FULL. PostgreSQL 15: local server, fsync on. `rewrite` = writing already-stored "
            "triplets again (idempotent).",
            "",
            "| backend | batch | triplets | triplets/s | rewrite triplets/s |",
            "|---|---:|---:|---:|---:|",
        ]
        for w in res["writes"]:
            lines.append(
                f"| {w['backend']} | {w['batch']} | {w['n']:,} | {w['triplets_per_s']:.0f} | "
                f"{w['idempotent_rewrite_per_s']:.0f} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
