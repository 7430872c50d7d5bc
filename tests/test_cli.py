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
    env["FRAGREL_EMBEDDER_BACKEND"] = "torch"  # the backend whose model loading draws a bar (OpenVINO draws none)
    cmd = [sys.executable, "-m", "fragrel_integrations.cli", "retrieve", str(book), "Who ate the cheese?", "-k", "1"]
    cmd += ["--scorer", "dense", "--cache-dir", str(tmp_path)]
    quiet = subprocess.run([*cmd, "--quiet"], capture_output=True, text=True, env=env, timeout=300)
    assert quiet.returncode == 0 and quiet.stdout.startswith("#1 ")
    assert "%|" not in quiet.stderr and "Loading" not in quiet.stderr, quiet.stderr
    loud = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert loud.returncode == 0 and "%|" in loud.stderr  # the bar --quiet removes is there without it


# ------------------------------------------------------------------------------ hostile input (issue 25)


def _error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fragrel: error: "), err  # one line, no traceback
    return err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 8, "looks binary (a NUL byte at offset 8)"),
        (bytes(range(128, 256)) * 40, "is not UTF-8 text (5120 of its first 5120 characters are undecodable"),
        (b"", "is empty"),
        (b" \n\t\n  ", "is blank"),
    ],
    ids=["png", "undecodable", "empty", "blank"],
)
@pytest.mark.parametrize("command", ["retrieve", "ask"])
def test_binary_or_empty_book_is_refused(tmp_path, capsys, content, message, command):
    book = tmp_path / "cover.png"
    book.write_bytes(content)
    assert main([command, str(book), "who?", "--scorer", "bm25", "--quiet", "--no-cache"]) == 2
    err = _error_line(capsys)
    assert f"{book} {message}" in err and "give a" in err


@pytest.mark.parametrize("question", ["", "   ", "\n\t"])
@pytest.mark.parametrize("command", ["retrieve", "ask"])
def test_empty_or_blank_question_is_refused(book, capsys, question, command):
    assert main([command, str(book), question, "--scorer", "bm25", "--quiet"]) == 2
    err = _error_line(capsys)
    assert "the question is" in err and "give the question to answer" in err


def test_utf16_book_is_decoded(tmp_path, capsys):
    book = tmp_path / "wide.txt"
    book.write_bytes(TEXT.encode("utf-16"))
    args = ["retrieve", str(book), "who killed the captain", "--scorer", "bm25", "-k", "1", "--json"]
    assert main([*args, "--fragment-words", "50", "--quiet"]) == 0
    assert "captain" in json.loads(capsys.readouterr().out)[0]["text"]


def test_control_characters_in_a_book_never_reach_the_terminal(tmp_path, capsys):
    book = tmp_path / "evil.txt"
    book.write_text(TEXT.replace("the captain", "the \x1b]0;owned\x07\x1b[2J\x9b31m\rcaptain"), encoding="utf-8")
    args = ["retrieve", str(book), "who killed the captain", "--scorer", "bm25", "-k", "1", "--quiet"]
    assert main([*args, "--fragment-words", "50"]) == 0
    out = capsys.readouterr().out
    assert "owned" in out and "captain" in out
    assert not any(c in out for c in "\x1b\x07\x9b\r") and "\ufffd]0;owned\ufffd" in out
    assert main([*args, "--fragment-words", "50", "--json"]) == 0
    assert "\x1b]0;owned\x07" in json.loads(capsys.readouterr().out)[0]["text"]  # JSON keeps it, escaped


def test_the_library_refuses_an_empty_query(book):
    from fragrel_integrations.core import FragRelIndex

    index = FragRelIndex.from_texts([TEXT], fragment_words=50, scorer="bm25")
    for query in ("", "  \n"):
        with pytest.raises(ValueError, match=r"the query is (empty|blank): give the text to retrieve for"):
            index.retrieve(query)
    assert index.retrieve("captain", k=1)


# ------------------------------------------------------------------------------------------ round 4 (issue 36)


def test_retrieve_with_bm25_never_loads_an_embedder(tmp_path):
    """--scorer bm25 reads no embeddings: neither the embedded model nor torch / sentence-transformers is
    imported (checked in a fresh process's ``sys.modules``)."""
    from pathlib import Path

    book = tmp_path / "book.txt"
    book.write_text("Robinson was shipwrecked on an island. " * 200 + "The cook killed the captain.", encoding="utf-8")
    script = (
        "import sys, json\n"
        "from fragrel_integrations.cli import main\n"
        f"code = main(['retrieve', {str(book)!r}, 'who killed the captain', '--scorer', 'bm25', '--json', '--quiet',"
        f" '--cache-dir', {str(tmp_path / 'cache')!r}])\n"
        f"assert code == main(['retrieve', {str(book)!r}, 'who killed the captain', '--scorer', 'bm25', '--json',"
        f" '--quiet', '--embed-model', {str(tmp_path)!r}]) == 0\n"  # a model folder given: still not loaded
        "names = ('torch', 'sentence_transformers', 'transformers', 'fragrel_integrations.models.local')\n"
        "loaded = [m for m in names if m in sys.modules]\n"
        "print(json.dumps({'code': code, 'loaded': loaded}))\n"
    )
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH") or root}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"code": 0, "loaded": []}, done.stderr[-2000:]
    assert "captain" in done.stdout and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("command", ["retrieve", "ask"])
def test_a_question_with_a_non_utf8_byte_is_one_clear_error_line(tmp_path, capsys, command):
    """The shell hands a byte that is not UTF-8 on as a lone surrogate (surrogateescape)."""
    book = tmp_path / "book.txt"
    book.write_text("Robinson was shipwrecked on an island.", encoding="utf-8")
    question = b"who was shipwrecked \xff?".decode("utf-8", "surrogateescape")
    code = main([command, str(book), question, "--scorer", "bm25"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "not UTF-8 (character 20)" in err and "LANG=C.UTF-8" in err and "Traceback" not in err
