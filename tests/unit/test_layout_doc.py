"""docs/layout.md names every module of the package: a newcomer finds each room there."""

from __future__ import annotations

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
