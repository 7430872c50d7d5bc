import json
import os
import subprocess
import sys

import pytest

from fragrel_integrations.cli import main

TEXT = " ".join(f"filler{i}" for i in range(300)) + " the captain was killed by the cook " + "tail " * 50


@pytest.fixture
def book(tmp_path):
    p = tmp_path / "book.txt"
    p.write_text(TEXT, encoding="utf-8")
    return p


def test_retrieve_json(book, capsys):
    assert (
        main(
            [
                "retrieve",
                str(book),
                "who killed the captain",
                "--scorer",
                "bm25",
                "-k",
                "2",
                "--json",
                "--fragment-words",
                "50",
                "--quiet",
            ]
        )
        == 0
    )
    hits = json.loads(capsys.readouterr().out)
    assert len(hits) == 2
    assert "captain" in hits[0]["text"]
    assert hits[0]["score"] == pytest.approx(hits[0]["independent_score"] + 0.5 * hits[0]["environment_score"])


def test_retrieve_text_output_and_budget(book, capsys):
    assert (
        main(
            [
                "retrieve",
                str(book),
                "captain",
                "--scorer",
                "bm25",
                "--budget-words",
                "120",
                "--fragment-words",
                "50",
                "--quiet",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.startswith("#1 book.txt[") and "environment=" in out


def test_bad_input_is_a_clear_error(book, capsys):
    assert main(["retrieve", str(book), "q", "--scorer", "bm25", "--w-rel", "2", "--quiet"]) == 2
    assert "w_rel must be in [0, 1]" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="no such file"):
        main(["retrieve", str(book) + ".missing", "q"])


def test_console_script_help():
    out = subprocess.run([sys.executable, "-m", "fragrel_integrations.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "retrieve" in out.stdout


def test_quiet_prints_no_progress_bar_not_even_the_model_loading_one(book, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    cmd = [sys.executable, "-m", "fragrel_integrations.cli", "retrieve", str(book), "Who ate the cheese?", "-k", "1"]
    cmd += ["--scorer", "dense", "--cache-dir", str(tmp_path)]
    quiet = subprocess.run([*cmd, "--quiet"], capture_output=True, text=True, env=env, timeout=300)
    assert quiet.returncode == 0 and quiet.stdout.startswith("#1 ")
    assert "%|" not in quiet.stderr and "Loading" not in quiet.stderr, quiet.stderr
    loud = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert loud.returncode == 0 and "%|" in loud.stderr  # the bar --quiet removes is there without it
