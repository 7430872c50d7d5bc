"""ILM-TR inner loop vs single-shot retrieval + one answer call, on long haystacks.

    python benchmarks/bench_inner_loop.py                        # embedded SmolLM2-135M, defaults
    python benchmarks/bench_inner_loop.py --n 10 --lengths 8k    # more questions, one length
    python benchmarks/bench_inner_loop.py --base-url http://127.0.0.1:8080/v1 --model NAME   # OpenAI-compatible

Sets (dev parts only, as DESIGN.md asks):

* ``babilong-<L>``: bAbI qa1-qa3, ``--n`` questions per task drawn (seeded) from questions 0-99 of each task file,
  hidden in Robinson Crusoe at about L words with the BABILong-style builder of ``_common.load_babilong``
  (one fragment per sentence; gold = the supporting facts). The answer is one location word.
* ``mniah-<L>``: a 3-needle needle-in-a-haystack on the Paul Graham essays (sorted file order, started at a seeded
  essay, one fragment per sentence cut at 40 words). The three needles (written for this benchmark) state three
  facts about a made-up island; the question asks for all three. Each trial puts them at seeded depths.

Both methods use the same retriever, ``k`` and model: a ``FragRelIndex`` over the haystack with the haystack
default of ``benchmarks/README.md`` (dense all-MiniLM-L6-v2 base, ``ContextRelation(0.9)``, alpha 0.1). The ``k``
fragments of a retrieval are shown in story order (``order="position"``): which bAbI fact is the latest decides the
answer, and a score-ordered list hides that.

* ``single``: retrieve ``k`` fragments for the question, one call with ``fragrel ask``'s prompt
  (``cli.answer_messages``), at most 128 new tokens.
* ``loop``: the core ``InnerLoopEngine`` with its defaults (5 rounds at most, LCS threshold 0.9, STM of at most
  256 tokens, no dedupe); each round retrieves ``k`` fragments for question + STM. The final STM is the answer.
* ``loop round 1``: the STM after the loop's first round, read from the same runs (no extra calls). It differs
  from ``single`` only in the prompt, so it separates the prompt's effect from the effect of looping.

Measures, per question: answer accuracy (bAbI: the answer word occurs in the reply, case-insensitive, as a word;
*strict*: and no other bAbI location except those named in the question, so a reply that lists every room does
not count; M-NIAH: how many of the three needle facts' key words the reply contains), supporting-fact recall of
the fragments shown to the model (union over rounds for the loop), rounds, and seconds (retrieval + model calls;
index building is timed separately). Greedy decoding, seeded sampling of questions and haystacks.
Writes ``benchmarks/results/inner_loop.md`` and ``inner_loop.json``; embeddings of haystack sentences are cached
under the gitignored ``benchmarks/out/``.
"""

from __future__ import annotations

import argparse
import functools
import re
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
from _common import (
    _BABI_FILES,
    RESULTS_DIR,
    CachedEmbedder,
    Query,
    book_sentences,
    default_data_dir,
    load_babilong,
    loadavg,
    machine_info,
    write_json,
)
from bench_llm import babi_items

from fragrel_integrations import ContextRelation, Fragment, FragRelIndex
from fragrel_integrations.cli import answer_messages
from fragrel_integrations.core.inner_loop import InnerLoopEngine, InnerLoopResult

__all__ = ["main"]

# The haystack default of benchmarks/README.md ("stories / haystacks"): dense base, w_rel 0.9, alpha 0.1.
HAYSTACK_W_REL = 0.9
HAYSTACK_ALPHA = 0.1
ORDER = "position"  # the k retrieved fragments are shown in story order (bAbI answers depend on the order of facts)
SINGLE_MAX_TOKENS = 128
LOCATIONS = frozenset({"bathroom", "bedroom", "garden", "hallway", "kitchen", "office"})  # every bAbI qa1-qa3 answer

# Three needles about a made-up island (written for this benchmark), the key word of each fact, and one question
# that needs all three.
NEEDLES = (
    ("On the island of Tavrinet, the ferry sails only on mornings when the harbour master has seen a heron.", "heron"),
    ("Every roof on the island of Tavrinet is made of green slate cut from the cliffs on its northern shore.", "slate"),
    ("At the new year the people of Tavrinet burn a small boat built from juniper branches on the beach.", "juniper"),
)
NEEDLE_QUESTION = (
    "On the island of Tavrinet, what decides whether the ferry sails, what are the roofs made of, "
    "and what is burned at the new year?"
)

_WORDS = re.compile(r"[a-z]+")


# ------------------------------------------------------------------------------------------------ data


def parse_length(text: str) -> int:
    """``"8k"`` -> 8000, ``"32000"`` -> 32000."""
    text = text.strip().lower()
    value = float(text[:-1]) * 1000 if text.endswith("k") else float(text)
    if value < 500:
        raise ValueError(f"a haystack length must be at least 500 words, got {text!r}")
    return int(value)


def babilong_items(data: Path, words: int, n: int, seed: int) -> list[dict]:
    """``n`` seeded dev questions (0-99) of each of qa1-qa3 in a ~``words``-word Robinson Crusoe haystack."""
    items = []
    for task, file in _BABI_FILES.items():
        rng = np.random.default_rng([seed, int(task[2:])])
        picked = sorted(int(q) for q in rng.choice(100, size=min(n, 100), replace=False))
        answers = babi_items(data, file, 100)
        dataset = load_babilong(data, words=words, tasks=(task,), questions=picked, seed=seed)
        for qi, corpus in zip(picked, dataset.corpora, strict=True):
            query = corpus.queries[0]
            if answers[qi]["question"] != query.text:
                raise RuntimeError(f"{task} question {qi}: answer list and haystack builder disagree")
            items.append(
                {
                    "set": f"babilong-{words // 1000}k",
                    "id": f"{task}-{qi}",
                    "task": task,
                    "fragments": corpus.fragments,
                    "query": query,
                    "answers": (answers[qi]["answer"].lower(),),
                }
            )
    return items


def essay_sentences(data: Path) -> list[list[str]]:
    """The Paul Graham essays in sorted file order, each split into sentences of at most 40 words."""
    folder = data / "needle_haystack" / "PaulGrahamEssays"
    return [book_sentences(path) for path in sorted(folder.glob("*.txt"))]


def mniah_items(data: Path, words: int, n: int, seed: int) -> list[dict]:
    """``n`` trials: the three needles at seeded depths in ~``words`` words of essays (seeded starting essay)."""
    essays = essay_sentences(data)
    needle_words = sum(len(text.split()) for text, _ in NEEDLES)
    items = []
    for trial in range(n):
        rng = np.random.default_rng([seed, trial, words, 3])
        first = int(rng.integers(len(essays)))
        filler, total, e = [], 0, first
        while total < words - needle_words:
            for sentence in essays[e % len(essays)]:
                filler.append(sentence)
                total += len(sentence.split())
                if total >= words - needle_words:
                    break
            e += 1
        depths = np.sort(rng.uniform(0.0, 1.0, size=len(NEEDLES)))
        order = rng.permutation(len(NEEDLES))  # which needle goes to which depth
        slots = {round(float(d) * len(filler)): int(i) for d, i in zip(depths, order, strict=True)}
        while len(slots) < len(NEEDLES):  # two depths on one slot: draw again for the lost needle
            missing = sorted(set(range(len(NEEDLES))) - set(slots.values()))[0]
            slots.setdefault(int(rng.integers(len(filler) + 1)), missing)
        texts, gold = [], set()
        for slot in range(len(filler) + 1):
            if slot in slots:
                gold.add(len(texts))
                texts.append(NEEDLES[slots[slot]][0])
            if slot < len(filler):
                texts.append(filler[slot])
        name = f"mniah-{words // 1000}k-{trial}"
        items.append(
            {
                "set": f"mniah-{words // 1000}k",
                "id": f"trial-{trial}",
                "task": "mniah",
                "fragments": [Fragment(t, name, p) for p, t in enumerate(texts)],
                "query": Query(NEEDLE_QUESTION, frozenset(gold), {"depths": [round(float(d), 3) for d in depths]}),
                "answers": tuple(word for _, word in NEEDLES),
            }
        )
    return items


# ------------------------------------------------------------------------------------------------ scoring


def words_of(text: str) -> set[str]:
    return set(_WORDS.findall(text.lower()))


def score_reply(item: dict, reply: str) -> dict:
    """bAbI: ``correct`` (answer word in the reply) and ``strict`` (and no other location than those the question
    names). M-NIAH: ``facts`` = how many needle key words the reply contains, ``correct`` = all three."""
    said = words_of(reply)
    if item["task"] == "mniah":
        facts = sum(word in said for word in item["answers"])
        return {"facts": facts, "correct": facts == len(item["answers"]), "strict": facts == len(item["answers"])}
    answer = item["answers"][0]
    allowed = {answer} | (LOCATIONS & words_of(item["query"].text))
    correct = answer in said
    return {"correct": correct, "strict": correct and not (LOCATIONS & said) - allowed}


def support_recall(gold: frozenset[int], shown: list[int]) -> float:
    return len(gold & set(shown)) / len(gold) if gold else float("nan")


# ------------------------------------------------------------------------------------------------ running


def build_index(item: dict, cache: CachedEmbedder, embedder: object) -> FragRelIndex:
    texts = [f.text for f in item["fragments"]]
    cache.ensure(texts, progress=False)
    return FragRelIndex(
        item["fragments"],
        embedder=embedder,  # embeds the queries (never cached: loop queries carry the ever-changing STM)
        embeddings=cache.get(texts),
        relation=ContextRelation(HAYSTACK_W_REL),
        alpha=HAYSTACK_ALPHA,
        show_progress=False,
    )


def run_single(item: dict, index: FragRelIndex, model: object, k: int) -> dict:
    start = time.perf_counter()
    hits = index.retrieve(item["query"].text, k=k, order=ORDER)
    reply = model.invoke(  # type: ignore[attr-defined]
        answer_messages(item["query"].text, [h.fragment.text for h in hits]),
        temperature=0.0,
        max_tokens=SINGLE_MAX_TOKENS,
    )
    seconds = time.perf_counter() - start
    shown = [h.fragment.position for h in hits]
    return {
        "reply": reply,
        **score_reply(item, reply),
        "support_recall": support_recall(item["query"].gold, shown),
        "rounds": 1,
        "seconds": seconds,
        "shown": shown,
    }


def run_loop(item: dict, engine: InnerLoopEngine) -> dict:
    start = time.perf_counter()
    result: InnerLoopResult = engine.run(item["query"].text)
    seconds = time.perf_counter() - start
    shown = [h.fragment.position for h in result.fragments]
    first = result.rounds[0]
    first_shown = [h.fragment.position for h in first.shown]
    later = set(shown) - set(first_shown)  # fragments that only later rounds (question + STM) brought in
    return {
        "reply": result.answer,
        **score_reply(item, result.answer),
        "support_recall": support_recall(item["query"].gold, shown),
        "rounds": len(result.rounds),
        "seconds": seconds,
        "shown": shown,
        "stop_reason": result.stop_reason,
        "later_fragments": len(later),
        "later_gold": len(later & item["query"].gold),
        "round1": {
            "reply": first.stm,
            **score_reply(item, first.stm),
            "support_recall": support_recall(item["query"].gold, first_shown),
        },
        "trace": [
            {
                "query": r.query,
                "shown": [h.fragment.position for h in r.shown],
                "stm": r.stm,
                "similarity": None if r.similarity is None else round(r.similarity, 3),
            }
            for r in result.rounds
        ],
    }


def make_model(args: argparse.Namespace) -> tuple[object, str]:
    if args.base_url or args.model:
        if not (args.base_url and args.model):
            raise SystemExit("--base-url and --model go together (the server's URL and the model name it serves)")
        from fragrel_integrations.models.openai_chat import OpenAIChatModel

        model = OpenAIChatModel(
            args.model, base_url=args.base_url, seed=args.seed, context_window=args.context_window, timeout=300.0
        )
        return model, f"{args.model} at {args.base_url} (OpenAI-compatible)"
    from fragrel_integrations.models.llama_cpp_chat import LlamaCppChatModel

    model = LlamaCppChatModel(seed=args.seed)
    return model, f"{model.model_name} (embedded, llama-cpp-python, {model.n_threads} thread(s), n_ctx 4096)"


# ------------------------------------------------------------------------------------------------ report


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def aggregate(records: list[dict]) -> dict:
    """Per set and method: n, accuracy, strict accuracy, facts (M-NIAH), support recall, rounds, seconds."""
    out: dict = {}
    for name in dict.fromkeys(r["set"] for r in records):
        rows = [r for r in records if r["set"] == name]
        per: dict = {}
        for method, get in (
            ("single", lambda r: r["single"]),
            ("loop round 1", lambda r: r["loop"]["round1"]),
            ("loop", lambda r: r["loop"]),
        ):
            runs = [get(r) for r in rows]
            per[method] = {
                "n": len(runs),
                "accuracy": 100 * mean([float(x["correct"]) for x in runs]),
                "strict": 100 * mean([float(x["strict"]) for x in runs]),
                "facts": mean([float(x["facts"]) for x in runs]) if "facts" in runs[0] else None,
                "support_recall": 100 * mean([x["support_recall"] for x in runs]),
                "rounds": mean([float(x["rounds"]) for x in runs]) if "rounds" in runs[0] else 1.0,
                "seconds": mean([x["seconds"] for x in runs]) if "seconds" in runs[0] else None,
            }
        per["stop_reasons"] = dict(Counter(r["loop"]["stop_reason"] for r in rows))
        per["later_fragments"] = mean([float(r["loop"]["later_fragments"]) for r in rows])
        per["later_gold"] = sum(r["loop"]["later_gold"] for r in rows)
        key = "facts" if rows[0]["task"] == "mniah" else "correct"
        single = [float(r["single"][key]) for r in rows]
        loop = [float(r["loop"][key]) for r in rows]
        per["loop_vs_single"] = {
            "better": sum(b > a for a, b in zip(single, loop, strict=True)),
            "worse": sum(b < a for a, b in zip(single, loop, strict=True)),
            "same": sum(b == a for a, b in zip(single, loop, strict=True)),
        }
        if rows[0]["task"] != "mniah":
            per["by_task"] = {
                task: {
                    m: 100 * mean([float(r[m]["correct"]) for r in rows if r["task"] == task])
                    for m in ("single", "loop")
                }
                | {
                    f"{m} support": 100 * mean([r[m]["support_recall"] for r in rows if r["task"] == task])
                    for m in ("single", "loop")
                }
                for task in dict.fromkeys(r["task"] for r in rows)
            }
        out[name] = per
    return out


def fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None or value != value else format(value, spec)


def auto_summary(agg: dict, model_name: str) -> list[str]:
    """Plain statements read off the numbers (the same rules for any model)."""
    lines = []
    for name, per in agg.items():
        s, lp, r1 = per["single"], per["loop"], per["loop round 1"]
        vs = per["loop_vs_single"]
        ratio = lp["seconds"] / s["seconds"] if s["seconds"] else float("nan")
        if name.startswith("mniah"):
            lines.append(
                f"- {name} ({s['n']} trials): needle facts in the answer {fmt(s['facts'], '.2f')}/3 single-shot vs "
                f"{fmt(lp['facts'], '.2f')}/3 with the loop (all three: {fmt(s['accuracy'], '.0f')}% vs "
                f"{fmt(lp['accuracy'], '.0f')}%); needles shown to the model {fmt(s['support_recall'], '.0f')}% vs "
                f"{fmt(lp['support_recall'], '.0f')}%; the loop took {fmt(lp['rounds'], '.1f')} rounds and "
                f"{fmt(ratio, '.1f')}x the time (better on {vs['better']}, worse on {vs['worse']} trials)."
            )
        else:
            lines.append(
                f"- {name} ({s['n']} questions): answer accuracy {fmt(s['accuracy'], '.0f')}% single-shot vs "
                f"{fmt(lp['accuracy'], '.0f')}% with the loop (strict {fmt(s['strict'], '.0f')}% vs "
                f"{fmt(lp['strict'], '.0f')}%; loop round 1 alone {fmt(r1['accuracy'], '.0f')}%); supporting facts "
                f"shown to the model {fmt(s['support_recall'], '.0f')}% vs {fmt(lp['support_recall'], '.0f')}%; "
                f"the loop took {fmt(lp['rounds'], '.1f')} rounds and {fmt(ratio, '.1f')}x the time "
                f"(right where single-shot was wrong: {vs['better']}, the reverse: {vs['worse']}). Rounds after the "
                f"first brought in {fmt(per['later_fragments'], '.1f')} new fragments per question, "
                f"{per['later_gold']} of them supporting facts in all."
            )
    strict = [per[m]["strict"] for name, per in agg.items() if not name.startswith("mniah") for m in ("single", "loop")]
    if strict and max(strict) < 50:
        lines.append(
            f"- {model_name} does not answer these questions reliably with either method (strict accuracy at most "
            f"{max(strict):.0f}%; bAbI has six locations, so naming one at random is right 1 time in 6). "
            "Differences in answer accuracy between the methods are within what a handful of questions can show."
        )
    return lines


def report(res: dict) -> str:
    m = res["machine"]
    lines = [
        "# Inner loop (ILM-TR) vs single-shot retrieval",
        "",
        f"Command: `{res['command']}`. Machine: {m['cpus']} CPUs ({m['processor']}), load average {m['loadavg_start']}"
        f" at the start and {m['loadavg_end']} at the end (shared machine: timings vary), Python {m['python']}. "
        f"Wall time {res['wall_seconds']:.0f} s (index building {res['index_seconds']:.0f} s of it, "
        f"{res['embedded_texts']} sentences embedded, the rest cached).",
        "",
        f"Model: {res['model']}; greedy decoding, seed {res['seed']}. Retriever (both methods): `FragRelIndex`, dense "
        f"all-MiniLM-L6-v2 base, `ContextRelation({HAYSTACK_W_REL})`, alpha {HAYSTACK_ALPHA} (the haystack default of "
        f"benchmarks/README.md), k = {res['k']} sentence fragments per retrieval, shown in story order. Loop: "
        f"`InnerLoopEngine` defaults "
        f"(max_loops {res['max_loops']}, threshold 0.9, STM <= 256 tokens, no dedupe). Single-shot: `fragrel ask`'s "
        f"prompt, <= {SINGLE_MAX_TOKENS} new tokens. Protocol: the docstring of `benchmarks/bench_inner_loop.py`.",
        "",
        "## BABILong-style (bAbI qa1-qa3 dev questions in Robinson Crusoe)",
        "",
        "Accuracy = the answer word is in the reply; strict = and no other bAbI location (except those the question "
        "names). Support recall = share of the supporting facts among the fragments shown to the model (the loop: "
        "union over its rounds). Seconds per question: retrieval + model calls.",
        "",
        "| set | questions | method | accuracy % | strict % | support recall % | rounds | s / question |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    agg = res["aggregate"]
    for name, per in agg.items():
        if name.startswith("mniah"):
            continue
        for method in ("single", "loop round 1", "loop"):
            a = per[method]
            lines.append(
                f"| {name} | {a['n']} | {method} | {fmt(a['accuracy'])} | {fmt(a['strict'])} | "
                f"{fmt(a['support_recall'])} | {fmt(a['rounds'], '.2f')} | {fmt(a['seconds'])} |"
            )
    lines += ["", "Per task (accuracy % / support recall %, single-shot -> loop):", ""]
    for name, per in agg.items():
        for task, t in per.get("by_task", {}).items():
            lines.append(
                f"- {name} {task}: accuracy {fmt(t['single'], '.0f')} -> {fmt(t['loop'], '.0f')}, "
                f"support {fmt(t['single support'], '.0f')} -> {fmt(t['loop support'], '.0f')}"
            )
    lines += [
        "",
        "## Multi-needle (3 needles) in the Paul Graham essays",
        "",
        "Needles (written for this benchmark): "
        + " ".join(f"“{text}”" for text, _ in NEEDLES)
        + f" Question: “{NEEDLE_QUESTION}” Facts = how many of "
        + ", ".join(f"*{w}*" for _, w in NEEDLES)
        + " the reply contains; all 3 % = trials with every fact; needles shown = share of the needle sentences "
        "among the fragments shown to the model.",
        "",
        "| set | trials | method | facts (of 3) | all 3 % | needles shown % | rounds | s / question |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for name, per in agg.items():
        if not name.startswith("mniah"):
            continue
        for method in ("single", "loop round 1", "loop"):
            a = per[method]
            lines.append(
                f"| {name} | {a['n']} | {method} | {fmt(a['facts'], '.2f')} | {fmt(a['accuracy'])} | "
                f"{fmt(a['support_recall'])} | {fmt(a['rounds'], '.2f')} | {fmt(a['seconds'])} |"
            )
    lines += ["", "Loop stop reasons: " + "; ".join(f"{n}: {per['stop_reasons']}" for n, per in agg.items()), ""]
    lines += ["## Summary (generated from the numbers above)", "", *auto_summary(agg, res["model_short"]), ""]
    lines += ["## Examples (first question of each set)", ""]
    seen = set()
    for r in res["records"]:
        if r["set"] in seen:
            continue
        seen.add(r["set"])
        lines.append(f"- {r['set']} {r['id']}: “{r['question']}” (answer: {', '.join(r['answers'])})")
        lines.append(f"  - single-shot: `{one_line(r['single']['reply'])}`")
        for i, step in enumerate(r["loop"]["trace"], start=1):
            lines.append(f"  - loop round {i} (shown {step['shown']}): `{one_line(step['stm'])}`")
    return "\n".join(lines) + "\n"


def one_line(text: str, limit: int = 200) -> str:
    text = " ".join(text.split()).replace("`", "'")
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ------------------------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=default_data_dir(), help="the shared data folder")
    ap.add_argument("--n", type=int, default=3, help="questions per bAbI task and M-NIAH trials per length")
    ap.add_argument("--lengths", default="8k,32k", help="haystack lengths in words, comma-separated (8k, 32000)")
    ap.add_argument("--sets", default="babilong,mniah", help="which sets: babilong, mniah or both")
    ap.add_argument("--k", type=int, default=5, help="fragments per retrieval (both methods)")
    ap.add_argument("--max-loops", type=int, default=5, help="most rounds of the loop (ILM-TR uses 5)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--base-url", default=None, help="an OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1")
    ap.add_argument("--model", default=None, help="the model name that server serves")
    ap.add_argument("--context-window", type=int, default=None, help="the served model's context window (tokens)")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR / "inner_loop.md")
    args = ap.parse_args(argv)
    if args.n < 1 or args.k < 1 or args.max_loops < 1:
        raise SystemExit("--n, --k and --max-loops must be positive")
    lengths = [parse_length(x) for x in args.lengths.split(",") if x.strip()]
    sets = {s.strip() for s in args.sets.split(",") if s.strip()}
    if not sets or sets - {"babilong", "mniah"}:
        raise SystemExit("--sets takes babilong, mniah or both")

    wall = time.perf_counter()
    loadavg_start = loadavg()
    model, model_name = make_model(args)
    from fragrel_integrations.models.local import default_embedder

    embedder = default_embedder()
    cache = CachedEmbedder("babilong")  # the cache name bench_quality.py uses for the same haystack sentences
    engine = InnerLoopEngine(None, model, max_loops=args.max_loops)

    items: list[dict] = []
    for words in lengths:
        if "babilong" in sets:
            items += babilong_items(args.data, words, args.n, args.seed)
        if "mniah" in sets:
            items += mniah_items(args.data, words, args.n, args.seed)

    records, index_seconds, embedded_before = [], 0.0, cache.n_embedded
    for i, item in enumerate(items, start=1):
        start = time.perf_counter()
        index = build_index(item, cache, embedder)
        index_seconds += time.perf_counter() - start
        single = run_single(item, index, model, args.k)
        retrieve = functools.partial(index.retrieve, k=args.k, order=ORDER)
        loop = run_loop(item, engine.with_retriever(retrieve))
        records.append(
            {
                "set": item["set"],
                "id": item["id"],
                "task": item["task"],
                "question": item["query"].text,
                "answers": list(item["answers"]),
                "gold": sorted(item["query"].gold),
                "n_fragments": len(item["fragments"]),
                "meta": item["query"].meta,
                "single": single,
                "loop": loop,
            }
        )
        print(
            f"[{i}/{len(items)}] {item['set']} {item['id']}: single {single['correct']} "
            f"({single['seconds']:.1f} s), loop {loop['correct']} ({loop['rounds']} rounds, {loop['seconds']:.1f} s)",
            file=sys.stderr,
        )

    res = {
        "command": " ".join(["python benchmarks/bench_inner_loop.py", *(argv if argv is not None else sys.argv[1:])]),
        "machine": machine_info(loadavg_start),
        "model": model_name,
        "model_short": args.model or "SmolLM2-135M-Instruct",
        "seed": args.seed,
        "k": args.k,
        "max_loops": args.max_loops,
        "lengths": lengths,
        "needles": [{"text": t, "key": w} for t, w in NEEDLES],
        "needle_question": NEEDLE_QUESTION,
        "wall_seconds": time.perf_counter() - wall,
        "index_seconds": index_seconds,
        "embedded_texts": cache.n_embedded - embedded_before,
        "aggregate": aggregate(records),
        "records": records,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report(res), encoding="utf-8")
    write_json(args.out.with_suffix(".json"), res)
    print(report(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
