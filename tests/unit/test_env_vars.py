"""Every environment variable is declared once (``common/env_vars.py``) and read only
there: numbers finite and in range or refused by name, an undeclared name an error, and
docs/environment.md lists exactly the declared ones (issue 47, item 3)."""

from __future__ import annotations

import ast
import re

import pytest

from tests.conftest import ROOT
from tpot_locust.common import env_vars

PACKAGE = ROOT / "tpot_locust"
NAME = env_vars.STALL_THRESHOLD_MS  # a declared number


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "-1", "1e400", "x", "20001"])
def test_a_bad_number_is_refused_by_name(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setenv(NAME, text)
    with pytest.raises(ValueError, match=f"{NAME}=.*must be a number from 0 to 20000"):
        env_vars.number(NAME, 1.0, 0, 20_000)


def test_unset_gives_the_default_and_a_count_must_be_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(NAME, raising=False)
    assert env_vars.number(NAME, 2.5, 0, 10) == 2.5  # noqa: PLR2004
    monkeypatch.setenv(NAME, "3.5")
    with pytest.raises(ValueError, match="whole number"):
        env_vars.count(NAME, 1, 0, 10)
    monkeypatch.setenv(NAME, " 7 ")
    assert env_vars.count(NAME, 1, 0, 10) == 7  # noqa: PLR2004


def test_an_undeclared_name_is_an_error_at_once() -> None:
    with pytest.raises(KeyError, match="TPOT_STALL_TRESHOLD_MS: not a variable"):
        env_vars.text("TPOT_STALL_TRESHOLD_MS")


def _environment_reads(tree: ast.AST) -> list[int]:
    """Lines that read ``os.environ`` (or ``os.getenv``) other than by copying it whole
    for a child (``dict(os.environ)``)."""
    copied = {
        id(node.args[0])
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "dict"
        and node.args
    }
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "os" and node.attr in ("environ", "getenv", "environb"):
                if id(node) not in copied:
                    lines.append(node.lineno)
    return lines


def test_no_module_but_env_vars_reads_the_environment() -> None:
    readers = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name == "env_vars.py":
            continue
        if lines := _environment_reads(ast.parse(path.read_text())):
            readers[str(path.relative_to(ROOT))] = lines
    assert not readers, f"read os.environ through common/env_vars.py: {readers}"
    named = re.compile(r'"TPOT_[A-Z]')
    literals = {
        str(path.relative_to(ROOT))
        for path in PACKAGE.rglob("*.py")
        if path.name != "env_vars.py" and named.search(path.read_text())
    }
    assert not literals, f"name the variable by its env_vars constant: {sorted(literals)}"


def test_the_doc_lists_exactly_the_declared_variables() -> None:
    doc = (ROOT / "docs/environment.md").read_text()
    users, ours = doc.split("## Between our own processes")
    declared_users = {v.name for v in env_vars.VARIABLES if v.for_users}
    declared_ours = {v.name for v in env_vars.VARIABLES if not v.for_users}
    assert set(re.findall(r"^\| `(TPOT_[A-Z0-9_]+)`", users, re.M)) == declared_users
    assert set(re.findall(r"^\| `(TPOT_[A-Z0-9_]+)`", ours, re.M)) == declared_ours
