"""A planted API key reaches the server as ``Authorization: Bearer`` and nothing else.

The key lives only in the environment (``OPENAI_API_KEY``, ``ChatUser.api_key_env``). It
must appear in no output: summary.json, histograms.json, Locust's CSV, HTML, JSON and log
files, stdout/stderr, and the web UI's pages, even when the server echoes it back in an
error message (the client redacts it) and when requests fail (messages are printed).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from tests.conftest import ROOT, run_command
from tests.helpers.fault_server import FaultServer
from tests.helpers.locust_faults import REQUESTS

CLASSES = [
    "Fault_none",
    "Fault_http_500",
    "Fault_echo_key",
    "Fault_echo_key_event",
    "Fault_bad_json",
    "Fault_reset",
]
UI_PAGES = [
    "/",
    "/stats/requests",
    "/stats/report",
    "/stats/requests/csv",
    "/stats/failures/csv",
    "/stats/exceptions/csv",
    "/exceptions",
    "/logs",
    "/tasks",
    "/stats/requests_full_history/csv",
]


def planted_key() -> str:
    return f"sk-planted-{uuid.uuid4().hex}"


def assert_nowhere(key: str, texts: dict[str, str]) -> None:
    core = key.rsplit("-", 1)[1]  # also catches a key with its prefix cut off
    leaks = [where for where, text in texts.items() if key in text or core in text]
    assert not leaks, f"the API key appears in {leaks}"


def read_outputs(folder: Path) -> dict[str, str]:
    files = [path for path in folder.rglob("*") if path.is_file()]
    assert files, folder
    return {str(path): path.read_text(errors="replace") for path in files}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fetch(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.read().decode(errors="replace")
    except urllib.error.HTTPError as error:  # a 404 page is still a page
        return error.read().decode(errors="replace")


def test_planted_key_in_no_locust_output_nor_web_ui(tmp_path: Path) -> None:
    key, out, port = planted_key(), tmp_path / "out", free_port()
    out.mkdir()
    env = dict(os.environ, OPENAI_API_KEY=key, FAULT_NO_QUIT="1", PYTHONUNBUFFERED="1")
    command = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(ROOT / "tests/helpers/locust_faults.py"),
        "--autostart",
        "-u",
        str(len(CLASSES)),
        "-r",
        "100",
        "-t",
        "3s",
        "--autoquit",
        "30",
        "--web-host",
        "127.0.0.1",
        "--web-port",
        str(port),
        "--host",
        "{url}",
        "--tpot-out",
        str(out),
        "--csv",
        str(out / "locust"),
        "--html",
        str(out / "report.html"),
        "--json-file",
        str(out / "stats"),
        "--logfile",
        str(out / "locust.log"),
        *CLASSES,
    ]
    pages: dict[str, str] = {}
    with FaultServer() as server:
        command[command.index("{url}")] = server.url
        process = subprocess.Popen(
            command, env=env, cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline:  # the run stops after -t; the UI stays up
                try:
                    state = json.loads(fetch(base + "/stats/requests")).get("state")
                except (OSError, ValueError):
                    state = None
                if state == "stopped":
                    break
                time.sleep(0.2)
            assert state == "stopped", "the web UI never showed a stopped run"
            pages = {f"web UI {path}": fetch(base + path) for path in UI_PAGES}
            # let the web server finish its last responses: a Ctrl-C in the middle of one
            # prints gevent's KeyboardInterrupt traceback, which is not what we look for
            time.sleep(1)
            process.send_signal(signal.SIGINT)  # Ctrl-C: Locust saves its reports and quits
            stdout, stderr = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
        received = server.stats["authorization"]
    assert process.returncode == 1, stderr[-3000:]  # requests failed, as intended
    assert "Traceback" not in stderr, stderr[-3000:]
    # the key was used: every request carried it, as a bearer token
    assert list(received) == [f"Bearer {key}"] and received[f"Bearer {key}"] >= len(CLASSES)
    outputs = read_outputs(out)
    names = {Path(name).name for name in outputs}
    expected = {"summary.json", "histograms.json", "report.html", "locust.log", "stats.json"}
    assert expected | {"locust_failures.csv"} <= names, names
    # the server echoed the key in two failures: the messages show it redacted
    failures = outputs[str(out / "locust_failures.csv")]
    assert failures.count("[redacted]") == 2, failures
    assert "[redacted]" in pages["web UI /stats/failures/csv"]
    assert_nowhere(key, {**outputs, **pages, "stdout": stdout, "stderr": stderr})


def test_planted_key_in_no_output_of_tpot_locust_run(tmp_path: Path, python: str) -> None:
    key, out = planted_key(), tmp_path / "out"
    result = run_command(
        [
            python,
            "-m",
            "tpot_locust",
            "run",
            "scenarios/quickstart.yaml",
            "--run-time",
            "3s",
            "--out",
            str(out),
        ],
        timeout=120,
        env={"OPENAI_API_KEY": key},
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    outputs = read_outputs(out)
    summary = json.loads(outputs[str(out / "summary.json")])
    assert summary["requests"]["ok"] > 0
    assert_nowhere(key, {**outputs, "stdout": result.stdout, "stderr": result.stderr})


def test_planted_key_echoed_by_the_model_lookup_is_not_shown(tmp_path: Path) -> None:
    key, out = planted_key(), tmp_path / "out"
    with FaultServer() as server:
        result = run_command(
            [
                sys.executable,
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
                str(out),
                "--csv",
                str(out / "locust"),
                "ModelLookupEchoesKey",
            ],
            timeout=60,
            env={"OPENAI_API_KEY": key, "FAULT_MODEL_LOOKUP": "1"},
        )
        received = server.stats["authorization"]
    assert received == {f"Bearer {key}": REQUESTS}  # three lookups, each with the key
    assert_nowhere(key, {**read_outputs(out), "stdout": result.stdout, "stderr": result.stderr})
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"]["errors"] == {"http_4xx": REQUESTS}


def test_a_key_shaped_value_under_any_name_is_in_no_output(tmp_path: Path, python: str) -> None:
    """Issue 43, item 9: ``extra_body.user: sk-...`` was shown verbatim (console, report.html,
    scenario.yaml): redaction by key name alone. A value shaped like a known credential is
    redacted wherever it stands."""
    key, out = "sk-USER-" + planted_key()[-12:].replace("_", "x"), tmp_path / "out"
    result = run_command(
        [
            python,
            "-m",
            "tpot_locust",
            "run",
            "scenarios/quickstart.yaml",
            "--run-time",
            "3s",
            "--set",
            f"server.extra_body={{user: {key}}}",
            "--out",
            str(out),
        ],
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    outputs = read_outputs(out)
    assert "[redacted]" in outputs[str(out / "scenario.yaml")]
    assert_nowhere(key, {**outputs, "stdout": result.stdout, "stderr": result.stderr})
