"""docker-compose and Kubernetes files: well formed, valid against Kubernetes' own schemas,
and their health checks and the gate Job's commands run for real.

No cluster runs here: the manifests are validated offline (``kubernetes-validate`` ships the
API's schemas), and the commands and probes they hold are run against real processes on
127.0.0.1. The compose file runs in Docker in ``test_compose.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.conftest import ROOT, run_command
from tests.helpers.distributed import free_port
from tpot_locust.sim.process import start_simulator

MANIFESTS = sorted((ROOT / "deploy/kubernetes").glob("*.yaml"))
KUBERNETES_VERSIONS = ("1.29.0", kubernetes_validate.utils.latest_version())


def _documents(path: Path) -> list[dict[str, Any]]:
    return [document for document in yaml.safe_load_all(path.read_text()) if document]


def _named(path: Path, kind: str, name: str) -> dict[str, Any]:
    (document,) = [
        d for d in _documents(path) if d["kind"] == kind and d["metadata"]["name"] == name
    ]
    return document


def _container(document: dict[str, Any]) -> dict[str, Any]:
    (container,) = document["spec"]["template"]["spec"]["containers"]
    return container


def test_compose_has_sim_master_worker_with_healthchecks() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"sim", "master", "worker"}
    for name, service in services.items():
        assert service["healthcheck"]["test"][:4] == [
            "CMD",
            "python3",
            "-m",
            "tpot_locust.healthcheck",
        ], name
    # the master's check is the workers' port, which a headless master opens too
    assert services["master"]["healthcheck"]["test"][-1] == "127.0.0.1:5557"
    # published on this machine only (issue 25): the web UI can start tests against any host
    assert services["master"]["ports"] == [
        "127.0.0.1:${TPOT_WEB_PORT:-8089}:8089",
        "127.0.0.1:${TPOT_METRICS_PORT:-9464}:9464",
    ]
    assert services["sim"]["ports"] == ["127.0.0.1:${TPOT_SIM_PORT:-8000}:8000"]
    assert "--master" in services["master"]["command"]
    assert "--worker" in services["worker"]["command"]
    assert "${TPOT_HOST:-http://sim:8000}" in services["master"]["command"]
    assert services["worker"]["depends_on"]["master"]["condition"] == "service_healthy"
    assert compose["x-image"]["build"]["args"]["BASE_IMAGE"] == "${BASE_IMAGE:-python:3.11-slim}"


def test_the_dockerfile_keeps_python_slim_for_users() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert "ARG BASE_IMAGE=python:3.11-slim\nFROM ${BASE_IMAGE}\n" in text


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda path: path.name)
def test_every_manifest_is_valid_against_the_kubernetes_schemas(path: Path) -> None:
    for document in _documents(path):
        for version in KUBERNETES_VERSIONS:
            # strict: a misspelt or unknown field fails, as kubectl --validate=strict does
            kubernetes_validate.validate(document, version, strict=True)


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda path: path.name)
def test_no_master_probe_needs_the_web_ui(path: Path) -> None:
    """A headless master serves no web UI: a probe of :8089 would restart it in a loop."""
    for document in _documents(path):
        if document["kind"] not in ("Deployment", "Job"):
            continue
        container = _container(document)
        for probe in ("readinessProbe", "livenessProbe"):
            if probe in container and document["metadata"]["labels"]["role"] == "master":
                assert container[probe]["tcpSocket"] == {"port": "workers"}, path.name
        ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
        assert ports.get("workers", 5557) == 5557


def test_kubernetes_master_service_and_scalable_workers() -> None:
    path = ROOT / "deploy/kubernetes/tpot-locust.yaml"
    service = _named(path, "Service", "tpot-locust-master")
    assert service["spec"]["type"] == "ClusterIP"  # the web UI stays inside the cluster
    worker = _named(path, "Deployment", "tpot-locust-worker")
    assert worker["spec"]["replicas"] >= 1
    assert "--worker" in _container(worker)["command"][-1]
    assert _named(path, "Deployment", "tpot-locust-master")


def test_the_gate_jobs_run_once_with_matching_worker_counts() -> None:
    path = ROOT / "deploy/kubernetes/tpot-locust-gate.yaml"
    master = _named(path, "Job", "tpot-locust-gate-master")
    worker = _named(path, "Job", "tpot-locust-gate-worker")
    workers = int(_named(path, "ConfigMap", "tpot-locust-gate")["data"]["TPOT_WORKERS"])
    assert master["spec"]["backoffLimit"] == 0  # a retried gate would hide a failed run
    assert master["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert worker["spec"]["parallelism"] == worker["spec"]["completions"] == workers
    assert "livenessProbe" not in _container(worker)  # the master goes when the gate ends
    service = _named(path, "Service", "tpot-locust-gate-master")
    assert [p["port"] for p in service["spec"]["ports"]] == [5557]


def _shell(document: dict[str, Any]) -> str:
    command = _container(document)["command"]
    assert command[:2] == ["sh", "-c"]
    return str(command[2])


def test_the_gate_jobs_commands_gate_a_real_run(tmp_path: Path) -> None:
    """The Jobs' own shell commands, run here as the pods would run them (the master's
    Service name is 127.0.0.1, its volume a folder): the master's exit code is the gate's
    and its log ends with the verdict's summary.md."""
    path = ROOT / "deploy/kubernetes/tpot-locust-gate.yaml"
    results = tmp_path / "results"
    scenario = tmp_path / "gate.yaml"
    scenario.write_text(
        "name: k8s gate\nduration: 4s\nspawn_rate: 4\nserver: {api: chat}\n"
        "classes: {chat: {users: 4, prompt_tokens: 64, output_tokens: 32}}\n"
        "slo: {ttft: {p50: 1ms}, client_stalls: decisive}\n"  # the simulator waits 10 ms
    )
    port = free_port()
    master_command = _shell(_named(path, "Job", "tpot-locust-gate-master"))
    worker_command = _shell(_named(path, "Job", "tpot-locust-gate-worker"))
    master_command = master_command.replace("/results", str(results))
    master_command = master_command.replace("--master ", f"--master --master-bind-port {port} ")
    worker_command = worker_command.replace(
        "tpot-locust-gate-master", f"127.0.0.1 --master-port {port}"
    )
    bin_dir = str(Path(sys.executable).parent)  # locust and tpot-locust, as in the image
    with start_simulator("--gap-ms", "2", "--ttft-ms", "10") as sim:
        env = dict(
            os.environ,
            PATH=f"{bin_dir}:{os.environ['PATH']}",
            TPOT_HOST=sim.url,
            TPOT_LOCUSTFILE="locustfiles/scenario.py",
            TPOT_SCENARIO=str(scenario),
            TPOT_WORKERS="1",
            PYTHONUNBUFFERED="1",
        )
        master = subprocess.Popen(
            ["sh", "-c", master_command],
            cwd=ROOT,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        time.sleep(1)
        worker = subprocess.Popen(
            ["sh", "-c", worker_command],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            output, _ = master.communicate(timeout=120)
        finally:
            master.kill()
            worker.wait(timeout=30)
    verdict = json.loads((results / "verdict.json").read_text())
    assert verdict["verdict"] == "fail" and master.returncode == 1, output[-3000:]
    summary = json.loads((results / "summary.json").read_text())
    assert summary["run"]["scenario"] == "k8s-gate" and summary["requests"]["ok"] > 0
    assert output.rstrip().endswith((results / "summary.md").read_text().rstrip())


def test_the_gate_job_ends_at_once_with_exit_2_on_a_bad_scenario(tmp_path: Path) -> None:
    """A scenario that does not load: the master Job ends with exit 2 (an invalid scenario)
    at once, rather than serve a web UI that waits for a Start until its deadline."""
    path = ROOT / "deploy/kubernetes/tpot-locust-gate.yaml"
    command = _shell(_named(path, "Job", "tpot-locust-gate-master"))
    command = command.replace("/results", str(tmp_path / "results"))
    (tmp_path / "bad.yaml").write_text("name: bad\nclasses: {chat: {users: -1}}\n")
    bin_dir = str(Path(sys.executable).parent)
    env = dict(
        os.environ,
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        TPOT_HOST="http://127.0.0.1:9",
        TPOT_LOCUSTFILE="locustfiles/scenario.py",
        TPOT_SCENARIO=str(tmp_path / "bad.yaml"),
        TPOT_WORKERS="1",
    )
    result = subprocess.run(
        ["sh", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "users" in result.stderr


def test_healthcheck_command() -> None:
    module = [sys.executable, "-m", "tpot_locust.healthcheck"]
    with start_simulator() as sim:
        assert run_command([*module, f"{sim.url}/health"], timeout=30).returncode == 0
        assert run_command([*module, f"127.0.0.1:{sim.port}"], timeout=30).returncode == 0
    assert run_command([*module, f"127.0.0.1:{free_port()}"], timeout=30).returncode == 1


def test_the_masters_health_check_passes_for_a_headless_master() -> None:
    """The compose master's check (the workers' port) against a real headless master that
    waits for its workers: healthy, so the workers that wait on it can start."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    check = compose["services"]["master"]["healthcheck"]["test"][1:]
    port = free_port()
    check[-1] = f"127.0.0.1:{port}"
    check[0] = sys.executable
    master = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            "locustfiles/chat.py",
            "--master",
            "--headless",
            "--master-bind-host",
            "127.0.0.1",
            "--master-bind-port",
            str(port),
            "-u",
            "1",
            "-t",
            "30s",
            "--expect-workers",
            "1",
            "--host",
            "http://127.0.0.1:9",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while run_command(check, timeout=30).returncode != 0:
            assert time.monotonic() < deadline, "the headless master never became healthy"
            time.sleep(0.5)
    finally:
        master.terminate()
        master.wait(timeout=30)
