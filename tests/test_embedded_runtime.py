"""The embedded LLM runs on this host: a long prompt in a fresh process ends with exit status 0 (a native build
that uses CPU instructions the host cannot run dies with SIGILL, which only a subprocess can observe), and a
crashed runtime is reported by the CLI as one line naming the fix."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

# About 300 prompt tokens: llama.cpp's AMX kernels faulted from about 17 tokens on.
LONG_PROMPT = " ".join(
    ["The lighthouse keeper wrote in her diary about every ship that passed the rock that winter."] * 17
)
ROOT = Path(__file__).resolve().parents[1]


def run_python(code: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "PYTHONFAULTHANDLER"},
    )


def test_embedded_default_answers_a_300_token_prompt_in_a_fresh_process():
    proc = run_python(
        f"""
        import json
        from fragrel_integrations.models import default_chat_model
        model = default_chat_model()
        prompt = {LONG_PROMPT!r} + " What did the keeper write about?"
        n = model.count_message_tokens([{{"role": "user", "content": prompt}}])
        reply = model.invoke([{{"role": "user", "content": prompt}}], max_tokens=16)
        print(json.dumps({{"tokens": n, "reply": reply, "runtime": type(model).__name__}}))
        """
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])  # -4 would be SIGILL
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["tokens"] >= 300 and out["reply"].strip()
    assert out["runtime"] == "TransformersChatModel"


def test_llama_cpp_loads_portably_and_answers_a_300_token_prompt():
    pytest.importorskip("llama_cpp")
    proc = run_python(
        f"""
        from fragrel_integrations.models import LlamaCppChatModel
        model = LlamaCppChatModel(n_ctx=1024)
        print(model.invoke({LONG_PROMPT!r} + " What did the keeper write about?", max_tokens=8))
        """
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.strip()


def test_portable_loading_turns_off_extra_buffer_types():
    llama_cpp = pytest.importorskip("llama_cpp")
    from fragrel_integrations.models.llama_cpp_chat import portable_loading

    lib = llama_cpp.llama_cpp
    if not hasattr(lib.llama_model_default_params(), "use_extra_bufts"):
        pytest.fail("this llama-cpp-python has no use_extra_bufts: portable_loading cannot keep AMX kernels off")
    assert lib.llama_model_default_params().use_extra_bufts is True  # llama.cpp's default
    with portable_loading():
        assert lib.llama_model_default_params().use_extra_bufts is False
    assert lib.llama_model_default_params().use_extra_bufts is True  # restored


def test_a_crashed_runtime_is_one_line_naming_the_fix():
    """A child killed by SIGILL (what a faulting native runtime does) is one line and exit status 132."""
    proc = run_python(
        """
        import sys
        from fragrel_integrations.crash_guard import supervise
        sys.exit(supervise([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGILL)"]))
        """
    )
    assert proc.returncode == 128 + signal.SIGILL
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Illegal instruction" in lines[0] and "--base-url" in lines[0]


def test_the_fragrel_command_passes_exit_status_and_output_through(tmp_path):
    import shutil

    exe = shutil.which("fragrel") or pytest.fail("the fragrel console script is not installed")
    proc = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "retrieve" in proc.stdout
    bad = subprocess.run([exe, "ask", str(tmp_path / "missing.txt"), "q?"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1 and "no such file" in bad.stderr  # the CLI's own status and words, passed through
