"""The maps a newcomer reads stay whole: docs/layout.md names every module of the package,
docs/environment.md every ``TPOT_*`` variable it reads."""

from __future__ import annotations

import re

from tests.conftest import ROOT

PACKAGE = ROOT / "tpot_locust"


def test_every_module_is_named_in_the_layout() -> None:
    layout = (ROOT / "docs" / "layout.md").read_text()
    missing = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path.name != "__init__.py" and path.name not in layout
    )
    assert not missing, f"docs/layout.md does not name: {', '.join(missing)}"


def test_harness_folders_are_small_enough_to_see_at_once() -> None:
    """At most 12 modules sit directly in harness/ or in any folder of it (issue 56)."""
    harness = PACKAGE / "harness"
    crowded = {
        str(folder.relative_to(PACKAGE)): count
        for folder in (harness, *(path for path in harness.rglob("*") if path.is_dir()))
        if (count := sum(1 for path in folder.glob("*.py") if path.name != "__init__.py")) > 12
    }
    assert not crowded, f"more than 12 modules in {crowded}"


def test_every_environment_variable_is_listed() -> None:
    listed = set(re.findall(r"`(TPOT_[A-Z0-9_]+)`", (ROOT / "docs/environment.md").read_text()))
    read = set()
    for path in PACKAGE.rglob("*.py"):
        read |= set(re.findall(r'"(TPOT_[A-Z0-9_]+)"', path.read_text()))
    assert read and not read - listed, f"docs/environment.md lacks {sorted(read - listed)}"
