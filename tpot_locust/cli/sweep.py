"""``tpot-locust sweep``: step one load variable until the scenario's SLOs break.

Each step is a whole ``tpot-locust run`` of the scenario with the swept value set
(``classes.C.users``, ``.rate`` or ``.speedup``), its own results folder ``OUT/step-NN-...``
and its own verdict; the sweep stops after the first step that did not pass (``fail``, or
``invalid``: a measurement not to trust, which more load would not make better) or after
the last value, and writes ``sweep.json``, ``sweep.html`` and the table after every step.

With ``--master-url`` every step is instead one test of a running Locust cluster's web-UI
session (``cluster_step``): the cluster's own workers make the load.

Exit codes: 0 a knee was found, 1 the first step already failed its SLOs, 3 the first step
was not a valid measurement, 2 bad input; a signal ends the sweep with the step it stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tpot_locust.cli.cluster_step import ClusterSteps
from tpot_locust.cli.master_api import MasterAPI
from tpot_locust.cli.run import run_scenario
from tpot_locust.cli.run_inputs import RunOptions
from tpot_locust.common.text_safety import safe_slug
from tpot_locust.report.gate import EXIT_FAIL, EXIT_INVALID, EXIT_PASS
from tpot_locust.report.sweep_results import format_sweep, knee, step_row, sure_knee, write_sweep
from tpot_locust.scenario.loader import load_scenario
from tpot_locust.sim.profiles import check_engine


@dataclass
class SweepOptions:
    scenario_path: Path
    host: str | None = None
    out: Path | None = None
    workers: int = 0
    overrides: list[str] = field(default_factory=list)
    max_steps: int | None = None
    master_url: str | None = None  # a running cluster's web UI: each step one test there


def _step_runner(options: SweepOptions) -> Callable[[Path, list[str]], int]:
    """How a step runs: a whole ``tpot-locust run`` here, or a test on a running cluster."""
    if options.master_url:
        if options.workers:
            raise ValueError(
                "--workers starts local workers; with --master-url the "
                "cluster's workers run every step"
            )
        return ClusterSteps(MasterAPI(options.master_url), options.scenario_path, options.host).run
    base = RunOptions(
        options.scenario_path, host=options.host, workers=options.workers, sweep_step=True
    )
    return lambda folder, overrides: run_scenario(replace(base, out=folder, overrides=overrides))


def run_sweep(options: SweepOptions) -> int:
    scenario = load_scenario(options.scenario_path, options.overrides, check_engine=check_engine)
    sweep = scenario.sweep
    if sweep is None:
        raise ValueError(f"{options.scenario_path}: no sweep: block (what to vary)")
    if scenario.slo.empty:
        raise ValueError(f"{options.scenario_path}: a sweep needs an slo: block to find a knee")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = options.out or Path("results") / f"{safe_slug(scenario.name)}-sweep-{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    values = sweep.steps()[: options.max_steps]
    per_step = list(options.overrides)
    if sweep.step_duration is not None:
        per_step.append(f"duration={sweep.step_duration:g}s")
    if sweep.warmup is not None:
        per_step.append(f"warmup={sweep.warmup:g}s")
    steps: list[dict[str, Any]] = []  # one row a step (``step_row``)
    document: dict[str, Any] = {
        "scenario": scenario.name,
        "vary": sweep.vary,
        "class": sweep.class_name,
        "values": values,
        "steps": steps,
        "knee": None,
        "stopped_because": None,
        # the latency SLOs the knee is found against (sweep.html)
        "slo_limits_ms": [
            {"metric": o.metric, "statistic": o.statistic, "limit": o.limit}
            for o in scenario.slo.objectives
            if o.kind == "latency" and o.upper and not o.class_name and not o.model
        ],
    }
    run_step = _step_runner(options)
    code = 0
    for number, value in enumerate(values, start=1):
        shown = int(value) if sweep.vary == "users" else value
        folder = out / f"step-{number:02d}-{sweep.vary}-{shown:g}"
        print(
            f"tpot-locust sweep: step {number}/{len(values)}: {sweep.class_name}."
            f"{sweep.vary} = {shown:g}",
            flush=True,
        )
        code = run_step(folder, [*per_step, f"classes.{sweep.class_name}.{sweep.vary}={shown}"])
        row = step_row(number, shown, folder, code)
        steps.append(row)
        document["knee"] = knee(steps)
        document["sure_knee"] = sure_knee(steps, document["slo_limits_ms"])
        write_sweep(out, document)  # after every step: an interrupted sweep keeps its steps
        if code >= 128:
            document["stopped_because"] = f"step {number} was interrupted (signal {code - 128})"
            break
        if row.get("verdict") != "pass":
            why = ", ".join(row.get("failed") or row.get("run_invalid") or []) or "its verdict"
            document["stopped_because"] = f"step {number} is {row.get('verdict')}: {why}"
            break
    else:
        document["stopped_because"] = "every step met every SLO (raise the limit to go on)"
    write_sweep(out, document)
    print("\n" + "\n".join(format_sweep(document)), flush=True)
    print(f"tpot-locust sweep: {out / 'sweep.json'}, {out / 'sweep.html'}", flush=True)
    if code >= 128:
        return code
    if document["knee"] is not None:
        return EXIT_PASS
    return EXIT_FAIL if steps[0].get("verdict") == "fail" else EXIT_INVALID
