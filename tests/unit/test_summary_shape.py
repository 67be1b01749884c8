"""The saved-results checks are derived from the summary's typed shape: every key a type
names is checked as it says, and the required ones must be there."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import pytest

from tpot_locust.report.json_checks import Check, shaped
from tpot_locust.report.saved_results import SUMMARY_EXTRAS, TRUTH, VERDICT, ResultsError, checked
from tpot_locust.report.summary_types import (
    AttributionCheck,
    TailGap,
    TruthCheck,
    Verdict,
    WorstStall,
)

SHAPES: list[tuple[Any, Check]] = [
    (Verdict, VERDICT),
    (TruthCheck, TRUTH),
    (TailGap, shaped(TailGap, {})),
    (WorstStall, shaped(WorstStall, {})),
    (AttributionCheck, shaped(AttributionCheck, {})),
]


def _minimal(kind: Any) -> dict[str, Any]:
    """A value with just the required keys, each as its type wants."""
    examples = {"verdict": "pass", "checks": [], "run_invalid": [], "warnings": []}
    return {key: examples.get(key, 1) for key in kind.__required_keys__}


@pytest.mark.parametrize(("kind", "check"), SHAPES, ids=lambda part: getattr(part, "__name__", ""))
def test_every_typed_key_is_checked(kind: Any, check: Check) -> None:
    checked(Path("f.json"), _minimal(kind), check)  # the minimal value passes
    for key in typing.get_type_hints(kind):
        refused = []
        for wrong in ("x", {"x": [1]}):
            try:
                checked(Path("f.json"), _minimal(kind) | {key: wrong}, check)
            except ResultsError as error:
                refused.append(str(error))
        assert refused, key
        assert all(message.startswith(f"f.json: {key}") for message in refused), refused


@pytest.mark.parametrize(("kind", "check"), SHAPES, ids=lambda part: getattr(part, "__name__", ""))
def test_the_required_keys_must_be_there(kind: Any, check: Check) -> None:
    for key in kind.__required_keys__:
        value = _minimal(kind)
        del value[key]
        with pytest.raises(ResultsError, match=f"f.json: {key}: missing"):
            checked(Path("f.json"), value, check)


def test_what_report_html_keeps_of_a_saved_summary_is_checked() -> None:
    """``report --html`` keeps the attribution check of a saved summary.json: checked too."""
    with pytest.raises(ResultsError, match="summary.json: attribution_check.coverage.of"):
        checked(
            Path("summary.json"), {"attribution_check": {"coverage": {"of": -1}}}, SUMMARY_EXTRAS
        )
