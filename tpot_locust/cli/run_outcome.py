"""The end of a run, once every child process stopped: what Locust saved finished
(``report.finishing``) and shown, and the run's exit code from that and Locust's own."""

from __future__ import annotations

import signal
import sys

from tpot_locust.cli.run_inputs import RunOptions
from tpot_locust.common.results_folder import ResultsFolder
from tpot_locust.common.run_facts import NO_FACTS
from tpot_locust.report.finishing import Finished, finish_saved
from tpot_locust.report.first_screen import first_screen
from tpot_locust.report.gate import EXIT_INVALID, unmeasured
from tpot_locust.report.summary import format_full_report
from tpot_locust.report.summary_types import Summary
from tpot_locust.report.verdict_files import format_verdict, write_verdict
from tpot_locust.scenario.model import Scenario

EXIT_USAGE = 2  # Locust's, and ours, for a command line that cannot run


def conclude_run(
    scenario: Scenario, folder: ResultsFolder, options: RunOptions, code: int, check_truth: bool
) -> int:
    """The run's exit code, from what Locust saved (finished and shown here) and its exit
    code ``code``; ``check_truth``: the embedded simulator's truth is there to check."""
    finished = _finish(scenario, folder, options, check_truth)
    if finished is None:
        return _nothing_saved(scenario, folder, code)
    if why := nothing_measured(finished.summary):
        print(
            f"tpot-locust: nothing was measured: {why} (Locust exited {code})",
            file=sys.stderr,
            flush=True,
        )
    if finished.verdict is not None:
        lines = format_verdict(finished.verdict, options.sweep_step)
        print("\n" + "\n".join(lines), flush=True)
    if code >= 128:
        return code  # stopped by a signal: say so
    if code < 0:  # Locust (the master, or a local run) killed (-9: SIGKILL): no whole run
        run = finished.summary.get("run", NO_FACTS)
        what = run.recovered or "its results are incomplete"
        role = "master" if options.workers else "process"
        print(
            f"tpot-locust: the Locust {role} was killed ({_signal_name(-code)}); {what}",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_INVALID
    if why and finished.verdict is None:
        return EXIT_INVALID
    return finished.exit_code(code) or 0


def _nothing_saved(scenario: Scenario, folder: ResultsFolder, code: int) -> int:
    """The exit code of a run that left nothing to finish, Locust's ``code`` said why."""
    if code == EXIT_USAGE:
        print("tpot-locust: Locust refused its command line (see above)", file=sys.stderr)
        return EXIT_USAGE  # an argument after -- it could not take: nothing ran
    if code == EXIT_INVALID:  # it measured, and could not save (a full disk): shown above
        why = f"the results could not be saved (Locust exited {code}): the figures above"
        invalid = exit_unmeasured(scenario, folder, why, "not a valid measurement")
    else:
        why = f"the run saved no results (Locust exited {code})"
        invalid = exit_unmeasured(scenario, folder, why)
    return code if code >= 128 else invalid  # stopped by a signal: say so


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _finish(
    scenario: Scenario, folder: ResultsFolder, options: RunOptions, check_truth: bool
) -> Finished | None:
    """The finishing pass over what Locust saved (``report.finishing``), with the report's
    first screen printed (every table and the checks with ``--report full``); None when
    Locust saved nothing to finish."""
    try:
        finished = finish_saved(
            folder,
            slo=scenario.slo,
            suite=scenario.name,
            truth_tolerance_ms=options.truth_tolerance_ms,
            check_truth=check_truth,
        )
    except (OSError, ValueError) as error:
        if folder.histograms.exists():  # a saved file that cannot be read: say which
            print(f"tpot-locust: {error}", file=sys.stderr, flush=True)
        return None
    summary = finished.summary
    measured = not nothing_measured(summary) or summary["requests"].get("interrupted")
    if measured and not options.full_report:
        text, html = (
            path if path.exists() and not finished.late_errors else None
            for path in (folder.report_text, folder.report)
        )
        screen = first_screen(summary, text, html, sweep_step=options.sweep_step)
        print("\n" + "\n".join(screen), flush=True)
    elif measured:
        print(f"\n{format_full_report(summary)} (results in {folder.root})", flush=True)
    if finished.check_lines and (options.full_report or not measured):
        print("\n".join(finished.check_lines), flush=True)
    if report_error := summary.get("report_error"):
        print(f"tpot-locust: the report is incomplete: {report_error}", file=sys.stderr, flush=True)
    if options.full_report and folder.report.exists() and not finished.late_errors:
        print(f"tpot-locust: report {folder.report}", flush=True)
    return finished


def nothing_measured(summary: Summary) -> str | None:
    """Why a finished run vouches for nothing (None: it measured): not one request
    finished, and no gap of a stream still going arrived inside the window.
    Locust's own exit code does not say so (a scenario whose name Locust read as --version
    exited 0 having run nothing)."""
    requests = summary.get("requests")
    gaps = (summary.get("window") or {}).get("gaps", 0)
    if not (requests and (requests.get("ok") or requests.get("failed"))) and not gaps:
        return "no request finished and no token gap arrived inside the window"
    return None


def exit_unmeasured(
    scenario: Scenario, folder: ResultsFolder, why: str, headline: str = "nothing was measured"
) -> int:
    """Exit 3 (not a valid measurement), with the verdict files when the run is gated."""
    print(f"tpot-locust: {headline}: {why}", file=sys.stderr, flush=True)
    if not scenario.slo.empty:
        verdict = unmeasured(scenario.slo, f"{headline}: {why}")
        try:
            write_verdict(folder, verdict, scenario.name)
        except OSError as error:  # a full disk: the verdict is on the terminal still
            print(f"tpot-locust: the verdict files: {error}", file=sys.stderr, flush=True)
        print("\n".join(format_verdict(verdict)), flush=True)
    return EXIT_INVALID
