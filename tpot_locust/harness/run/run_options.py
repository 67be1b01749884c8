"""What a process's run reads from Locust's parsed options: where results go, how often it
reports, whether it runs headless, and the SLOs it is gated on.

Locust parses our options (``listeners``: ``--tpot-*``) onto its own namespace, which
declares none of them: they are read by name here, with their defaults.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tpot_locust.common import env_vars
from tpot_locust.common.results_folder import ResultsFolder
from tpot_locust.harness.load.scenario_in_use import ScenarioInUse
from tpot_locust.scenario.loader import ScenarioError, load_scenario, split_settings
from tpot_locust.scenario.slo import SloSpec

DEFAULT_REPORT_INTERVAL_S = 1.0


def slo_of(options: Any, in_use: ScenarioInUse | None) -> SloSpec | None:
    """The SLOs this run is gated on: the scenario's (``tpot-locust run``), or those of
    ``--tpot-slo FILE`` (plain Locust); None when there are none."""
    if in_use is not None:
        spec = in_use.scenario.slo
    elif path := getattr(options, "tpot_slo", None):
        try:
            spec = load_scenario(Path(path)).slo
        except ScenarioError as error:
            print(f"tpot-locust: --tpot-slo: {error}", file=sys.stderr, flush=True)
            raise SystemExit(2) from None
    else:
        return None
    return None if spec.empty and spec.goodput is None and spec.pace is None else spec


def results_folder(options: Any, tests_started: int) -> ResultsFolder | None:
    """``--tpot-out``; the second and later tests of one web-UI session each get a
    folder of their own in it (``test-2``, ...), so none overwrites another's results."""
    out = getattr(options, "tpot_out", None)
    if not out:
        return None
    root = Path(out) / f"test-{tests_started}" if tests_started > 1 else Path(out)
    return ResultsFolder(root)


def take_test_settings(options: Any) -> list[str]:
    """This test's ``--tpot-set`` settings, taken: the web form's next Start does not send
    the field, so they are this test's only."""
    settings = split_settings(getattr(options, "tpot_set", None))
    if settings:
        options.tpot_set = ""
    return settings


def is_headless(options: Any) -> bool:
    return bool(getattr(options, "headless", False))


def is_supervised() -> bool:
    """Under ``tpot-locust run``, which finishes the run itself (``env_vars.SUPERVISED``)."""
    return env_vars.is_set(env_vars.SUPERVISED)


def report_interval_s(options: Any) -> float:
    """``--tpot-report-interval``: seconds between reports and time-series points."""
    value = getattr(options, "tpot_report_interval", None)
    return float(value or DEFAULT_REPORT_INTERVAL_S)
