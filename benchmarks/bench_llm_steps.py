"""Per-step benchmark of the LLM steps on the embedded offline model (SmolLM2-135M-Instruct, greedy).

    python benchmarks/bench_llm_steps.py                       # every step
    python benchmarks/bench_llm_steps.py --steps tree,triplets # some steps

Each step is measured with and without constrained decoding (the ``ReplyFormat`` a step asks for) in the same
run, so every number stands beside its baseline. Sections (each in its own functions, so other steps can be added
without touching these): ``tree`` (surprise-tree summary replies that parse, on chunks of Robinson Crusoe),
``tree_build`` (``bench_tree.py --summariser both``: build time of the LLM tree, the extractive tree and plain
chunks on the same 3-needle haystacks, with needle recall),
``triplets`` (RET-LLM triplet extraction on bAbI statements: replies that parse, and precision / recall of
subject and object against gold derived from the sentences, old vs new few-shot examples), ``triplet_answers``
(RET-LLM end to end on bAbI qa1: free vs constrained read turns), ``scm`` (SCM activation gates, in
``bench_scm_activation.py``). Dev and held-out parts are reported apart.
Running some steps keeps the other steps' sections of an existing report. Writes
``benchmarks/results/llm_steps.md`` and ``llm_steps.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"

#: step name -> function(args) returning (markdown section, json-able results)
STEPS: dict[str, Callable[[argparse.Namespace], tuple[str, dict]]] = {}


# ------------------------------------------------------------------------------------------------ shared


def _data(args: argparse.Namespace) -> Path:
    return args.data or (BENCH_DIR.parent.parent / "shared" / "data").resolve()


RUNTIME = {"name": "transformers"}  # set from --runtime


def _model() -> Any:
    if RUNTIME["name"] == "llamacpp":
        from fragrel_integrations.models.llama_cpp_chat import LlamaCppChatModel

        return _LLAMA.setdefault("model", LlamaCppChatModel())
    from fragrel_integrations.models.transformers_chat import default_chat_model

    return default_chat_model()


_LLAMA: dict[str, Any] = {}


def _pct(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.0f} %)" if whole else "0/0"


# ------------------------------------------------------------------------------------------------ tree

CRUSOE = Path("babilong") / "noise_books" / "Robinson_Crusoe_pg521.txt"
TREE_WORDS = 400  # about 530 SmolLM2 tokens, near the tree's default chunk_tokens=600
TREE_STARTS = {"dev": 20_000, "held-out": 80_000}  # word offsets into the book (after its Gutenberg header)


def tree_chunks(data: Path, part: str, n: int) -> list[str]:
    """``n`` consecutive chunks of ``TREE_WORDS`` words of Robinson Crusoe (dev and held-out parts apart)."""
    words = (data / CRUSOE).read_text(encoding="utf-8").split()
    start = TREE_STARTS[part]
    return [" ".join(words[start + i * TREE_WORDS : start + (i + 1) * TREE_WORDS]) for i in range(n)]


def run_tree(args: argparse.Namespace) -> tuple[str, dict]:
    """Surprise-tree summary replies (default summary_tokens=300, surprise_tokens=150): share that parse into both
    sections, with the free reply (``constrained=False``, the old behaviour) and under ``summary_format``."""
    from fragrel_integrations.core.tree.summariser import Summariser

    model = _model()
    out: dict[str, dict] = {}
    rows = []
    for part, n in (("dev", args.tree_n), ("held-out", args.tree_heldout_n)):
        if n <= 0:
            continue
        chunks = tree_chunks(_data(args), part, n)
        for constrained in (False, True):
            start = time.perf_counter()
            results, report = Summariser(model, constrained=constrained, show_progress=False).summarise(chunks)
            seconds = time.perf_counter() - start
            parsed = sum(r.parsed for r in results)
            surprise = sum(bool(r.surprise) for r in results)
            key = f"{part}/{'grammar' if constrained else 'free'}"
            out[key] = {
                "n": n,
                "parsed": parsed,
                "with_surprise": surprise,
                "call_failures": report.call_failures,
                "mean_summary_chars": statistics.mean(len(r.summary) for r in results),
                "seconds_per_call": seconds / n,
                "examples": [{"summary": r.summary[:300], "surprise": r.surprise[:300]} for r in results[:2]],
            }
            rows.append(
                f"| {part} | {'summary_format (grammar)' if constrained else 'free text (before)'} | "
                f"{_pct(parsed, n)} | {_pct(surprise, n)} | {out[key]['mean_summary_chars']:.0f} | "
                f"{seconds / n:.1f} |"
            )
    md = (
        "## Tree summaries (`--steps tree`)\n\n"
        f"Chunks of {TREE_WORDS} words of Robinson Crusoe (dev: from word {TREE_STARTS['dev']}, held-out: from word "
        f"{TREE_STARTS['held-out']}), the summariser's default budgets (300 + 150 tokens), greedy. *Parsed* = the "
        "reply splits into a summary and a surprise section (`SummaryResult.parsed`).\n\n"
        "| part | reply | parsed | non-empty surprise | mean summary chars | s / call |\n|---|---|---|---|---|---|\n"
        + "\n".join(rows)
        + "\n"
    )
    return md, out


# ------------------------------------------------------------------------------------------------ triplets

_BABI = {"qa1": "qa1_single-supporting-fact_test.txt", "qa2": "qa2_two-supporting-facts_test.txt"}
_SKIP_LAST = {"there"}


def babi_statements(data: Path, questions: range, n: int) -> list[tuple[str, str, str]]:
    """``(sentence, subject, object)`` for statements of qa1 and qa2 stories whose questions fall in ``questions``
    (dev: 0-99), half from each task, in file order, de-duplicated. Gold: the first word is the subject, the last
    word (not "there") the object: "Mary got the milk there." -> (Mary, milk)."""
    out: list[tuple[str, str, str]] = []
    for task in ("qa1", "qa2"):
        seen: set[str] = set()
        mine: list[tuple[str, str, str]] = []
        story: list[str] = []
        qn = 0
        for line in (data / "babi" / "en-10k" / _BABI[task]).read_text(encoding="utf-8").splitlines():
            num, _, rest = line.partition(" ")
            if int(num) == 1:
                story = []
            if "\t" in rest:
                if qn in questions:
                    for sentence in story:
                        if sentence not in seen:
                            seen.add(sentence)
                            words = [w for w in sentence.rstrip(".").split() if w.lower() not in _SKIP_LAST]
                            mine.append((sentence, words[0], words[-1]))
                story = []  # each statement once: the ones before this question
                qn += 1
            else:
                story.append(rest.strip())
            if len(mine) >= (n + 1) // 2 or qn >= questions.stop:
                break
        out += mine[: (n + 1) // 2 if task == "qa1" else n // 2]
    return out


def run_triplets(args: argparse.Namespace) -> tuple[str, dict]:
    """RET-LLM ``memorize`` on bAbI statements: replies with at least one well-formed write, and precision /
    recall of the stored (subject, object) against gold, for the old few-shot examples and the new ones, each
    with free replies and under ``WRITE_FORMAT``."""
    from fragrel_integrations.core.triplets import TripletStore
    from fragrel_integrations.core.triplets.controller_prompts import WRITE_EXAMPLES
    from fragrel_integrations.core.triplets.triplet_controller import TripletMemoryController
    from fragrel_integrations.testing import HashingEmbedder

    model = _model()
    old_examples = WRITE_EXAMPLES[3:]  # the examples before issue 14 (Dan Jaffe, Paris, Lisa Wong)
    parts = {"dev": range(0, 100), "held-out": range(100, 1000)}
    out: dict[str, dict] = {}
    rows = []
    for part, questions in parts.items():
        statements = babi_statements(_data(args), questions, args.triplets_n)
        for label, examples in (("old examples", old_examples), ("few-shot (new)", WRITE_EXAMPLES)):
            for constrained in (False, True):
                start = time.perf_counter()
                wellformed = stored = correct = recalled = 0
                for sentence, subject, obj in statements:
                    store = TripletStore(":memory:", embedder=HashingEmbedder(dim=64))  # one per statement
                    ctl = TripletMemoryController(model, store, write_examples=examples, constrained=constrained)
                    result = ctl.memorize(sentence)
                    triplets = [tuple(r.triplet) for r in result.records]
                    wellformed += bool(result.calls)
                    stored += len(triplets)
                    good = [t for t in triplets if t[0].lower() == subject.lower() and obj.lower() in t[2].lower()]
                    correct += len(good)
                    recalled += bool(good)
                seconds = time.perf_counter() - start
                n = len(statements)
                key = f"{part}/{label}/{'grammar' if constrained else 'free'}"
                precision = correct / stored if stored else 0.0
                out[key] = {
                    "n": n,
                    "wellformed": wellformed,
                    "stored": stored,
                    "precision": precision,
                    "recall": recalled / n if n else 0.0,
                    "seconds_per_statement": seconds / n if n else 0.0,
                }
                rows.append(
                    f"| {part} | {label} | {'WRITE_FORMAT (grammar)' if constrained else 'free text'} | "
                    f"{_pct(wellformed, n)} | {stored} | {precision:.2f} | {_pct(recalled, n)} | {seconds / n:.1f} |"
                )
    md = (
        "## Triplet extraction (`--steps triplets`)\n\n"
        f"`TripletMemoryController.memorize` on {args.triplets_n} bAbI statements per part (half qa1, half qa2; "
        "dev: stories of questions 0-99, held-out: later ones). Gold from the sentence: first word = subject, last "
        'word other than "there" = object. *Well-formed* = the reply holds at least one `[MEM_WRITE{..}]` call; '
        "*precision* = stored triplets whose subject is the gold subject and whose object contains the gold "
        "object; *recall* = statements with such a triplet stored (person and place/object). The old examples are "
        "the three before issue 14; the new few-shot set adds three one-fact sentences with names and places not "
        "in bAbI.\n\n"
        "| part | examples | reply | well-formed | stored | precision | recall | s / statement |\n"
        "|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n"
    )
    return md, out


def babi_stories(data: Path, questions: range, n: int) -> list[tuple[list[str], str, str]]:
    """``(statements so far, question, answer)`` for the first ``n`` qa1 questions in ``questions``."""
    out: list[tuple[list[str], str, str]] = []
    story: list[str] = []
    qn = 0
    for line in (data / "babi" / "en-10k" / _BABI["qa1"]).read_text(encoding="utf-8").splitlines():
        num, _, rest = line.partition(" ")
        if int(num) == 1:
            story = []
        if "\t" in rest:
            question, answer, _ = rest.split("\t")
            if qn in questions:
                out.append((list(story), question.strip(), answer.strip()))
            qn += 1
        else:
            story.append(rest.strip())
        if len(out) >= n:
            break
    return out


QA1_PLACES = ("bathroom", "bedroom", "garden", "hallway", "kitchen", "office")


def run_triplet_answers(args: argparse.Namespace) -> tuple[str, dict]:
    """RET-LLM end to end on bAbI qa1: memorize the story (new few-shot examples, under ``WRITE_FORMAT``), then
    ``answer`` the question with free read turns and under ``READ_FORMAT``, with and without relaxed reads;
    correct = the answer names the gold place, strict = and no other qa1 place."""
    from fragrel_integrations.core.triplets import TripletStore
    from fragrel_integrations.core.triplets.controller_prompts import READ_EXAMPLES
    from fragrel_integrations.core.triplets.triplet_controller import TripletMemoryController
    from fragrel_integrations.testing import HashingEmbedder

    # "old": the three read examples before issue 14 (Dan Jaffe, Nimbus Labs, France)
    example_sets = {"new": READ_EXAMPLES, "old": READ_EXAMPLES[:3]}
    model = _model()
    out: dict[str, dict] = {}
    rows = []
    parts = {"dev": range(0, 100), "held-out": range(100, 1000)}
    examples_sets = args.read_examples.split(",")
    unknown = set(examples_sets) - set(example_sets)
    if unknown:
        raise SystemExit(f"--read-examples: unknown {sorted(unknown)}; choose from {sorted(example_sets)}")
    for part in args.parts.split(","):
        items = babi_stories(_data(args), parts[part], args.answers_n)
        stores = []
        for story, _, _ in items:  # one memory per question, written once and read by every condition
            store = TripletStore(":memory:", embedder=HashingEmbedder(dim=64))
            writer = TripletMemoryController(model, store)
            for sentence in story[-6:]:
                writer.memorize(sentence)
            stores.append(store)
        conditions = [(label, c, r) for label in examples_sets for c in (False, True) for r in (False, True)]
        # the old examples only with the default relaxed reads (the read examples are what they compare)
        conditions = [(label, c, r) for label, c, r in conditions if label == "new" or r]
        for label, constrained, relax in conditions:
            correct = strict = read_calls = 0
            start = time.perf_counter()
            for (_, question, answer), store in zip(items, stores, strict=True):
                controller = TripletMemoryController(
                    model,
                    store,
                    constrained_reads=constrained,
                    relax_reads=relax,
                    read_examples=example_sets[label],
                )
                result = controller.answer(question)
                named = {p for p in QA1_PLACES if p in result.answer.lower()}
                correct += answer.lower() in named
                strict += named == {answer.lower()}
                read_calls += bool(result.reads)
            seconds = time.perf_counter() - start
            n = len(items)
            key = f"{part}/{'grammar' if constrained else 'free'}/{'relaxed' if relax else 'exact'}"
            key += "" if label == "new" else f"/{label} examples"
            out[key] = {
                "n": n,
                "read": read_calls,
                "correct": correct,
                "strict": strict,
                "seconds_per_question": seconds / n,
            }
            rows.append(
                f"| {part} | {label} ({len(example_sets[label])}) | "
                f"{'READ_FORMAT (grammar)' if constrained else 'free text'} | "
                f"{'relaxed' if relax else 'exact'} | {_pct(read_calls, n)} | {_pct(correct, n)} | "
                f"{_pct(strict, n)} | {seconds / n:.1f} |"
            )
    md = (
        "## Triplet memory answers (`--steps triplet_answers`)\n\n"
        f"bAbI qa1, {args.answers_n} questions per part: the last six statements memorized (new few-shot examples, "
        "`WRITE_FORMAT`), then `answer(question)`; reads *exact* (`relax_reads=False`) or *relaxed* (the default: a "
        "read whose relation matches nothing is run again for its subject); *correct* = the answer names the gold "
        "place (the extractive fallback included), *strict* = the gold place and no other qa1 place.\n\n"
        "*Read examples*: *new* = `READ_EXAMPLES` (five), *old* = the three before issue 14 (Dan Jaffe, Nimbus Labs, "
        "France), same memories, same run.\n\n"
        "| part | read examples | read turns | reads | read | correct | strict | s / question |\n"
        "|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n"
    )
    return md, out


def tree_build_section(res: dict) -> tuple[str, dict]:
    """The side-by-side numbers of a ``bench_tree.py --summariser both`` result: build time of the LLM tree,
    the extractive tree and plain chunks (embedding them alone), speed-up, and needle recall at ``k_main``."""
    k = str(res["k_main"])
    agg = res["aggregate"]
    llm = agg.get("llm")
    rows, out = [], {}
    for who in res["summarisers"]:
        a = agg[who]
        out[who] = {
            "build_seconds": a["build_seconds"],
            "build_cpu_seconds": a.get("build_cpu_seconds"),
            "speedup_wall": llm["build_seconds"] / a["build_seconds"] if llm else None,
            "speedup_cpu": llm["build_cpu_seconds"] / a["build_cpu_seconds"] if llm else None,
            "recall": {m: a["recall"][m][k] for m in ("tree+surprise", "tree", "chunks", "surprise")},
            "llm_calls": a["llm_calls"],
            "parse_failures": a["parse_failures"],
        }
        o = out[who]
        speed = f"{o['speedup_wall']:.1f}x / {o['speedup_cpu']:.1f}x" if llm else "–"
        rows.append(
            f"| {who} tree | {a['build_seconds']:.1f} | {a.get('build_cpu_seconds', float('nan')):.1f} | {speed} | "
            f"{a['llm_calls']} | {100 * o['recall']['tree+surprise']:.0f} % | {100 * o['recall']['surprise']:.0f} % |"
        )
    first = agg[res["summarisers"][0]]
    chunk_wall, chunk_cpu = first["chunk_embedding_seconds"], first.get("chunk_embedding_cpu_seconds", float("nan"))
    ceiling = f"{llm['build_seconds'] / chunk_wall:.1f}x / {llm['build_cpu_seconds'] / chunk_cpu:.1f}x" if llm else "–"
    out["plain_chunks"] = {"embedding_seconds": chunk_wall, "embedding_cpu_seconds": chunk_cpu}
    rows.append(
        f"| plain chunks (embedding only) | {chunk_wall:.1f} | {chunk_cpu:.1f} | {ceiling} | 0 | "
        f"{100 * first['recall']['chunks'][k]:.0f} % | – |"
    )
    md = (
        "## Tree build: LLM vs model-free vs plain chunks (`--steps tree_build`)\n\n"
        f"`{res['command']}` (the same haystacks for every row; its full report is `tree_both.md`): "
        f"{', '.join(str(x) for x in res['lengths'])} tokens, {res['trials']} haystack(s) per length, 3 needles each "
        f"({first['pairs']} pairs), load average at the start {res['machine']['loadavg_start']}. Speed-up = the LLM "
        "tree's build time over this row's (wall / process CPU time; CPU time moves less with other jobs' load); "
        "for plain chunks it is the most any tree that embeds its chunks with the same model could gain. "
        f"Recall = needle recall@{k}.\n\n"
        "| build | wall s | CPU s | LLM tree / this | LLM calls | recall (all node texts; chunks for the last row) "
        "| recall (surprise notes alone) |\n|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n"
    )
    return md, out


def run_tree_build(args: argparse.Namespace) -> tuple[str, dict]:
    """``bench_tree.py --summariser both --also-mean-vectors`` on ``--tree-lengths`` with a fresh LLM reply
    cache (so the LLM build time is the model's), summarised by :func:`tree_build_section`."""
    import tempfile

    from bench_tree import main as tree_main

    out = RESULTS_DIR / "tree_both.md"
    with tempfile.TemporaryDirectory() as tmp:
        tree_main(
            [
                "--summariser",
                "both",
                "--also-mean-vectors",
                "--lengths",
                args.tree_lengths,
                "--data",
                str(_data(args)),
                "--out",
                str(out),
                "--llm-cache",
                str(Path(tmp) / "replies.sqlite"),
            ]
        )
    return tree_build_section(json.loads(out.with_suffix(".json").read_text()))


def run_scm(args: argparse.Namespace) -> tuple[str, dict]:
    """SCM activation gates: ``bench_scm_activation.py`` (its own report, ``llm_steps_scm.md``)."""
    from bench_scm_activation import main as scm_main

    stem = "llm_steps_scm" if args.runtime == "transformers" else f"llm_steps_scm_{args.runtime}"
    res = scm_main(["--data", str(_data(args)), "--runtime", args.runtime, "--stem", stem])
    md = f"## SCM activation (`--steps scm`)\n\nReported in `{stem}.md` (same run).\n"
    return md, {"report": f"{stem}.json", "n_items": len(res.get("scm", {}).get("items", []))}


STEPS["scm"] = run_scm
STEPS["tree"] = run_tree
STEPS["tree_build"] = run_tree_build
STEPS["triplet_answers"] = run_triplet_answers
STEPS["triplets"] = run_triplets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runtime", choices=["transformers", "llamacpp"], default="transformers")
    parser.add_argument("--steps", default="all", help=f"comma-separated steps among {sorted(STEPS)} or 'all'")
    parser.add_argument("--data", type=Path, default=None, help="the shared data folder (default ../shared/data)")
    parser.add_argument("--tree-n", type=int, default=20, help="dev chunks for the tree step")
    parser.add_argument("--tree-heldout-n", type=int, default=10, help="held-out chunks for the tree step")
    parser.add_argument("--tree-lengths", default="8k", help="haystack lengths for the tree_build step")
    parser.add_argument("--triplets-n", type=int, default=16, help="bAbI statements per part for the triplet step")
    parser.add_argument("--parts", default="dev,held-out", help="parts for triplet_answers (dev, held-out)")
    parser.add_argument("--answers-n", type=int, default=10, help="bAbI qa1 questions per part (triplet_answers)")
    parser.add_argument(
        "--read-examples", default="new", help="read example sets for triplet_answers: new, old or old,new"
    )
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "llm_steps.md", help="the markdown report")
    args = parser.parse_args(argv)
    RUNTIME["name"] = args.runtime
    names = sorted(STEPS) if args.steps == "all" else [s.strip() for s in args.steps.split(",") if s.strip()]
    unknown = [n for n in names if n not in STEPS]
    if unknown:
        parser.error(f"unknown steps {unknown}; choose among {sorted(STEPS)}")
    logging.basicConfig(level=logging.WARNING)
    sections, results = [], {}
    load = os.getloadavg()[0]
    for name in names:
        md, data = STEPS[name](args)
        sections.append(md)
        results[name] = data
    header = (
        "# LLM steps on the embedded model\n\n"
        f"`python benchmarks/bench_llm_steps.py --steps {','.join(names)} --runtime {args.runtime}`: "
        f"SmolLM2-135M-Instruct ({args.runtime}, "
        f"greedy), {len(os.sched_getaffinity(0))} CPUs (load {load:.1f} at the start), Python "
        f"{platform.python_version()}. Every row stands beside its baseline from the same run; sections of steps "
        "not run this time are kept from earlier runs.\n\n"
    )
    # keep the sections of steps not run this time (each section names its step: "(`--steps <name>`)")
    kept: list[str] = []
    if args.out.exists():
        for old in args.out.read_text().split("\n## ")[1:]:
            if not any(f"`--steps {name}`" in old.split("\n", 1)[0] for name in names):
                kept.append("## " + old.rstrip("\n") + "\n")
    old_json = args.out.with_suffix(".json")
    merged = json.loads(old_json.read_text()) if old_json.exists() else {}
    merged.update(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(header + "\n".join(kept + sections))
    old_json.write_text(json.dumps(merged, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
