"""The run's facts: written as the JSON they always were, read back as the same dataclass,
and every fact checked as its type says (the check is derived from the dataclass)."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest

from tpot_locust.common.run_facts import FACT_NAMES, UNCHECKED, RunFacts
from tpot_locust.report.saved_results import FACTS, ResultsError, checked
from tpot_locust.report.summary_types import Summary

FACTS_OF_A_RUN = RunFacts(
    host="http://127.0.0.1:8000",
    complete=True,
    version="1.0",
    users=None,
    scenario="quickstart",
    report_interval_s=1.0,
    start_wall_s=1_700_000_000.5,
    stopped_because=None,
    arrival_clock="kernel",
    read_batch_ms=0.0,
    timeseries=[{"t": 1.0, "users": 2, "tpot": {"p50": 2.5}}],
    bursts={"windows": 1, "failed": 0, "prefill_s": [0.25], "spans_s": [[1.0, 1.25]]},
    warmup_s=2.0,
    window_wall_ns=[1, 2],
    nulls_kept=frozenset({"host", "users", "stopped_because"}),
)


def test_none_is_left_out_unless_the_run_always_writes_it() -> None:
    written = FACTS_OF_A_RUN.to_json()
    assert list(written) == [
        *("host", "complete", "version", "users", "scenario", "report_interval_s"),
        *("start_wall_s", "stopped_because", "arrival_clock", "read_batch_ms", "timeseries"),
        *("bursts", "warmup_s", "window_wall_ns"),
    ]
    assert written["users"] is None and written["stopped_because"] is None
    assert RunFacts().to_json() == {} and RunFacts(complete=False).to_json() == {"complete": False}


def test_saved_facts_read_back_as_they_were_written() -> None:
    document = json.loads(json.dumps(FACTS_OF_A_RUN.to_json()))
    again = checked(Path("histograms.json"), document, FACTS)
    assert again == FACTS_OF_A_RUN and again.to_json() == FACTS_OF_A_RUN.to_json()
    assert checked(Path("h.json"), {"users": 3, "newer": 1}, FACTS) == RunFacts(users=3)
    leaner = FACTS_OF_A_RUN.without("timeseries", "users")
    assert "timeseries" not in leaner.to_json() and "users" not in leaner.to_json()


@pytest.mark.parametrize("name", FACT_NAMES)
def test_every_fact_is_checked_as_its_type_says(name: str) -> None:
    hint = RunFacts.__dataclass_fields__[name].type
    if "UNCHECKED" in str(hint) or name in ("timeseries",):
        return  # read as it is (its readers take what they can), or checked by hand
    refused = []
    for wrong in ("x", {"x": [1]}):
        try:
            checked(Path("h.json"), {name: wrong}, FACTS)
        except ResultsError as error:
            refused.append(str(error))
    assert refused and all(f"h.json: {name}" in message for message in refused)


def test_unchecked_parts_are_named_as_such() -> None:
    assert UNCHECKED.name == "unchecked"
    assert typing.get_type_hints(Summary)["run"] is RunFacts
