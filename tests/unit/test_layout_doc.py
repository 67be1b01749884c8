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


def test_every_environment_variable_is_listed() -> None:
    listed = set(re.findall(r"`(TPOT_[A-Z0-9_]+)`", (ROOT / "docs/environment.md").read_text()))
    read = set()
    for path in PACKAGE.rglob("*.py"):
        read |= set(re.findall(r'"(TPOT_[A-Z0-9_]+)"', path.read_text()))
    assert read and not read - listed, f"docs/environment.md lacks {sorted(read - listed)}"
