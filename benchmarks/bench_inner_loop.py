"""ILM-TR inner loop vs single-shot retrieval + one answer call, on long haystacks.

    python benchmarks/bench_inner_loop.py                        # embedded SmolLM2-135M, defaults
    python benchmarks/bench_inner_loop.py --n 10 --lengths 8k    # more questions, one length
    python benchmarks/bench_inner_loop.py --base-url http://127.0.0.1:8080/v1 --model NAME   # OpenAI-compatible
    python benchmarks/bench_inner_loop.py --sets babilong --tasks qa2,qa3 --n 50 --lengths 8k,32k \
        --methods single,loop,loop-constrained --out benchmarks/results/inner_loop_qa23.md

Sets (dev parts only, as DESIGN.md asks):

* ``babilong-<L>``: bAbI qa1-qa3 (``--tasks``), ``--n`` questions per task drawn (seeded) from questions 0-99 of
  each task file (the dev part: ``--n`` is at most 100),
  hidden in Robinson Crusoe at about L words with the BABILong-style builder of ``_common.load_babilong``
  (one fragment per sentence; gold = the supporting facts). The answer is one location word.
* ``mniah-<L>``: a 3-needle needle-in-a-haystack on the Paul Graham essays (sorted file order, started at a seeded
  essay, one fragment per sentence cut at 40 words). The three needles (written for this benchmark) state three
  facts about a made-up island; the question asks for all three. Each trial puts them at seeded depths.

Every method uses the same retriever, ``k`` and model: a ``FragRelIndex`` over the haystack with the haystack
default of ``benchmarks/README.md`` (dense all-MiniLM-L6-v2 base, ``ContextRelation(0.9)``, alpha 0.1). The ``k``
fragments of a retrieval are shown in story order (``order="position"``): which bAbI fact is the latest decides the
answer, and a score-ordered list hides that.

* ``single``: retrieve ``k`` fragments for the question, one call with ``fragrel ask``'s prompt
  (``core.grounding.answer_messages``), at most 128 new tokens.
* ``loop``: the core ``InnerLoopEngine`` with its defaults (5 rounds at most, LCS threshold 0.9, STM of at most
  256 tokens, no dedupe); each round retrieves ``k`` fragments for question + STM. The final STM is the answer.
* ``loop-constrained``: the same loop with ``constrained=True``: each round's memory is written under the
  engine's ``stm_format()`` (one line), enforced by the llama.cpp grammar (OpenAI-compatible servers: their
  structured-output support).
* ``loop round 1`` (and ``loop constrained round 1``): the STM after the loop's first round, read from the same
  runs (no extra calls). It differs from ``single`` only in the prompt, so it separates the prompt's effect from
  the effect of looping.

``--methods`` picks among ``single``, ``loop`` and ``loop-constrained`` (default: the first two). Every method
answers every question, so methods are compared question by question: for each pair, how often one was right
where the other was wrong, an exact McNemar test on those discordant pairs and a paired bootstrap 95% interval of
the accuracy difference; each accuracy has a 95% Wilson interval. The methods run in a rotating order (question
i starts with method i mod m), so llama.cpp's reuse of a prompt prefix from the previous call does not favour
one method's timings.

Measures, per question: answer accuracy (bAbI: the answer word occurs in the reply, case-insensitive, as a word;
*strict*: and no other bAbI location except those named in the question, so a reply that lists every room does
not count; M-NIAH: how many of the three needle facts' key words the reply contains), supporting-fact recall of
the fragments shown to the model (union over rounds for the loop), rounds, and seconds (retrieval + model calls;
index building is timed separately). Greedy decoding, seeded sampling of questions and haystacks.
Writes ``benchmarks/results/inner_loop.md`` and ``inner_loop.json`` (``--out``), rewritten after each set so a
long run that is stopped keeps the sets it finished; embeddings of haystack sentences are cached under the
gitignored ``benchmarks/out/``.
"""

from __future__ import annotations

import argparse
import functools
import logging
import re
import shlex
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from itertools import combinations
from math import comb, sqrt
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
    paired_bootstrap,
    write_json,
)
from bench_llm import babi_items

from fragrel_integrations import ContextRelation, Fragment, FragRelIndex
from fragrel_integrations.core.grounding import answer_messages
from fragrel_integrations.core.inner_loop import InnerLoopEngine, InnerLoopResult
from fragrel_integrations.models.structured import supports_format

__all__ = ["main"]

logger = logging.getLogger("bench_inner_loop")

# The haystack default of benchmarks/README.md ("stories / haystacks"): dense base, w_rel 0.9, alpha 0.1.
HAYSTACK_W_REL = 0.9
HAYSTACK_ALPHA = 0.1
ORDER = "position"  # the k retrieved fragments are shown in story order (bAbI answers depend on the order of facts)
SINGLE_MAX_TOKENS = 128
DEV_QUESTIONS = 100  # bAbI questions 0-99 of each task are the dev part (DESIGN.md); the rest is held out
METHODS = ("single", "loop", "loop-constrained")
LOOP_METHODS = ("loop", "loop-constrained")
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


def parse_choices(text: str, allowed: Sequence[str], option: str) -> list[str]:
    """``"qa2, qa3"`` -> ``["qa2", "qa3"]`` (order kept, repeats dropped); a ValueError names ``option`` and the
    allowed values for anything else."""
    picked = list(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
    unknown = [x for x in picked if x not in allowed]
    if not picked or unknown:
        raise ValueError(f"{option} takes a comma-separated list of {', '.join(allowed)}; got {text!r}")
    return picked


def babilong_items(data: Path, words: int, n: int, seed: int, tasks: Sequence[str] = tuple(_BABI_FILES)) -> list[dict]:
    """``n`` seeded dev questions (0-99) of each of ``tasks`` in a ~``words``-word Robinson Crusoe haystack."""
    if not 1 <= n <= DEV_QUESTIONS:
        raise ValueError(f"n must be 1-{DEV_QUESTIONS}: the dev part of each bAbI task is questions 0-99, got {n}")
    items = []
    for task in tasks:
        file = _BABI_FILES[task]
        rng = np.random.default_rng([seed, int(task[2:])])  # the same draw for a task whichever tasks run with it
        picked = sorted(int(q) for q in rng.choice(DEV_QUESTIONS, size=n, replace=False))
        answers = babi_items(data, file, DEV_QUESTIONS)
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
                "reply": r.reply,
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


def label(method: str) -> str:
    """``"loop-constrained"`` -> ``"loop constrained"`` (the name in tables)."""
    return method.replace("-", " ")


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion, in percent."""
    if n == 0:
        return (float("nan"), float("nan"))
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (100 * max(0.0, centre - half), 100 * min(1.0, centre + half))


def sign_test_p(wins: int, losses: int) -> float:
    """Two-sided exact McNemar (sign) test on the discordant pairs: P(a split at least this uneven | no difference)."""
    d = wins + losses
    if d == 0:
        return 1.0
    tail = sum(comb(d, i) for i in range(min(wins, losses) + 1)) / 2**d
    return min(1.0, 2 * tail)


def smallest_significant_split(discordant: int) -> int | None:
    """The fewest wins out of ``discordant`` discordant pairs for which :func:`sign_test_p` < 0.05 (None: none)."""
    for wins in range((discordant + 1) // 2, discordant + 1):
        if sign_test_p(wins, discordant - wins) < 0.05:
            return wins
    return None


def summarize(runs: list[dict]) -> dict:
    """n, accuracy (+ Wilson 95% interval), strict accuracy, facts (M-NIAH), support recall, rounds, seconds and
    (loop methods) the share of round replies on one line."""
    right = sum(bool(x["correct"]) for x in runs)
    traces = [step for x in runs for step in x.get("trace", [])]
    return {
        "n": len(runs),
        "accuracy": 100 * right / len(runs) if runs else float("nan"),
        "accuracy_ci": wilson(right, len(runs)),
        "strict": 100 * mean([float(x["strict"]) for x in runs]),
        "facts": mean([float(x["facts"]) for x in runs]) if runs and "facts" in runs[0] else None,
        "support_recall": 100 * mean([x["support_recall"] for x in runs]),
        "rounds": mean([float(x["rounds"]) for x in runs]) if runs and "rounds" in runs[0] else 1.0,
        "seconds": mean([x["seconds"] for x in runs]) if runs and "seconds" in runs[0] else None,
        "one_line": 100 * mean([float("\n" not in step["reply"].strip()) for step in traces]) if traces else None,
    }


def paired(rows: list[dict], a: str, b: str, key: str) -> dict:
    """Method ``b`` against ``a`` on the same questions: wins (b better), losses, exact McNemar p, mean difference
    of ``key`` (accuracy in points for ``correct``) with a paired bootstrap 95% interval."""
    va = np.array([float(r["runs"][a][key]) for r in rows])
    vb = np.array([float(r["runs"][b][key]) for r in rows])
    wins, losses = int((vb > va).sum()), int((vb < va).sum())
    scale = 100.0 if key == "correct" else 1.0
    lo, hi = paired_bootstrap(vb, va)
    return {
        "a": a,
        "b": b,
        "key": key,
        "n": len(rows),
        "wins": wins,
        "losses": losses,
        "ties": len(rows) - wins - losses,
        "p": sign_test_p(wins, losses),
        "diff": scale * float((vb - va).mean()) if len(rows) else float("nan"),
        "ci": (scale * lo, scale * hi),
        "smallest_significant_wins": smallest_significant_split(wins + losses),
    }


def method_rows(methods: Sequence[str]) -> list[tuple[str, str, bool]]:
    """``(row name, method, round 1 only)`` in table order: each loop method preceded by its round-1 row."""
    out = []
    for m in methods:
        if m in LOOP_METHODS:
            out.append((f"{label(m)} round 1", m, True))
        out.append((label(m), m, False))
    return out


def group_stats(rows: list[dict], methods: Sequence[str]) -> dict:
    key = "facts" if rows[0]["task"] == "mniah" else "correct"
    stats: dict = {
        "n": len(rows),
        "methods": {
            name: summarize([r["runs"][m]["round1"] if first else r["runs"][m] for r in rows])
            for name, m, first in method_rows(methods)
        },
        "pairs": [paired(rows, a, b, key) for a, b in combinations(methods, 2)],
    }
    for m in methods:
        if m in LOOP_METHODS:
            stats["methods"][label(m)] |= {
                "stop_reasons": dict(Counter(r["runs"][m]["stop_reason"] for r in rows)),
                "later_fragments": mean([float(r["runs"][m]["later_fragments"]) for r in rows]),
                "later_gold": sum(r["runs"][m]["later_gold"] for r in rows),
            }
    return stats


def aggregate(records: list[dict], methods: Sequence[str]) -> dict:
    """Per set: the statistics of all its questions (``"all"``) and, for bAbI sets, of each task."""
    out: dict = {}
    for name in dict.fromkeys(r["set"] for r in records):
        rows = [r for r in records if r["set"] == name]
        groups = {"all": group_stats(rows, methods)}
        if rows[0]["task"] != "mniah":
            for task in dict.fromkeys(r["task"] for r in rows):
                groups[task] = group_stats([r for r in rows if r["task"] == task], methods)
        out[name] = groups
    return out


def fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None or value != value else format(value, spec)


def pair_text(pair: dict, unit: str) -> str:
    """``"loop vs single: right where the other was wrong 5 vs 2, McNemar p = 0.45, difference +6 points (95% CI
    -4 to +16)"``."""
    what = "right where the other was wrong" if pair["key"] == "correct" else "more facts than the other"
    spec = "+.0f" if pair["key"] == "correct" else "+.2f"
    lo, hi = pair["ci"]
    return (
        f"{label(pair['b'])} vs {label(pair['a'])}: {what} {pair['wins']} vs {pair['losses']}, McNemar p = "
        f"{pair['p']:.2f}, difference {format(pair['diff'], spec)} {unit} (95% CI {format(lo, spec)} to "
        f"{format(hi, spec)})"
    )


def power_note(pair: dict) -> str:
    """What size of difference these questions can show, for the pair's own count of discordant pairs."""
    n, d = pair["n"], pair["wins"] + pair["losses"]
    need_clean = next((d for d in range(1, n + 1) if sign_test_p(d, 0) < 0.05), None)  # d wins, no losses: 6
    if need_clean is None:
        return f"{n} questions are too few for an exact McNemar test to reach p < 0.05 whatever the results"
    text = (
        f"with {n} questions an exact McNemar test reaches p < 0.05 at the earliest when {need_clean} questions go "
        f"one way and none the other ({100 * need_clean / n:.0f} points)"
    )
    wins = pair["smallest_significant_wins"]
    if wins is None:
        return text + f"; {d} discordant pairs, as here, cannot reach it whatever their split"
    return (
        text + f"; with the {d} discordant pairs seen here it needs a {wins}-{d - wins} split "
        f"({100 * (2 * wins - d) / n:.0f} points)"
    )


def auto_summary(agg: dict, model_name: str, methods: Sequence[str]) -> list[str]:
    """Plain statements read off the numbers (the same rules for any model)."""
    lines = []
    significant = []
    for name, groups in agg.items():
        for group, st in groups.items():
            where = name if group == "all" else f"{name} {group}"
            ms = st["methods"]
            if name.startswith("mniah"):
                facts = ", ".join(f"{label(m)} {fmt(ms[label(m)]['facts'], '.2f')}/3" for m in methods)
                lines.append(f"- {where} ({st['n']} trials): needle facts in the answer: {facts}.")
                unit = "facts"
            else:
                acc = ", ".join(
                    f"{label(m)} {fmt(ms[label(m)]['accuracy'], '.0f')}% "
                    f"[{fmt(ms[label(m)]['accuracy_ci'][0], '.0f')}-{fmt(ms[label(m)]['accuracy_ci'][1], '.0f')}]"
                    for m in methods
                )
                strict = ", ".join(f"{label(m)} {fmt(ms[label(m)]['strict'], '.0f')}%" for m in methods)
                support = ", ".join(f"{label(m)} {fmt(ms[label(m)]['support_recall'], '.0f')}%" for m in methods)
                lines.append(
                    f"- {where} ({st['n']} questions): accuracy {acc} (95% Wilson intervals); strict {strict}; "
                    f"supporting facts shown {support}."
                )
                unit = "points"
            for pair in st["pairs"]:
                lines.append(f"  - {pair_text(pair, unit)}.")
                if pair["p"] < 0.05:
                    significant.append(f"{where}: {label(pair['b'])} vs {label(pair['a'])}")
            if "single" in methods:
                base = ms["single"]["seconds"]
                for m in methods:
                    if m in LOOP_METHODS and base:
                        lm = ms[label(m)]
                        lines.append(
                            f"  - {label(m)}: {fmt(lm['rounds'], '.1f')} rounds, {fmt(lm['seconds'] / base, '.1f')}x "
                            f"the time of single-shot; rounds after the first brought in "
                            f"{fmt(lm['later_fragments'], '.1f')} new fragments per question, {lm['later_gold']} of "
                            f"them supporting facts; round replies on one line {fmt(lm['one_line'], '.0f')}%."
                        )
    babi = [(name, groups["all"]) for name, groups in agg.items() if not name.startswith("mniah")]
    if babi:
        first_name, first_groups = next((n, g) for n, g in agg.items() if not n.startswith("mniah"))
        for group, st in first_groups.items():  # the pooled set, then each task
            if st["pairs"]:
                pair = st["pairs"][0]
                where = first_name if group == "all" else f"{first_name} {group}"
                lines.append(f"- Resolution ({where}, {label(pair['b'])} vs {label(pair['a'])}): {power_note(pair)}.")
        strict = [st["methods"][label(m)]["strict"] for _, st in babi for m in methods]
        if strict and max(strict) < 50:
            lines.append(
                f"- {model_name} does not answer these questions reliably with any method (strict accuracy at most "
                f"{max(strict):.0f}%; bAbI has six locations, so naming one at random is right 1 time in 6)."
            )
    few = [
        f"{name if group == 'all' else f'{name} {group}'}: {label(p['b'])} vs {label(p['a'])}"
        for name, groups in agg.items()
        for group, st in groups.items()
        for p in st["pairs"]
        if 0 < p["wins"] + p["losses"] < 10 and p["p"] >= 0.05 and (p["ci"][0] > 0 or p["ci"][1] < 0)
    ]
    if few:
        lines.append(
            "- The bootstrap interval excludes 0 where fewer than 10 questions differ and the exact test does not "
            f"reach p < 0.05 ({'; '.join(few)}): with so few differing questions a percentile bootstrap is too "
            "narrow; read the McNemar p."
        )
    if methods and len(methods) > 1:
        lines.append(
            "- Differences with McNemar p < 0.05: " + ("; ".join(significant) if significant else "none") + "."
        )
    return lines


def report(res: dict) -> str:
    m = res["machine"]
    methods = res["methods"]
    lines = [
        f"# {res['title']}",
        "",
        f"Command: `{res['command']}`. Machine: {m['cpus']} CPUs ({m['processor']}), load average {m['loadavg_start']}"
        f" at the start and {m['loadavg_end']} at the end (shared machine: timings vary), Python {m['python']}. "
        f"Wall time {res['wall_seconds']:.0f} s (index building {res['index_seconds']:.0f} s of it, "
        f"{res['embedded_texts']} sentences embedded, the rest cached).",
        *(
            []
            if res["complete"]
            else ["", f"**Incomplete run**: it was stopped after the sets below ({len(res['records'])} questions)."]
        ),
        "",
        f"Model: {res['model']}; greedy decoding, seed {res['seed']}. Retriever (every method): `FragRelIndex`, dense "
        f"all-MiniLM-L6-v2 base, `ContextRelation({HAYSTACK_W_REL})`, alpha {HAYSTACK_ALPHA} (the haystack default of "
        f"benchmarks/README.md), k = {res['k']} sentence fragments per retrieval, shown in story order. Loop: "
        f"`InnerLoopEngine` defaults "
        f"(max_loops {res['max_loops']}, threshold 0.9, STM <= 256 tokens, no dedupe); loop constrained: the same "
        f"with `constrained=True` (one-line memory, enforced by the model's grammar). Single-shot: `fragrel ask`'s "
        f"prompt, <= {SINGLE_MAX_TOKENS} new tokens. Methods: {', '.join(label(x) for x in methods)}, each on every "
        "question, in a rotating order. Protocol: the docstring of `benchmarks/bench_inner_loop.py`.",
        "",
    ]
    agg = res["aggregate"]
    babi = {n: g for n, g in agg.items() if not n.startswith("mniah")}
    if babi:
        lines += [
            f"## BABILong-style (bAbI {', '.join(res['tasks'])} dev questions in Robinson Crusoe)",
            "",
            "Accuracy = the answer word is in the reply (95% Wilson interval in brackets); strict = and no other bAbI "
            "location (except those the question names). Support recall = share of the supporting facts among the "
            "fragments shown to the model (a loop: union over its rounds). One line = share of the loop's round "
            "replies without a line break. Seconds per question: retrieval + model calls.",
            "",
            "| set | task | questions | method | accuracy % | strict % | support recall % | rounds | one line % "
            "| s / question |",
            "|---|---|---:|---|---:|---:|---:|---:|---:|---:|",
        ]
        for name, groups in babi.items():
            for group, st in groups.items():
                for method, a in st["methods"].items():
                    lo, hi = a["accuracy_ci"]
                    lines.append(
                        f"| {name} | {group} | {a['n']} | {method} | {fmt(a['accuracy'])} [{fmt(lo, '.0f')}-"
                        f"{fmt(hi, '.0f')}] | {fmt(a['strict'])} | {fmt(a['support_recall'])} | "
                        f"{fmt(a['rounds'], '.2f')} | {fmt(a['one_line'], '.0f')} | {fmt(a['seconds'])} |"
                    )
        lines += [
            "",
            "Paired comparisons (same questions): wins = the second method right where the first was wrong, losses "
            "= the reverse; p = exact two-sided McNemar test; difference = accuracy points of the second minus the "
            "first, with a paired bootstrap 95% interval.",
            "",
            "| set | task | first | second | wins | losses | both same | McNemar p | difference (95% CI) |",
            "|---|---|---|---|---:|---:|---:|---:|---|",
        ]
        for name, groups in babi.items():
            for group, st in groups.items():
                for p in st["pairs"]:
                    lines.append(
                        f"| {name} | {group} | {label(p['a'])} | {label(p['b'])} | {p['wins']} | {p['losses']} | "
                        f"{p['ties']} | {p['p']:.2f} | {p['diff']:+.1f} ({p['ci'][0]:+.1f} to {p['ci'][1]:+.1f}) |"
                    )
    mniah = {n: g for n, g in agg.items() if n.startswith("mniah")}
    if mniah:
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
        for name, groups in mniah.items():
            for method, a in groups["all"]["methods"].items():
                lines.append(
                    f"| {name} | {a['n']} | {method} | {fmt(a['facts'], '.2f')} | {fmt(a['accuracy'])} | "
                    f"{fmt(a['support_recall'])} | {fmt(a['rounds'], '.2f')} | {fmt(a['seconds'])} |"
                )
    stops = [
        f"{name} {method}: {a['stop_reasons']}"
        for name, groups in agg.items()
        for method, a in groups["all"]["methods"].items()
        if "stop_reasons" in a
    ]
    if stops:
        lines += ["", "Loop stop reasons: " + "; ".join(stops)]
    summary = auto_summary(agg, res["model_short"], methods)
    lines += ["", "## Summary (generated from the numbers above)", "", *summary, ""]
    lines += ["## Examples (first question of each set)", ""]
    seen = set()
    for r in res["records"]:
        if r["set"] in seen:
            continue
        seen.add(r["set"])
        lines.append(f"- {r['set']} {r['id']}: “{r['question']}” (answer: {', '.join(r['answers'])})")
        for method in methods:
            run = r["runs"][method]
            if method not in LOOP_METHODS:
                lines.append(f"  - {label(method)}: `{one_line(run['reply'])}`")
                continue
            for i, step in enumerate(run["trace"], start=1):
                lines.append(f"  - {label(method)} round {i} (shown {step['shown']}): `{one_line(step['stm'])}`")
    return "\n".join(lines) + "\n"


def one_line(text: str, limit: int = 200) -> str:
    text = " ".join(text.split()).replace("`", "'")
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ------------------------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=default_data_dir(), help="the shared data folder")
    ap.add_argument(
        "--n", type=int, default=3, help="questions per bAbI task (1-100, the dev part) and M-NIAH trials per length"
    )
    ap.add_argument("--lengths", default="8k,32k", help="haystack lengths in words, comma-separated (8k, 32000)")
    ap.add_argument("--sets", default="babilong,mniah", help="which sets: babilong, mniah or both")
    ap.add_argument("--tasks", default=",".join(_BABI_FILES), help="bAbI tasks for the babilong set, e.g. qa2,qa3")
    ap.add_argument("--methods", default="single,loop", help=f"comma-separated, from {', '.join(METHODS)}")
    ap.add_argument("--k", type=int, default=5, help="fragments per retrieval (every method)")
    ap.add_argument("--max-loops", type=int, default=5, help="most rounds of the loop (ILM-TR uses 5)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--base-url", default=None, help="an OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1")
    ap.add_argument("--model", default=None, help="the model name that server serves")
    ap.add_argument("--context-window", type=int, default=None, help="the served model's context window (tokens)")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR / "inner_loop.md")
    ap.add_argument("--title", default="Inner loop (ILM-TR) vs single-shot retrieval", help="the report's heading")
    args = ap.parse_args(argv)
    if args.n < 1 or args.k < 1 or args.max_loops < 1:
        raise SystemExit("--n, --k and --max-loops must be positive")
    try:
        lengths = [parse_length(x) for x in args.lengths.split(",") if x.strip()]
        sets = parse_choices(args.sets, ("babilong", "mniah"), "--sets")
        tasks = parse_choices(args.tasks, tuple(_BABI_FILES), "--tasks")
        methods = parse_choices(args.methods, METHODS, "--methods")
    except ValueError as exc:
        raise SystemExit(str(exc)) from exc
    if "babilong" in sets and args.n > DEV_QUESTIONS:
        raise SystemExit(f"--n is at most {DEV_QUESTIONS} for bAbI: questions 0-99 are the dev part (DESIGN.md)")
    if not lengths:
        raise SystemExit("--lengths names no length")

    wall = time.perf_counter()
    loadavg_start = loadavg()
    model, model_name = make_model(args)
    from fragrel_integrations.models.local import default_embedder

    embedder = default_embedder()
    cache = CachedEmbedder("babilong")  # the cache name bench_quality.py uses for the same haystack sentences
    engines = {
        "loop": InnerLoopEngine(None, model, max_loops=args.max_loops, show_progress=False),
        "loop-constrained": InnerLoopEngine(
            None, model, max_loops=args.max_loops, show_progress=False, constrained=True
        ),
    }
    if "loop-constrained" in methods and not supports_format(model, engines["loop-constrained"].stm_format()):
        raise SystemExit(f"{model_name} does not enforce the loop's memory format: loop-constrained would be the loop")

    items: list[dict] = []
    for words in lengths:
        if "babilong" in sets:
            items += babilong_items(args.data, words, args.n, args.seed, tasks)
        if "mniah" in sets:
            items += mniah_items(args.data, words, args.n, args.seed)
    set_sizes = Counter(item["set"] for item in items)

    records: list[dict] = []
    index_seconds, embedded_before = 0.0, cache.n_embedded
    for i, item in enumerate(items, start=1):
        start = time.perf_counter()
        index = build_index(item, cache, embedder)
        index_seconds += time.perf_counter() - start
        retrieve = functools.partial(index.retrieve, k=args.k, order=ORDER)
        runs = {}
        for method in methods[i % len(methods) :] + methods[: i % len(methods)]:  # rotating order (prompt cache)
            if method == "single":
                runs[method] = run_single(item, index, model, args.k)
            else:
                runs[method] = run_loop(item, engines[method].with_retriever(retrieve))
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
                "runs": {m: runs[m] for m in methods},
            }
        )
        logger.info(
            "[%d/%d] %s %s: %s",
            i,
            len(items),
            item["set"],
            item["id"],
            ", ".join(f"{m} {runs[m]['correct']} ({runs[m]['seconds']:.1f} s)" for m in methods),
        )
        done = sum(r["set"] == item["set"] for r in records)
        if done == set_sizes[item["set"]]:  # a set is complete: write what we have (a stopped run keeps it)
            res = {
                "title": args.title,
                "command": shlex.join(
                    ["python", "benchmarks/bench_inner_loop.py", *(argv if argv is not None else sys.argv[1:])]
                ),
                "machine": machine_info(loadavg_start),
                "model": model_name,
                "model_short": args.model or "SmolLM2-135M-Instruct",
                "seed": args.seed,
                "k": args.k,
                "max_loops": args.max_loops,
                "lengths": lengths,
                "tasks": tasks,
                "methods": methods,
                "complete": i == len(items),
                "needles": [{"text": t, "key": w} for t, w in NEEDLES],
                "needle_question": NEEDLE_QUESTION,
                "wall_seconds": time.perf_counter() - wall,
                "index_seconds": index_seconds,
                "embedded_texts": cache.n_embedded - embedded_before,
                "aggregate": aggregate(records, methods),
                "records": records,
            }
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(report(res), encoding="utf-8")
            write_json(args.out.with_suffix(".json"), res)
    sys.stdout.write(args.out.read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    raise SystemExit(main())
