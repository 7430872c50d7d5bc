"""Ecosystem fit: import time of each package of the library and token streaming with the embedded SmolLM2-135M.

1. Import time: each module imported in fresh interpreters (``python -X importtime``), minimum and median of
   ``--repeats`` runs, and which heavy frameworks the import pulled in. The minimum is the figure to compare on a
   shared machine (load only ever adds time).
2. Streaming: time to the first token of the embedded model's ``stream`` vs the whole ``invoke`` (same request).
Tool calling is not measured: the embedded model has none (agents use ``ChatOpenAI``/``ChatLlamaCpp`` or
LlamaIndex's ``OpenAILike``/``LlamaCPP`` over a model that calls tools).

Writes ``benchmarks/results/ecosystem.json`` and ``.md``. About 1-2 minutes on 2 shared CPUs. Import times grow
with the machine's load (reported with the results): compare runs made under similar load only.

    python benchmarks/bench_ecosystem.py [--repeats 5] [--skip-llm]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import RESULTS_DIR, loadavg, machine_info

MODULES = (
    "fragrel_integrations",
    "fragrel_integrations.models",
    "fragrel_integrations.langchain",
    "fragrel_integrations.llama_index",
)
HEAVY = ("langchain_core", "langchain", "langgraph", "llama_index", "torch", "sentence_transformers", "llama_cpp")
ROOT = Path(__file__).resolve().parent.parent

WEATHER = [
    ("What's the weather in Paris?", "Paris"),
    ("How is the weather in Tokyo today?", "Tokyo"),
    ("Tell me the weather for Berlin.", "Berlin"),
    ("Is it raining in London right now?", "London"),
    ("Weather in Madrid please", "Madrid"),
]
NO_TOOL = ["What is 2+2?", "Say hello to me.", "Who wrote Hamlet?"]


def import_times(module: str, repeats: int) -> dict:
    code = f"import sys, {module}; print([m for m in {HEAVY!r} if m in sys.modules])"
    times, pulled = [], None
    for _ in range(repeats):
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        run = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, env=env, check=True
        )
        line = re.findall(r"\|\s+(\d+) \| " + re.escape(module) + r"$", run.stderr, re.M)[-1]
        times.append(int(line) / 1e6)
        pulled = run.stdout.strip()
    return {"min_s": min(times), "median_s": statistics.median(times), "runs_s": times, "imports": pulled}


def streaming() -> dict:
    from fragrel_integrations.models.transformers_chat import default_chat_model

    model = default_chat_model()
    messages = [{"role": "user", "content": "Describe the water cycle in three sentences."}]
    model.invoke(messages, max_tokens=8)  # warm up
    start = time.perf_counter()
    whole = model.invoke(messages, max_tokens=96, temperature=0)
    invoke_s = time.perf_counter() - start
    start = time.perf_counter()
    stream = model.stream(messages, max_tokens=96, temperature=0)
    first = next(stream)
    first_s = time.perf_counter() - start
    rest = list(stream)
    stream_s = time.perf_counter() - start
    return {
        "invoke_s": invoke_s,
        "first_token_s": first_s,
        "stream_total_s": stream_s,
        "pieces": 1 + len(rest),
        "same_text": first + "".join(rest) == whole,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-llm", action="store_true", help="only the import times")
    args = parser.parse_args()
    load_start = loadavg()
    result: dict = {"imports": {m: import_times(m, args.repeats) for m in MODULES}}
    if not args.skip_llm:
        result["streaming"] = streaming()
    result["machine"] = machine_info(load_start)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "ecosystem.json").write_text(json.dumps(result, indent=2))
    lines = [
        "# Ecosystem fit",
        "",
        "| module | import min (s) | median (s) | frameworks it imports |",
        "|---|---|---|---|",
    ]
    for module, row in result["imports"].items():
        lines.append(f"| `{module}` | {row['min_s']:.2f} | {row['median_s']:.2f} | {row['imports']} |")
    if "streaming" in result:
        s = result["streaming"]
        lines += [
            "",
            f"Streaming (SmolLM2-135M, 96 tokens): first token after {s['first_token_s']:.2f} s, whole stream "
            f"{s['stream_total_s']:.2f} s in {s['pieces']} pieces, `invoke` {s['invoke_s']:.2f} s; same text: "
            f"{s['same_text']}.",
        ]
    lines += ["", f"Machine: {result['machine']}"]
    (RESULTS_DIR / "ecosystem.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
