"""Ecosystem fit: import time of each package of the library, token streaming and tool calling with the embedded
SmolLM2-135M.

1. Import time: each module imported in fresh interpreters (``python -X importtime``), minimum and median of
   ``--repeats`` runs, and which heavy frameworks the import pulled in. The minimum is the figure to compare on a
   shared machine (load only ever adds time).
2. Streaming: time to the first token of ``LlamaCppChatModel.stream`` vs the whole ``invoke`` (same request).
3. Tool calling: ``create_agent(FragRelChatModel(model=LlamaCppChatModel()), tools=[get_weather])`` on five
   weather requests (did it call the tool with the right city; did the final answer use the tool's result), and
   ``invoke_with_tools`` on three requests that need no tool (did it answer directly); the same five requests
   through LlamaIndex's ``FunctionAgent(tools=[...], llm=FragRelLLM(model=LlamaCppChatModel()))``.

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
    from fragrel_integrations.models import LlamaCppChatModel

    model = LlamaCppChatModel(n_ctx=2048)
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


def tool_calling() -> dict:
    from langchain.agents import create_agent
    from langchain_core.tools import tool

    from fragrel_integrations.langchain import FragRelChatModel
    from fragrel_integrations.models import LlamaCppChatModel

    model = LlamaCppChatModel(n_ctx=2048)
    called: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        called.append(city)
        return f"It is sunny and 21 degrees in {city}."

    agent = create_agent(FragRelChatModel(model=model, max_tokens=48, temperature=0), tools=[get_weather])
    rows = []
    for question, city in WEATHER:
        called.clear()
        start = time.perf_counter()
        out = agent.invoke({"messages": [{"role": "user", "content": question}]}, {"recursion_limit": 8})
        answer = out["messages"][-1].content
        rows.append(
            {
                "question": question,
                "tool_calls": list(called),
                "right_call": called == [city],
                "answer": answer,
                "answer_uses_result": "sunny" in answer.lower() and city.lower() in answer.lower(),
                "seconds": time.perf_counter() - start,
            }
        )
    schema = get_weather.tool_call_schema.model_json_schema()
    function = {"name": "get_weather", "description": get_weather.description, "parameters": schema}
    spec = [{"type": "function", "function": function}]
    direct = []
    for question in NO_TOOL:
        reply = model.invoke_with_tools(question, spec, max_tokens=32)
        direct.append({"question": question, "answered_directly": not reply.tool_calls, "content": reply.content})
    return {"agent": rows, "no_tool_needed": direct}


async def _run_agent(agent, question: str):  # benchmark script, not library code
    return await agent.run(question)


def llama_index_tool_calling() -> list[dict]:
    import asyncio

    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.tools import FunctionTool

    from fragrel_integrations.llama_index import FragRelLLM
    from fragrel_integrations.models import LlamaCppChatModel

    called: list[str] = []

    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        called.append(city)
        return f"It is sunny and 21 degrees in {city}."

    llm = FragRelLLM(model=LlamaCppChatModel(n_ctx=2048), max_tokens=48, temperature=0)
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(get_weather)], llm=llm)
    rows = []
    for question, city in WEATHER:
        called.clear()
        start = time.perf_counter()
        answer = str(asyncio.run(_run_agent(agent, question)))
        rows.append(
            {
                "question": question,
                "tool_calls": list(called),
                "right_call": called == [city],
                "answer": answer,
                "answer_uses_result": "sunny" in answer.lower() and city.lower() in answer.lower(),
                "seconds": time.perf_counter() - start,
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-llm", action="store_true", help="only the import times")
    args = parser.parse_args()
    load_start = loadavg()
    result: dict = {"imports": {m: import_times(m, args.repeats) for m in MODULES}}
    if not args.skip_llm:
        result["streaming"] = streaming()
        result["tools"] = tool_calling()
        result["tools"]["llama_index_agent"] = llama_index_tool_calling()
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
        agent, direct = result["tools"]["agent"], result["tools"]["no_tool_needed"]
        lines += [
            "",
            f"Tool calling (create_agent, SmolLM2-135M): right tool call {sum(r['right_call'] for r in agent)}/"
            f"{len(agent)}, final answer uses the tool result {sum(r['answer_uses_result'] for r in agent)}/"
            f"{len(agent)}; requests needing no tool answered directly "
            f"{sum(r['answered_directly'] for r in direct)}/{len(direct)}.",
            "",
            "| question | tool calls | answer | s |",
            "|---|---|---|---|",
        ]
        for r in agent:
            answer = r["answer"].replace("\n", " ").replace("|", "/")[:80]
            lines.append(f"| {r['question']} | {r['tool_calls']} | {answer} | {r['seconds']:.1f} |")
        li = result["tools"]["llama_index_agent"]
        lines += [
            "",
            f"LlamaIndex FunctionAgent (FragRelLLM over SmolLM2-135M): right tool call "
            f"{sum(r['right_call'] for r in li)}/{len(li)}, final answer uses the tool result "
            f"{sum(r['answer_uses_result'] for r in li)}/{len(li)}.",
            "",
            "| question | tool calls | answer | s |",
            "|---|---|---|---|",
        ]
        for r in li:
            answer = r["answer"].replace("\n", " ").replace("|", "/")[:80]
            lines.append(f"| {r['question']} | {r['tool_calls']} | {answer} | {r['seconds']:.1f} |")
    lines += ["", f"Machine: {result['machine']}"]
    (RESULTS_DIR / "ecosystem.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
