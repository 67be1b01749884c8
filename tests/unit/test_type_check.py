"""The package passes its type check (``mypy`` as configured in pyproject.toml's
``[tool.mypy]``; .ci/run runs it too): a renamed summary key, a missing argument or a
wrong type fails here, not in a user's report (issue 28)."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT

mypy_api = pytest.importorskip("mypy.api", reason="mypy is in the test extra")


def test_the_package_passes_mypy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # mypy reads pyproject.toml and its files from here
    report, errors, status = mypy_api.run([])
    assert status == 0, f"mypy found problems:\n{report}{errors}"
