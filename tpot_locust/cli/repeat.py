"""``tpot-locust run --repeat N``: the scenario N times with fresh seeds, each a whole run of
its own (its warm-up, its folder ``OUT/run-K``, its report), then how far apart they landed
(``report.repeats``: ``OUT/repeats.json`` and a table) and the series as one run (``OUT``'s
own ``histograms.json``, ``summary.json`` and reports: every run's histograms merged)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from tpot_locust.cli.run import run_scenario
from tpot_locust.cli.run_folder import output_dir
from tpot_locust.cli.run_inputs import RunOptions
from tpot_locust.common.results_folder import ResultsFolder
from tpot_locust.report.finishing import finish_run, saved_summary
from tpot_locust.report.repeats import format_repeats, merged_results, repeat_figures, write_repeats
from tpot_locust.scenario.loader import load_scenario
from tpot_locust.sim.profiles import check_engine

MAX_REPEATS = 100


def run_series(options: RunOptions, count: int | None) -> int:
    """One run, or ``count`` (``--repeat``; else the scenario's ``repeat``) in a series."""
    scenario = load_scenario(options.scenario_path, options.overrides, check_engine=check_engine)
    count = count or scenario.repeat or 1
    if count > MAX_REPEATS:
        raise ValueError(f"repeat {count}: at most {MAX_REPEATS} runs in a series")
    return run_scenario(options) if count == 1 else run_repeated(options, count)


def run_repeated(options: RunOptions, count: int) -> int:
    """Each run's exit code decides nothing alone: the worst of them is the series'."""
    scenario = load_scenario(options.scenario_path, options.overrides, check_engine=check_engine)
    out = output_dir(options, scenario)
    first_seed = scenario.seed if scenario.seed is not None else 1
    codes: list[int] = []
    folders: list[Path] = []
    for index in range(count):
        seed, folder = first_seed + index, out / f"run-{index + 1}"
        print(f"\ntpot-locust: run {index + 1} of {count}, seed {seed}: {folder}", flush=True)
        overrides = [*options.overrides, f"seed={seed}"]
        code = run_scenario(replace(options, out=folder, overrides=overrides))
        codes.append(code)
        if (folder / "summary.json").exists():
            folders.append(folder)
        if code >= 128:  # stopped by a signal: the series stops with it
            break
    if len(folders) >= 1:
        summaries = [saved_summary(folder) for folder in folders]
        figures = repeat_figures(folders, summaries)
        path = write_repeats(out, figures)
        print("\n" + "\n".join(format_repeats(figures)), flush=True)
        print(f"tpot-locust: every run's figures in {path}", flush=True)
        try:
            totals, facts = merged_results(folders)
            finish_run(ResultsFolder(out), totals, facts)
            print(f"tpot-locust: the runs merged into one report in {out}", flush=True)
        except (OSError, ValueError) as error:  # a run's files unreadable: each run's stand
            print(f"tpot-locust: the runs could not be merged: {error}", file=sys.stderr)
    else:
        print("tpot-locust: no run saved results: nothing to compare", file=sys.stderr)
    return max(codes) if codes else 1


__all__ = ["MAX_REPEATS", "run_repeated", "run_series"]
