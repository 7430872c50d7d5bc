"""Module paths renamed in the one-place-per-concept layout keep working for one release, with a warning that
names the new path."""

from __future__ import annotations

import importlib
import sys

import pytest

MOVED_MODULES = [
    ("fragrel_integrations.core.scoring", "fragrel_integrations.core.relation_aware", "fragrel_scores"),
    ("fragrel_integrations.core.code.relation", "fragrel_integrations.core.code.code_relation", "CodeRelation"),
    ("fragrel_integrations.core.tree.relation", "fragrel_integrations.core.tree.tree_relation", "TreeRelation"),
    ("fragrel_integrations.core.code.scorers", "fragrel_integrations.core.scorers", "JaccardScorer"),
]
MOVED_NAMES = [
    ("fragrel_integrations.core.code.build", "code_scorer"),
    ("fragrel_integrations.core.code.build", "CODE_SCORER_NAMES"),
    ("fragrel_integrations.core.code.build", "CodeScorerName"),
    ("fragrel_integrations.core.code.index", "code_scorer"),
    ("fragrel_integrations.core.code.index", "CodeScorerName"),
]


@pytest.mark.parametrize(("old", "new", "name"), MOVED_MODULES)
def test_old_module_warns_naming_the_new_one_and_gives_the_same_objects(old, new, name):
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated: import from {new}".replace(".", r"\.")):
        module = importlib.import_module(old)
    new_module = importlib.import_module(new)
    assert getattr(module, name) is getattr(new_module, name)
    assert all(getattr(module, n) is getattr(new_module, n) for n in module.__all__)


@pytest.mark.parametrize(("old", "name"), MOVED_NAMES)
def test_moved_name_warns_and_is_the_scorers_one(old, name):
    from fragrel_integrations.core import scorers

    module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=r"fragrel_integrations\.core\.scorers"):
        value = getattr(module, name)
    assert value is getattr(scorers, name)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        module.nothing  # noqa: B018


def test_the_package_itself_imports_no_deprecated_path():
    code = (
        "import warnings; warnings.simplefilter('error');"
        "import fragrel_integrations.core, fragrel_integrations.core.code, fragrel_integrations.core.tree,"
        " fragrel_integrations.core.inner_loop, fragrel_integrations.cli, fragrel_integrations.cli_code"
    )
    import subprocess

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_lenient_triplets_from_the_controller_warns_and_is_the_lenient_one():
    from fragrel_integrations.core.triplets import controller, lenient

    with pytest.warns(DeprecationWarning, match=r"core\.triplets\.lenient"):
        value = controller.lenient_triplets
    assert value is lenient.lenient_triplets
    assert set(controller.__all__) == {
        "DEFAULT_MAX_REPLY_CHARS",
        "AnswerResult",
        "MemorizeResult",
        "TripletMemoryController",
    }
