"""``tpot-locust run`` against a hostile server (issue 25, items 4, 9 and 15): a bad reply
fails its own request and the run's results are written; a model lookup trickled a byte a
second fails requests rather than measuring nothing; credentials a server echoes, and a
password in the host URL, appear in no output.

Each run is a few seconds of load against ``tests/helpers/hostile_stream_server.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import run_command
from tests.helpers.hostile_stream_server import MODEL, HostileStreamServer

SECRETS = {
    "X-Goog-Api-Key": "AIzaSyPLANTED0123456789goog",
    "Ocp-Apim-Subscription-Key": "ocp0123456789planted",
    "X-Custom-Creds": "creds0123456789planted",
}


def scenario_file(tmp_path: Path, name: str, server: dict[str, Any], seconds: int = 3) -> Path:
    scenario = {
        "name": name,
        "duration": f"{seconds}s",
        "spawn_rate": 10,
        "seed": 1,
        "server": {"api": "chat", "include_usage": True, **server},
        "classes": {"chat": {"users": 2, "prompt_tokens": 8, "output_tokens": 4}},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(json.dumps(scenario))  # JSON is YAML
    return path


def run(python: str, scenario: Path, host: str, out: Path) -> Any:
    return run_command(
        [python, "-m", "tpot_locust", "run", str(scenario), "--host", host, "--out", str(out)],
        timeout=120,
    )


def outputs(folder: Path) -> dict[str, str]:
    return {str(p): p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file()}


def test_a_400_digit_usage_count_fails_its_request_and_the_run_keeps_its_results(
    tmp_path: Path, python: str
) -> None:
    out = tmp_path / "out"
    scenario = scenario_file(tmp_path, "hostile-usage", {"model": MODEL})
    with HostileStreamServer(("good", "good", "good", "huge_usage")) as server:
        result = run(python, scenario, server.url, out)
    said = result.stdout + result.stderr
    assert "Traceback" not in said and "OverflowError" not in said, said[-3000:]
    assert (out / "histograms.json").exists(), said[-3000:]
    requests = json.loads((out / "summary.json").read_text())["requests"]
    bad = requests["errors"].get("bad_json", 0)
    assert set(requests["errors"]) == {"bad_json"} and bad >= 1, requests
    assert requests["ok"] >= 2 * bad, requests  # three good replies for each bad one
    assert bad <= server.stats["huge_usage"] and requests["ok"] <= server.stats["good"]


def test_a_model_lookup_at_a_byte_a_second_fails_requests_instead_of_measuring_nothing(
    tmp_path: Path, python: str
) -> None:
    out = tmp_path / "out"
    # no model: each user asks GET /v1/models, within the first-token timeout (1 s) in all
    scenario = scenario_file(tmp_path, "hostile-models", {"timeouts": {"first_token": 1}}, 4)
    with HostileStreamServer(models="trickle") as server:
        result = run(python, scenario, server.url, out)
    said = result.stdout + result.stderr
    assert "Traceback" not in said, said[-3000:]
    requests = json.loads((out / "summary.json").read_text())["requests"]
    assert requests["ok"] == 0 and requests["errors"].get("model_lookup", 0) >= 2, requests
    assert server.stats["models_trickle"] >= 2
    assert "no complete answer within 1 s" in said or "model_lookup" in said


def assert_nowhere(values: list[str], texts: dict[str, str]) -> None:
    leaks = sorted({where for where, text in texts.items() for value in values if value in text})
    assert not leaks, f"a secret appears in {leaks}"


def test_headers_a_server_echoes_are_in_no_output(tmp_path: Path, python: str) -> None:
    out = tmp_path / "out"
    scenario = scenario_file(tmp_path, "hostile-echo", {"model": MODEL, "headers": SECRETS})
    with HostileStreamServer(("good", "echo_headers", "echo_event")) as server:
        result = run(python, scenario, server.url, out)
    said = {"stdout": result.stdout, "stderr": result.stderr}
    assert server.stats["echo_headers"] and server.stats["echo_event"], server.stats
    requests = json.loads((out / "summary.json").read_text())["requests"]
    assert requests["errors"].get("http_4xx") and requests["errors"].get("stream_error_event")
    texts = outputs(out)
    # the saved scenario is redacted by the supervisor (cli/run_folder.py: save_scenario), and
    # report.html shows it: those two are checked by the test below once that is wired
    texts = {k: v for k, v in texts.items() if not k.endswith(("scenario.yaml", "report.html"))}
    assert_nowhere(list(SECRETS.values()), {**texts, **said})
    assert "[redacted]" in result.stdout + result.stderr  # the echoed values, shown redacted


def test_a_password_in_the_host_url_and_secret_headers_are_in_no_output(
    tmp_path: Path, python: str
) -> None:
    out, password = tmp_path / "out", "pw0123456789planted"
    scenario = scenario_file(tmp_path, "hostile-userinfo", {"model": MODEL, "headers": SECRETS})
    with HostileStreamServer(("good", "echo_headers")) as server:
        host = server.url.replace("http://", f"http://user:{password}@")
        result = run(python, scenario, host, out)
    assert (out / "summary.json").exists(), result.stdout[-2000:] + result.stderr[-2000:]
    said = {"stdout": result.stdout, "stderr": result.stderr}
    assert_nowhere([password, *SECRETS.values()], {**outputs(out), **said})


def test_a_server_that_ignores_max_tokens_is_named_and_its_answers_kept_bounded(
    tmp_path: Path, python: str
) -> None:
    """Issue 57, item 4: each answer 2,000 tokens for ``max_tokens`` 4, two turns a session:
    every request counts, the report says the server ignored max_tokens."""
    out = tmp_path / "out"
    scenario = scenario_file(tmp_path, "ignores-max-tokens", {"model": MODEL})
    document = json.loads(scenario.read_text())
    document["classes"]["chat"]["turns"] = 2
    scenario.write_text(json.dumps(document))
    with HostileStreamServer(("good",), tokens=2000) as server:
        result = run(python, scenario, server.url, out)
    said = result.stdout + result.stderr
    assert result.returncode == 0, said[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    ok = summary["requests"]["ok"]
    assert ok > 0 and summary["tokens"]["over_max_tokens"] == ok
    report = (out / "report.txt").read_text()
    assert f"! {ok:,} requests got more output tokens than their max_tokens asked for" in report
