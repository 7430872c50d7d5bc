"""SCM memory (Wang et al.): recall of its retrieval path on LoCoMo and MTBench+, and its latency per turn.

Protocol
--------
*Quality.* Every turn of a conversation is written into one ``SelfControlledMemory`` stream (SQLite, in memory)
with ``record(turn, "")``: one LoCoMo turn (``speaker: text`` plus the image caption, as in ``bench_quality.py``)
or one MTBench+ human turn = one interaction, so the stored item text is ``User: <turn>\\nAssistant: `` and its
vector is the embedding of that text (all-MiniLM-L6-v2 through the cached embedder of ``_common.py``). Then each
question is asked with ``prepare(question)``:

* the controller is **not asked** (``activation=False``, i.e. treated as always answering "yes, memory is
  needed") and there are **no summaries** (``summarize=False``, the full turn text is embedded): the embedded
  135M model is far too slow for thousands of turns on 2 CPUs. ``--controller-sample`` measures the controller's
  yes-rate with the embedded LLM on a small sample separately;
* what SCM shows = the flash turn (the last stored turn, always) + the ``k`` activated turns (top-k of the other
  turns by the memory's own scoring, re-ordered by time), i.e. k + 1 turns; *SCM (k-1) + flash* is the same with
  ``k - 1`` activated turns, so it shows exactly k turns like plain top-k;
* SCM is run with each of its scorers: dense (cosine of the stored vectors, the paper's choice), BM25 (over the
  candidate turns' texts, rebuilt per question, the flash turn excluded) and hybrid (0.5 min-max BM25 + 0.5
  min-max dense). Plain top-k over all stored turns is given for the same three scores;
* SCM + FragRel: ``relation=ContextRelation(w_rel)`` and ``alpha`` of the memory: (0.8, 0.5), the paper's chat
  setting, and (0.3, 1.0), the dialogue default tuned in ``bench_quality.py``; plain dense + FragRel (0.3, 1.0)
  over all turns is the matching plain row.

Recall@k = share of a question's gold turns (LoCoMo evidence turns; MTBench+ turns of the topics the probe refers
to) among the turns shown. Differences are to plain dense top-k at the same k, with paired-bootstrap 95% CIs.
Default parts are the dev parts of DESIGN.md (LoCoMo conversations 0-4, MTBench+ first half); ``--split all``
adds the held-out parts (LoCoMo 5-9, MTBench+ second half), reported separately.

*Latency.* A stream pre-filled with N turns (1e3, 1e4; HashingEmbedder vectors of dimension 384, so no model
time is included), then per turn ``prepare(question)`` + ``record(question, reply)`` with k = 5, for a SQLite
stream in memory and in a file (``synchronous=FULL``), with and without FragRel; next to plain top-k on an
in-memory numpy matrix (embed the query, cosine, top-k, append the new turn's vector) in the same run.

Usage::

    python benchmarks/bench_scm.py                       # dev parts (a few minutes once embeddings are cached)
    python benchmarks/bench_scm.py --split all           # dev and held-out parts: 8 min cold on 2 shared CPUs
    python benchmarks/bench_scm.py --controller-sample 0 # skip the embedded-LLM controller sample
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from _common import (
    RESULTS_DIR,
    CachedEmbedder,
    Dataset,
    default_data_dir,
    load_locomo,
    load_mtbench,
    paired_bootstrap,
    recall_at_k,
    write_json,
)

from fragrel_integrations import ContextRelation
from fragrel_integrations.core.scm import MemoryItem, SCMController, SCMStream, SelfControlledMemory
from fragrel_integrations.core.scorers import BM25Scorer, minmax
from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel

__all__ = ["main"]

KS = (3, 5, 10)
BASELINE = "plain dense top-k"
SCM_VARIANTS = {  # name -> (scorer, (w_rel, alpha) of the memory's relation or None)
    "SCM (k + flash)": ("dense", None),
    "SCM + FragRel (0.8, 0.5) (k + flash)": ("dense", (0.8, 0.5)),
    "SCM + FragRel (0.3, 1.0) (k + flash)": ("dense", (0.3, 1.0)),
    "SCM BM25 (k + flash)": ("bm25", None),
    "SCM BM25 + FragRel (0.3, 1.0) (k + flash)": ("bm25", (0.3, 1.0)),
    "SCM hybrid (k + flash)": ("hybrid", None),
    "SCM hybrid + FragRel (0.3, 1.0) (k + flash)": ("hybrid", (0.3, 1.0)),
}
EQUAL = "SCM (k-1) + flash"
PLAIN_FRAGREL = "plain dense + FragRel (0.3, 1.0) top-k"
METHODS = (
    BASELINE,
    "plain BM25 top-k",
    "plain hybrid top-k",
    PLAIN_FRAGREL,
    *SCM_VARIANTS,
    EQUAL,
)
# Self-contained messages (written for this benchmark) that need no memory: the controller should say "no".
NO_MEMORY_MESSAGES = (
    "What is the capital of France?",
    "Hello! How are you today?",
    "Can you explain what photosynthesis is?",
    "Write a haiku about the sea.",
    "How many days are there in a leap year?",
    "Translate 'good morning' into Spanish.",
    "What is 12 times 7?",
    "Give me a tip for sleeping better.",
    "Who wrote Romeo and Juliet?",
    "Thanks, that was helpful. Goodbye!",
)


def _never(messages: object) -> str:
    raise RuntimeError("the SCM controller must not be called here (activation and summaries are off)")


def make_memory(
    stream: SCMStream, embedder: object, relation: tuple[float, float] | None, k: int = 5, scorer: str = "dense"
):
    """A memory on ``stream`` that never asks the controller (activation off = always recall; no summaries)."""
    rel, alpha = (None, 0.5) if relation is None else (ContextRelation(relation[0]), relation[1])
    return SelfControlledMemory(
        ScriptedChatModel(_never),
        stream=stream,
        embedder=embedder,
        k=k,
        relation=rel,
        alpha=alpha,
        scorer=scorer,
        activation=False,
        summarize=False,
    )


def item_text(turn: str) -> str:
    """The text SCM embeds for a turn written with an empty reply and no summary."""
    return MemoryItem("s", 0, turn, "").text


def shown_turns(memory: SelfControlledMemory, question: str, session: str, ks: Sequence[int]) -> dict[int, set[int]]:
    """Turns the memory shows for each k in ``ks``, from one ``prepare`` with the largest k: the memory's top-k is
    a stable sort by score, so the top k' < k are the k' best recalled turns (ties to the earlier turn)."""
    memory.k = max(ks)
    ctx = memory.prepare(question, session_id=session)
    ranked = sorted(ctx.memories, key=lambda m: (-m.score, m.item.index))
    flash = set() if ctx.flash is None else {ctx.flash.index}
    return {k: {m.item.index for m in ranked[:k]} | flash for k in ks}


# --------------------------------------------------------------------------------------------- quality


def evaluate(ds: Dataset, emb: CachedEmbedder, n_boot: int, seed: int) -> dict:
    """Recall@k per method and query on one dataset (one memory stream, one session per conversation)."""
    emb.ensure(
        [item_text(f.text) for c in ds.corpora for f in c.fragments] + [q.text for c in ds.corpora for q in c.queries]
    )
    stream = SCMStream(":memory:")
    memories = {name: make_memory(stream, emb, rel, scorer=sc) for name, (sc, rel) in SCM_VARIANTS.items()}
    plain_mem, fragrel_mem = memories["SCM (k + flash)"], memories["SCM + FragRel (0.3, 1.0) (k + flash)"]
    per = {m: {k: [] for k in KS} for m in METHODS}
    flash_gold, mismatches, n_checked = 0, 0, 0
    t0 = time.perf_counter()
    for corpus in ds.corpora:
        session = corpus.name
        for f in corpus.fragments:
            plain_mem.record(f.text, "", session_id=session)
        items = stream.items(session)
        if len(items) != len(corpus.fragments) or any(it.index != i for i, it in enumerate(items)):
            raise RuntimeError(f"stream of {session} does not match its turns")
        vectors = np.stack([it.embedding for it in items])
        bm25 = BM25Scorer([it.text for it in items])
        for q in corpus.queries:
            qv = emb.embed_query(q.text)
            dense = plain_mem.scores(qv, items, vectors)
            lexical = bm25(q.text)
            bases = {
                BASELINE: dense,
                "plain BM25 top-k": lexical,
                "plain hybrid top-k": 0.5 * minmax(lexical) + 0.5 * minmax(dense),
                PLAIN_FRAGREL: fragrel_mem.scores(qv, items, vectors),
            }
            for name, s in bases.items():
                ranking = np.argsort(-s, kind="stable")
                for k in KS:
                    per[name][k].append(recall_at_k(ranking, q.gold, k))
            flash_gold += int(len(items) - 1 in q.gold)
            for name, memory in memories.items():
                shown_by_k = shown_turns(memory, q.text, session, (*KS, *(k - 1 for k in KS)))
                for k in KS:
                    shown = shown_by_k[k]
                    per[name][k].append(len(q.gold & shown) / len(q.gold))
                    if name == "SCM (k + flash)":  # the memory's path = flash + top-k of the rest by cosine
                        expected = set(np.argsort(-dense[:-1], kind="stable")[:k].tolist()) | {len(items) - 1}
                        mismatches += int(expected != shown)
                        n_checked += 1
                        per[EQUAL][k].append(len(q.gold & shown_by_k[k - 1]) / len(q.gold))
    seconds = time.perf_counter() - t0
    stream.close()
    base = {k: np.array(per[BASELINE][k]) for k in KS}
    summary = {}
    for m in METHODS:
        summary[m] = {}
        for k in KS:
            a = np.array(per[m][k])
            lo, hi = paired_bootstrap(a, base[k], n_boot=n_boot, seed=seed)
            summary[m][k] = {
                "recall": 100 * float(a.mean()),
                "diff": 100 * float((a - base[k]).mean()),
                "ci": [100 * lo, 100 * hi],
            }
    return {
        "dataset": ds.name,
        "notes": ds.notes,
        "n_queries": ds.n_queries,
        "n_turns": ds.n_fragments,
        "turns_per_conversation": [len(c.fragments) for c in ds.corpora],
        "flash_turn_is_gold_pct": 100 * flash_gold / max(ds.n_queries, 1),
        "scm_path_check": {"checked": n_checked, "mismatches": mismatches},
        "seconds": seconds,
        "summary": summary,
        "per_query": {m: {str(k): [round(x, 4) for x in per[m][k]] for k in KS} for m in METHODS},
    }


# --------------------------------------------------------------------------------------------- controller


def controller_sample(datasets: Sequence[Dataset], n: int, seed: int) -> dict:
    """Yes-rate of the SCM controller with the embedded SmolLM2-135M on ``n`` LoCoMo dev questions (all need
    memory) and on the self-contained messages above (none need memory)."""
    from fragrel_integrations.models.llama_cpp_chat import LlamaCppChatModel

    locomo = next(d for d in datasets if d.name == "locomo")
    pairs = [(c, q) for c in locomo.corpora for q in c.queries]
    rng = np.random.default_rng(seed)
    chosen = [pairs[i] for i in sorted(rng.choice(len(pairs), size=min(n, len(pairs)), replace=False))]
    t0 = time.perf_counter()
    model = LlamaCppChatModel(n_ctx=2048)
    load_s = time.perf_counter() - t0
    controller = SCMController(model)
    out = {}
    try:
        for name, cases in (
            ("locomo_questions", [(q.text, c.name, c.fragments[-1].text) for c, q in chosen]),
            ("self_contained", [(m, "demo", "I'm fine, thanks for asking.") for m in NO_MEMORY_MESSAGES]),
        ):
            decisions, t1 = [], time.perf_counter()
            for text, session, last in cases:
                flash = MemoryItem(session, 0, last, "")
                decisions.append(controller.needs_memory(text, flash))
            out[name] = {
                "n": len(cases),
                "yes_pct": 100 * sum(d.value for d in decisions) / len(decisions),
                "parsed_pct": 100 * sum(d.parsed for d in decisions) / len(decisions),
                "seconds_per_call": (time.perf_counter() - t1) / len(cases),
                "replies": sorted({d.raw.strip() for d in decisions}),
            }
    finally:
        model.close()
    out["model"] = "SmolLM2-135M-Instruct (GGUF, llama.cpp), temperature 0, max 4 tokens"
    out["load_seconds"] = load_s
    return out


# --------------------------------------------------------------------------------------------- latency


def _fill(stream: SCMStream, session: str, texts: Sequence[str], vectors: np.ndarray) -> None:
    for t, v in zip(texts, vectors, strict=True):
        stream.append(session, t, "", embedding=v)


def latency(sizes: Sequence[int], turns: int, pool: Sequence[str], questions: Sequence[str], dim: int = 384) -> list:
    """Per-turn prepare + record at N stored turns, next to plain numpy top-k, in the same run."""
    embedder = HashingEmbedder(dim=dim)
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="bench_scm_"))
    for n in sizes:
        texts = [f"{pool[i % len(pool)]} (#{i})" for i in range(n)]
        vectors = embedder.embed_documents([item_text(t) for t in texts])
        qs = [questions[i % len(questions)] for i in range(turns)]
        row = {"n": n, "turns": turns, "k": 5}
        for backend in ("memory", "file"):
            if backend == "memory":
                stream = SCMStream(":memory:")
                _fill(stream, "s", texts, vectors)
            else:
                path = tmp / f"scm_{n}.sqlite"
                with SCMStream(path, synchronous="OFF") as fill:
                    _fill(fill, "s", texts, vectors)
                stream = SCMStream(path)  # synchronous=FULL, the default
            for label, rel in (("SCM", None), ("SCM + FragRel (0.3, 1.0)", (0.3, 1.0))):
                memory = make_memory(stream, embedder, rel)
                prep, rec = [], []
                for q in qs:
                    t0 = time.perf_counter()
                    memory.prepare(q, session_id="s")
                    t1 = time.perf_counter()
                    memory.record(q, "Noted.", session_id="s")
                    prep.append(t1 - t0)
                    rec.append(time.perf_counter() - t1)
                row[f"{label} [{backend}]"] = _stats(prep, rec)
            stream.close()
        # plain top-k: the same vectors in a numpy matrix, the new turn appended after each query
        matrix = np.zeros((n + turns, dim), np.float32)
        matrix[:n] = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        size, prep, rec = n, [], []
        for q in qs:
            t0 = time.perf_counter()
            qv = embedder.embed_query(q)
            s = matrix[:size] @ (qv / max(float(np.linalg.norm(qv)), 1e-12))
            top = np.argpartition(-s, 5)[:5]
            top[np.argsort(-s[top])]
            t1 = time.perf_counter()
            v = embedder.embed_documents([item_text(q)])[0]
            matrix[size] = v / max(float(np.linalg.norm(v)), 1e-12)
            size += 1
            prep.append(t1 - t0)
            rec.append(time.perf_counter() - t1)
        row["plain top-k [numpy]"] = _stats(prep, rec)
        rows.append(row)
    return rows


def _stats(prep: list[float], rec: list[float]) -> dict:
    total = [a + b for a, b in zip(prep, rec, strict=True)]
    return {
        "prepare_ms": 1e3 * float(np.median(prep)),
        "record_ms": 1e3 * float(np.median(rec)),
        "turn_ms": 1e3 * float(np.median(total)),
        "turn_p90_ms": 1e3 * float(np.percentile(total, 90)),
    }


# --------------------------------------------------------------------------------------------- report


def _cell(s: dict, base: bool) -> str:
    if base:
        return f"{s['recall']:.1f}"
    lo, hi = s["ci"]
    return f"{s['recall']:.1f} ({s['diff']:+.1f} [{lo:+.1f}, {hi:+.1f}])"


def report(res: dict) -> str:
    lines = [
        "# SCM memory: recall of its retrieval path and latency per turn",
        "",
        f"Command: `{res['command']}`. Machine: {res['machine']}; load average {res['load_start']} at the start, "
        f"{res['load_end']} at the end (shared with other jobs: compare ratios, not absolute times). Whole run "
        f"{res['seconds']:.0f} s (embedding {res['embed_seconds']:.0f} s for {res['embedded']} new texts).",
        "",
        '**Setting.** Each turn is written into one `SelfControlledMemory` stream with `record(turn, "")`; each '
        "question is asked with `prepare(question)`. The controller is *not* asked (`activation=False`: treated "
        "as always answering yes) and there are *no summaries* (`summarize=False`: the full turn text is "
        "embedded), because the embedded 135M model is too slow for thousands of turns on 2 CPUs. SCM rows use "
        "the memory's own scorer (dense = all-MiniLM-L6-v2 cosine, the paper's choice; BM25 and hybrid over the "
        "candidate turns); plain rows rank all stored turns with the same scores. *k + flash* shows k activated "
        "turns plus the flash turn (the last stored turn), i.e. k + 1 turns; *(k-1) + flash* shows k turns, the "
        "same budget as plain top-k. Recall in %; in brackets the difference to plain dense top-k at the same k "
        f"and its paired-bootstrap 95% CI ({res['n_boot']} resamples, seed {res['seed']}).",
        "",
    ]
    for part, results in res["quality"].items():
        for d in results:
            chk = d["scm_path_check"]
            lines += [
                f"## {d['dataset']} ({part}): {d['notes']}",
                "",
                f"{d['n_queries']} questions, {d['n_turns']} turns (per conversation "
                f"{min(d['turns_per_conversation'])}-{max(d['turns_per_conversation'])}); the flash turn is a gold "
                f"turn for {d['flash_turn_is_gold_pct']:.1f}% of the questions. SCM path check: the memory's "
                f"recalled set equals flash + top-k of the other turns by cosine in "
                f"{chk['checked'] - chk['mismatches']}/{chk['checked']} cases. {d['seconds']:.0f} s.",
                "",
                "| method | " + " | ".join(f"R@{k}" for k in KS) + " |",
                "|---|" + "---:|" * len(KS),
            ]
            for m in METHODS:
                cells = [_cell(d["summary"][m][str(k)], m == BASELINE) for k in KS]
                lines.append(f"| {m} | " + " | ".join(cells) + " |")
            lines.append("")
    c = res.get("controller")
    if c:
        lq, sc = c["locomo_questions"], c["self_contained"]
        lines += [
            "## Controller yes-rate with the embedded LLM (sample)",
            "",
            f"{c['model']}; load {c['load_seconds']:.1f} s. `SCMController.needs_memory(message, flash)` with the "
            "conversation's last turn as the flash memory.",
            "",
            "| messages | n | says yes (memory needed) | reply parsed | s per call |",
            "|---|---:|---:|---:|---:|",
            f"| LoCoMo dev questions (all need memory) | {lq['n']} | {lq['yes_pct']:.0f}% | {lq['parsed_pct']:.0f}% "
            f"| {lq['seconds_per_call']:.2f} |",
            f"| self-contained messages (none need memory) | {sc['n']} | {sc['yes_pct']:.0f}% | "
            f"{sc['parsed_pct']:.0f}% | {sc['seconds_per_call']:.2f} |",
            "",
            f"Distinct replies: LoCoMo {lq['replies'][:8]}; self-contained {sc['replies'][:8]}.",
            "",
        ]
    lines += [
        "## Latency per turn (prepare + record, k = 5)",
        "",
        "HashingEmbedder (dimension 384) for every vector, so no model time is included; medians over the turns "
        "(p90 in brackets), ms. `[memory]` = SQLite in memory, `[file]` = SQLite file with `synchronous=FULL` "
        "(one fsync per record). Plain top-k = the same vectors in a numpy matrix: embed the query, cosine, "
        "top-k, append the turn's vector.",
        "",
    ]
    for row in res["latency"]:
        plain = row["plain top-k [numpy]"]["turn_ms"]
        lines += [
            f"N = {row['n']} stored turns, {row['turns']} measured turns:",
            "",
            "| path | prepare | record | turn (p90) | x plain top-k |",
            "|---|---:|---:|---:|---:|",
        ]
        for key, s in row.items():
            if isinstance(s, dict):
                lines.append(
                    f"| {key} | {s['prepare_ms']:.2f} | {s['record_ms']:.2f} | {s['turn_ms']:.2f} "
                    f"({s['turn_p90_ms']:.2f}) | {s['turn_ms'] / max(plain, 1e-9):.0f} |"
                )
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=default_data_dir(), help="the shared data folder")
    p.add_argument("--split", choices=("dev", "all"), default="dev", help="all: held-out parts too, reported apart")
    p.add_argument(
        "--controller-sample", type=int, default=50, help="LoCoMo questions for the LLM controller (0: skip)"
    )
    p.add_argument("--sizes", type=lambda x: [int(float(v)) for v in x.split(",")], default=[1000, 10000])
    p.add_argument("--turns", type=int, default=30, help="measured turns per size and path")
    p.add_argument("--quick", action="store_true", help="smoke test: LoCoMo conversation 0, 3 controller calls, N=1e3")
    p.add_argument("--n-boot", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=RESULTS_DIR)
    a = p.parse_args(argv)
    t_start = time.perf_counter()
    load_start = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    emb = CachedEmbedder("scm")
    if a.quick:
        a.controller_sample, a.sizes, a.turns = min(a.controller_sample, 3), [1000], 5
    parts = {"dev": (range(0, 1) if a.quick else range(0, 5), None)}
    if a.split == "all":
        n_sessions = 54  # MTBench+ sessions; the loader's default (dev) is the first half
        parts["heldout"] = (range(5, 10), range(n_sessions // 2, n_sessions))
    quality = {}
    dev_sets = []
    for part, (conv, sessions) in parts.items():
        sets = [load_locomo(a.data, conv), load_mtbench(a.data, sessions)]
        if part == "dev":
            dev_sets = sets
        quality[part] = []
        for ds in sets:
            r = evaluate(ds, emb, a.n_boot, a.seed)
            quality[part].append(r)
            print(
                f"{part} {ds.name}: {r['seconds']:.0f} s", {m: round(r["summary"][m][5]["recall"], 1) for m in METHODS}
            )
    controller = controller_sample(dev_sets, a.controller_sample, a.seed) if a.controller_sample > 0 else None
    pool = [f.text for c in dev_sets[0].corpora for f in c.fragments]
    questions = [q.text for c in dev_sets[0].corpora for q in c.queries]
    lat = latency(a.sizes, a.turns, pool, questions)
    res = {
        "command": "python benchmarks/bench_scm.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": f"{os.cpu_count()} CPUs ({platform.machine()}), Python {platform.python_version()}",
        "load_start": load_start,
        "load_end": ", ".join(f"{x:.2f}" for x in os.getloadavg()),
        "seconds": time.perf_counter() - t_start,
        "embed_seconds": emb.embed_seconds,
        "embedded": emb.n_embedded,
        "n_boot": a.n_boot,
        "seed": a.seed,
        "ks": list(KS),
        "quality": quality,
        "controller": controller,
        "latency": lat,
    }
    res = _jsonable(res)
    a.out.mkdir(parents=True, exist_ok=True)
    write_json(a.out / "scm.json", res)
    (a.out / "scm.md").write_text(report(res))
    print((a.out / "scm.md").read_text())
    return res


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.floating | np.integer):
        return obj.item()
    return obj


if __name__ == "__main__":
    main()
