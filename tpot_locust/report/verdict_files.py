"""A gate's verdict as CI systems read it: ``verdict.json``, ``junit.xml``, ``summary.md``,
and the table the terminal shows last.

``junit.xml`` holds one testcase per SLO (a failure for fail, insufficient-that-fails and
invalid; a skip for insufficient under ``insufficient: warn``), which the test reporters of
Jenkins, GitLab and GitHub read as they are.

The terminal's table (``format_verdict``) is printed under the first screen, and the two
together fit 30 lines of 100 columns (``first_screen.verdict_screen``); the full table, two
lines a check, is ``report.txt``'s (``full=True``).
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from tpot_locust.common.results_files import write_file
from tpot_locust.common.results_folder import ResultsFolder
from tpot_locust.common.text_safety import printable, xml_text
from tpot_locust.report.first_screen import MARKS as _MARKS
from tpot_locust.report.first_screen import measured_text, verdict_headline, verdict_screen
from tpot_locust.report.summary_types import Verdict


def write_verdict(folder: ResultsFolder, verdict: Verdict, suite: str) -> None:
    folder.root.mkdir(parents=True, exist_ok=True)
    write_file(folder.verdict, json.dumps(verdict, indent=2) + "\n")
    # ends with a newline, as a text file does (ElementTree.write leaves it off)
    root = junit_tree(verdict, suite).getroot()
    assert root is not None  # junit_tree made it
    junit = ET.tostring(root, encoding="unicode")
    write_file(folder.junit, f"<?xml version='1.0' encoding='utf-8'?>\n{junit}\n")
    write_file(folder.markdown, format_markdown(verdict, suite) + "\n")


def junit_tree(verdict: Verdict, suite: str) -> ET.ElementTree:
    checks = verdict["checks"]
    warn = verdict.get("insufficient_policy") == "warn"
    cases = list(checks)
    if verdict["run_invalid"]:
        cases.append(
            {
                "name": "run is a valid measurement",
                "verdict": "invalid",
                "why": "; ".join(verdict["run_invalid"]),
                "measured": None,
                "unit": "",
            }
        )
    failures = sum(
        1
        for c in cases
        if c["verdict"] in ("fail", "invalid") or (c["verdict"] == "insufficient" and not warn)
    )
    skipped = sum(1 for c in cases if c["verdict"] == "insufficient" and warn)
    root = ET.Element(
        "testsuites", name="tpot-locust", tests=str(len(cases)), failures=str(failures)
    )
    suite = xml_text(suite)  # a scenario's name: XML 1.0 forbids most control characters
    testsuite = ET.SubElement(
        root,
        "testsuite",
        name=suite,
        tests=str(len(cases)),
        failures=str(failures),
        errors="0",
        skipped=str(skipped),
    )
    for check in cases:
        name, why = xml_text(check["name"]), xml_text(check["why"])
        case = ET.SubElement(testsuite, "testcase", classname=f"slo.{suite}", name=name)
        status = check["verdict"]
        if status == "pass":
            continue
        if status == "insufficient" and warn:
            ET.SubElement(case, "skipped", message=why)
            continue
        message = f"{_MARKS[status]}: {why}"
        element = ET.SubElement(case, "failure", message=message, type=status)
        # the why says what was measured where there was a figure: once, not twice
        said = check["measured"] is None or why.startswith("measured ")
        element.text = why if said else f"measured {xml_text(measured_text(check))}; {why}"
    ET.indent(root)
    return ET.ElementTree(root)


def format_verdict(verdict: Verdict, sweep_step: bool = False, full: bool = False) -> list[str]:
    """The verdict table for the terminal; ``sweep_step``: a sweep's step, whose failing
    is how the sweep finds its knee, not a failed run. Printed under the first screen, it
    is the screen's own compact table (``first_screen.verdict_screen``: the passed checks
    share a line or two); ``full``: two lines a check, every why whole (``report.txt``)."""
    if not full:
        return verdict_screen(verdict, sweep_step)
    lines = [verdict_headline(verdict, sweep_step)]
    for check in verdict["checks"]:
        lines.append(f"  {_MARKS[check['verdict']]:<13}{printable(check['name'])}")
        lines.append(f"  {'':13}{printable(check['why'])}")
    for reason in verdict["run_invalid"]:
        lines.append(f"  {'INVALID':<13}run: {printable(reason)}")
    for warning in verdict["warnings"]:
        lines.append(f"  ! {printable(warning)}")
    return lines


def format_markdown(verdict: Verdict, suite: str) -> str:
    suite = printable(suite)
    lines = [
        f"### tpot-locust `{suite}`: SLO verdict **{verdict['verdict'].upper()}**",
        "",
        "| SLO | measured | samples above | verdict | why |",
        "|---|---:|---:|---|---|",
    ]
    for check in verdict["checks"]:
        above = "-" if check["samples_above"] is None else f"{check['samples_above']:,}"
        lines.append(
            f"| {printable(check['name'])} | {measured_text(check)} | {above} | "
            f"{_MARKS[check['verdict']]} | {printable(check['why'])} |"
        )
    for reason in verdict["run_invalid"]:
        lines.append(f"| run is a valid measurement | - | - | INVALID | {printable(reason)} |")
    for warning in verdict["warnings"]:
        lines += ["", f"> warning: {printable(warning)}"]
    return "\n".join(lines)
