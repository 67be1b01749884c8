"""Every fault a server can commit is counted under its category; nothing else is harmed.

One real Locust run (``tests/helpers/locust_faults.py``: one user class per fault of
``tests/helpers/fault_server.py``, three requests each) is checked per fault against
``summary.json``, Locust's failure CSV and what the server did; then the same faults at
unit level through ``stream_request`` (completions API, exact text), and the command
line's bad inputs: one line on stderr and exit code 2, or a finished run, never a traceback.
"""

from __future__ import annotations

import csv
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, run_command
from tests.helpers.fault_catalogue import FAULTS, PARTIAL_FAULTS, expected_text
from tests.helpers.fault_server import FaultServer
from tests.helpers.locust_faults import OUTPUT_TOKENS, REQUESTS
from tpot_locust.common.clock import stamp_ns
from tpot_locust.wire.http_client import HTTPConnection, Origin
from tpot_locust.wire.streaming import StreamRequest, stream_request

STALL_S = 1.5  # the server's stalls: well beyond the client's 0.5 s timeouts
WHOLE_REQUEST = ("request_tpot", "e2e", "worst_gap")


def requests_of(fault: str) -> int:
    return 2 * REQUESTS if fault == "utf8_split" else REQUESTS


def partial_tokens(fault: str) -> int | None:
    """Tokens a failed request of this fault received before failing (None: varies)."""
    if fault == "slow_total":
        return None
    if fault in PARTIAL_FAULTS:
        return 3
    return OUTPUT_TOKENS if fault == "no_finish" else 0


@dataclass
class FaultRun:
    returncode: int
    stdout: str
    stderr: str
    summary: dict[str, Any]
    failures: list[dict[str, str]]
    server: dict[str, Any]
    seconds: float


@pytest.fixture(scope="module")
def fault_run(tmp_path_factory: pytest.TempPathFactory) -> FaultRun:
    out = tmp_path_factory.mktemp("faults")
    with FaultServer(stall_s=STALL_S) as server:
        started = time.perf_counter()
        result = run_command(
            [
                sys.executable,
                "-m",
                "locust",
                "-f",
                str(ROOT / "tests/helpers/locust_faults.py"),
                "--headless",
                "-u",
                str(len(FAULTS)),
                "-r",
                "1000",
                "-t",
                "60s",
                "--host",
                server.url,
                "--tpot-out",
                str(out),
                "--csv",
                str(out / "locust"),
                "--only-summary",
            ],
            timeout=120,
        )
        seconds = time.perf_counter() - started
        stats = server.stats
    summary_path = out / "summary.json"
    assert summary_path.exists(), result.stdout[-3000:] + result.stderr[-3000:]
    with open(out / "locust_failures.csv") as handle:
        failures = list(csv.DictReader(handle))
    return FaultRun(
        result.returncode,
        result.stdout,
        result.stderr,
        json.loads(summary_path.read_text()),
        failures,
        stats,
        seconds,
    )


def test_fault_run_completes_without_crash(fault_run: FaultRun) -> None:
    # exit code 1 is Locust's rule when requests failed; 2 would be an unhandled exception
    assert fault_run.returncode == 1, fault_run.stderr[-3000:]
    assert "Traceback" not in fault_run.stderr + fault_run.stdout, fault_run.stderr[-5000:]
    assert fault_run.seconds < 45, "the run should quit once every class is done"
    summary = fault_run.summary
    assert summary["complete"] is True
    assert set(summary["classes"]) == {f"Fault_{fault}" for fault in FAULTS}
    successes = sum(requests_of(f) for f, category in FAULTS.items() if category is None)
    expected_errors: dict[str, int] = {}
    for fault, category in FAULTS.items():
        if category is not None:
            expected_errors[category] = expected_errors.get(category, 0) + requests_of(fault)
    assert summary["requests"]["errors"] == dict(sorted(expected_errors.items()))
    assert summary["requests"]["ok"] == successes
    # the whole-request histograms hold the successful requests and nothing else; every
    # gap counts, a failed request's before it failed too (docs/metrics.md, "The window")
    assert summary["metrics"]["e2e"]["count"] == successes
    classes = summary["classes"].values()
    assert summary["metrics"]["tpot"]["count"] == sum(
        c["metrics"]["tpot"]["count"] for c in classes
    )
    assert summary["tokens"]["output"] == successes * OUTPUT_TOKENS
    # the server saw each request once: no hidden retries of failed requests
    assert fault_run.server["requests"] == {f: requests_of(f) for f in FAULTS}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_fault_is_counted_under_its_category(fault_run: FaultRun, fault: str) -> None:
    name, category, count = f"Fault_{fault}", FAULTS[fault], requests_of(fault)
    summary = fault_run.summary["classes"][name]
    requests, tokens, metrics = summary["requests"], summary["tokens"], summary["metrics"]
    rows = [row for row in fault_run.failures if row["Name"] == name]
    if category is None:
        assert requests == {**requests, "ok": count, "failed": 0, "errors": {}}
        assert metrics["tpot"]["count"] == count * (OUTPUT_TOKENS - 1)
        assert metrics["itl"]["count"] == count * (OUTPUT_TOKENS - 1)
        for metric in ("ttft", "e2e", "request_tpot", "worst_gap"):
            assert metrics[metric]["count"] == count, metric
        assert tokens["output"] == count * OUTPUT_TOKENS and tokens["partial"] == 0
        assert tokens["estimated"] is False
        assert rows == []
        return
    assert requests["errors"] == {category: count}
    assert requests["ok"] == 0 and requests["failed"] == count
    for metric in WHOLE_REQUEST:  # failed requests stay out of the whole-request figures
        assert metrics[metric]["count"] == 0, metric
    assert tokens["output"] == 0
    expected_partial = partial_tokens(fault)
    if expected_partial is None:
        assert tokens["partial"] >= count  # a token every 0.1 s until the 1 s total timeout
        assert metrics["itl"]["count"] == tokens["partial"] - count  # one token an event
    else:
        assert tokens["partial"] == count * expected_partial
        # the gaps before the failure count, and the TTFT of a request that had a token
        assert metrics["itl"]["count"] == count * max(expected_partial - 1, 0)
        assert metrics["ttft"]["count"] == (count if expected_partial else 0)
    # Locust's failure table (and CSV) shows the category first
    assert sum(int(row["Occurrences"]) for row in rows) == count, rows
    for row in rows:
        assert f"{category}: " in row["Error"], row


def test_429_failure_shows_retry_after(fault_run: FaultRun) -> None:
    (row,) = [row for row in fault_run.failures if row["Name"] == "Fault_http_429"]
    assert "Retry-After: 1" in row["Error"]


def test_split_utf8_answers_come_back_intact(fault_run: FaultRun) -> None:
    # two-turn sessions: the server checks that turn 2 sent back exactly what it streamed
    assert fault_run.server["history_ok"] == {"utf8_split": REQUESTS}
    assert fault_run.server["history_bad"] == {}


def test_keepalive_closed_by_server_is_retried_transparently(fault_run: FaultRun) -> None:
    # the server closed the connection after every response: each request needed a new one
    assert fault_run.server["connections"]["close_keepalive"] == REQUESTS
    assert fault_run.summary["classes"]["Fault_close_keepalive"]["requests"]["ok"] == REQUESTS


# --------------------------------------------------------------------------- unit level


def completions_request(fault: str, **timeouts: float) -> StreamRequest:
    values = dict(first_token_timeout=0.3, idle_timeout=0.3, total_timeout=1.0)
    values.update(timeouts)
    body = {
        "model": "m",
        "prompt": "hi",
        "max_tokens": OUTPUT_TOKENS,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    return StreamRequest(
        user_class="Unit",
        api="completions",
        request_id=fault,
        path="/v1/completions",
        headers={"X-Fault": fault, "Content-Type": "application/json"},
        body=json.dumps(body).encode(),
        prompt_tokens_requested=1,
        t_intended_ns=stamp_ns(),
        **values,
    )


@pytest.fixture(scope="module")
def unit_server():
    with FaultServer(stall_s=STALL_S) as server:
        yield server


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_fault_through_stream_request(unit_server: FaultServer, fault: str) -> None:
    connection = HTTPConnection(Origin.parse(unit_server.url))
    try:
        timings, text = stream_request(connection, completions_request(fault))
        # the connection stays usable after any fault
        after, _ = stream_request(connection, completions_request("none"))
    finally:
        connection.close()
    assert after.ok, after.error_message
    elapsed_s = (timings.t_end_ns - timings.t_send_ns) / 1e9
    category = FAULTS[fault]
    assert timings.error_category == category, timings.error_message
    if category is None:
        assert text == expected_text(fault, OUTPUT_TOKENS)
        assert timings.output_tokens == OUTPUT_TOKENS == len(timings.token_stamps)
        assert list(timings.token_stamps) == sorted(timings.token_stamps)
        return
    if category.startswith("timeout_"):
        # each timeout fires at its own deadline, long before the server's stall ends
        limit = 1.0 if category == "timeout_total" else 0.3
        assert limit * 0.95 <= elapsed_s < limit + 0.5, elapsed_s
    expected_partial = partial_tokens(fault)
    if expected_partial is not None:
        assert len(timings.token_stamps) == expected_partial


# --------------------------------------------------------------------------- no harm


def tpot_locust(args: list[str], python: str, timeout: float = 60, **kwargs: Any):
    return run_command([python, "-m", "tpot_locust", *args], timeout=timeout, **kwargs)


@pytest.mark.parametrize(
    ("case", "args", "content"),
    [
        ("missing file", ["run", "{dir}/missing.yaml"], None),
        ("malformed YAML", ["run", "{dir}/bad.yaml"], "name: x\nclasses: [\n"),
        ("unknown key", ["run", "{dir}/bad.yaml"], "name: x\nbogus: 1\nclasses: {c: {users: 1}}\n"),
        ("bad value", ["run", "{dir}/bad.yaml"], "name: x\nclasses:\n  c:\n    users: -1\n"),
        ("bad --set", ["run", "scenarios/quickstart.yaml", "--set", "nokey"], None),
        ("bad --run-time", ["run", "scenarios/quickstart.yaml", "--run-time", "soon"], None),
        ("no scenario", ["run"], None),
        ("bad --users", ["run", "scenarios/quickstart.yaml", "--users", "many"], None),
        ("unknown command", ["explode"], None),
        ("report of nothing", ["report", "{dir}/nothing"], None),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, python: str, case: str, args: list[str], content: str | None
) -> None:
    if content is not None:
        (tmp_path / "bad.yaml").write_text(content)
    result = tpot_locust([arg.format(dir=tmp_path) for arg in args], python)
    assert result.returncode == 2, (case, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    errors = [line for line in result.stderr.splitlines() if "error" in line or ": " in line]
    assert errors, result.stderr
    if not result.stderr.startswith("usage:"):  # argparse adds its usage line
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_unreachable_host_is_a_failed_run_not_a_crash(tmp_path: Path, python: str) -> None:
    """Plain Locust (``tpot-locust run`` refuses a dead host before it starts, see
    test_failures.py): every request a connection error, counted, no crash."""
    out = tmp_path / "out"
    result = run_command(
        [
            python,
            "-m",
            "locust",
            "-f",
            str(ROOT / "locustfiles/chat.py"),
            "--headless",
            "-u",
            "2",
            "-r",
            "2",
            "-t",
            "2s",
            "--host",
            "http://127.0.0.1:1",
            "--only-summary",
            "--tpot-out",
            str(out),
        ],
        timeout=90,
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr + result.stdout, result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    errors = summary["requests"]["errors"]
    assert set(errors) == {"connection_error"} and errors["connection_error"] > 0
    assert summary["requests"]["ok"] == 0 and summary["metrics"]["tpot"]["count"] == 0
    assert "connection_error" in result.stdout  # the report names the category


def test_default_think_time_multi_turn_sessions_do_not_raise(tmp_path: Path, python: str) -> None:
    with FaultServer() as server:
        result = run_command(
            [
                python,
                "-m",
                "locust",
                "-f",
                str(ROOT / "tests/helpers/locust_faults.py"),
                "--headless",
                "-u",
                "1",
                "-r",
                "10",
                "-t",
                "20s",
                "--host",
                server.url,
                "--only-summary",
                "--tpot-out",
                str(tmp_path),
                "TwoTurnsDefaultThinkTime",
            ],
            timeout=60,
            env={"FAULT_DEFAULT_THINK": "1"},
        )
        history_ok = server.stats["history_ok"]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.returncode == 0, result.stderr[-3000:]
    assert history_ok == {"none": 1}  # the second turn was sent, with the first answer


def test_non_http_host_is_a_usage_error(tmp_path: Path, python: str) -> None:
    result = tpot_locust(
        [
            "run",
            "scenarios/quickstart.yaml",
            "--host",
            "ftp://127.0.0.1",
            "--run-time",
            "1s",
            "--out",
            str(tmp_path / "out"),
        ],
        python,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_locust_arguments_after_double_dash_are_accepted(tmp_path: Path, python: str) -> None:
    result = tpot_locust(
        [
            "run",
            "scenarios/quickstart.yaml",
            "--run-time",
            "3s",
            "--out",
            str(tmp_path / "out"),
            "--",
            "--stop-timeout",
            "3",
        ],
        python,
        timeout=90,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
