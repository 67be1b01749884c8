"""The compose file as a user runs it headless: the image built from the Dockerfile, the
simulator, a master and two workers in containers of their own, results in a folder.

Docker must run here (``.ci/run`` installs Debian's ``docker.io`` and starts ``dockerd``);
with no image registry, the Dockerfile's base is built from Debian's packages
(``.ci/docker-base``, BASE_IMAGE). Skipped, saying why, where Docker cannot run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_command
from tests.helpers.distributed import free_port
from tests.process.test_distributed import check_exact_merge

pytestmark = pytest.mark.timeout(900)
WORKERS = 2
IMAGE = "tpot-locust:latest"  # the compose file's image


def _compose() -> list[str]:
    """Docker's compose plugin, or the standalone docker-compose (Debian's)."""
    if run_command(["docker", "compose", "version"], timeout=30).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.skip("no docker compose (plugin or docker-compose)")


def _base_image() -> str:
    """The image the Dockerfile starts from: ``BASE_IMAGE``, else python:3.11-slim when it
    is here, else one built from Debian's packages (``.ci/docker-base``)."""
    if given := os.environ.get("BASE_IMAGE"):
        return given
    if run_command(["docker", "image", "inspect", "python:3.11-slim"], timeout=30).returncode == 0:
        return "python:3.11-slim"
    if not shutil.which("debootstrap"):
        pytest.skip("no base image: python:3.11-slim is not here and debootstrap is missing")
    built = run_command([str(ROOT / ".ci/docker-base")], timeout=900)
    if built.returncode != 0:  # no Debian mirror reachable: nothing to build an image on
        pytest.skip(f"no base image: .ci/docker-base failed: {built.stderr.strip()[-300:]}")
    return built.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def image() -> str:
    if not shutil.which("docker"):
        pytest.skip("docker is not installed")
    if run_command(["docker", "info"], timeout=60).returncode != 0:
        pytest.skip("the Docker daemon is not running (dockerd)")
    base = _base_image()
    built = run_command(
        ["docker", "build", "-q", "--build-arg", f"BASE_IMAGE={base}", "-t", IMAGE, "."],
        timeout=900,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    return base


def _compose_run(
    tmp_path: Path, base: str, master_args: str, extra: tuple[Path, ...] = ()
) -> tuple[int, str, Path]:
    """``up`` as documented in docker-compose.yml; the master's exit code, every
    container's log, and the results folder (``extra`` files copied into it first)."""
    results = tmp_path / "results"
    results.mkdir()
    for path in extra:
        shutil.copy(path, results / path.name)
    project = f"tpotci{uuid.uuid4().hex[:8]}"
    env = {
        "BASE_IMAGE": base,
        "TPOT_RESULTS": str(results),
        "TPOT_MASTER_ARGS": master_args,
        "TPOT_WORKER_ARGS": "--tpot-out /results",
        "TPOT_SIM_ARGS": "--truth /results/truth.jsonl",
        # free ports on this machine: a busy CI host may hold the defaults
        "TPOT_SIM_PORT": str(free_port()),
        "TPOT_WEB_PORT": str(free_port()),
        "TPOT_METRICS_PORT": str(free_port()),
    }
    compose = [*_compose(), "-p", project, "-f", str(ROOT / "docker-compose.yml")]
    try:
        up = run_command(
            [*compose, "up", "-d", "--no-build", "--scale", f"worker={WORKERS}"],
            timeout=300,
            env=env,
        )
        assert up.returncode == 0, up.stderr[-3000:]
        master = run_command([*compose, "ps", "-q", "master"], timeout=60, env=env)
        container = master.stdout.strip()
        waited = run_command(["docker", "wait", container], timeout=300)
        code = int(waited.stdout.strip())
        logs = run_command([*compose, "logs", "--no-color"], timeout=60, env=env).stdout
    finally:
        subprocess.run(
            [*compose, "down", "-v", "-t", "5"],
            capture_output=True,
            timeout=120,
            env=dict(os.environ, **env),
        )
    return code, logs, results


def test_the_headless_compose_run_merges_both_workers_exactly(tmp_path: Path, image: str) -> None:
    """Its master starts healthy without a web UI (its health check is the workers' port),
    waits for both workers, and saves totals equal to the sum of what each worker sent and
    to the simulator's truth; the master's exit code is the run's."""
    args = (
        f"--headless -u 8 -r 8 -t 6s --expect-workers {WORKERS} "
        "--expect-workers-max-wait 120 --tpot-out /results --only-summary"
    )
    code, logs, results = _compose_run(tmp_path, image, args)
    assert code == 0, logs[-4000:]
    summary = check_exact_merge(results, results / "truth.jsonl", workers=WORKERS)
    assert summary["requests"]["ok"] > 0
    assert f"workers: {WORKERS} of {WORKERS} reported in full" in logs


def test_a_gated_compose_run_exits_with_its_verdict(tmp_path: Path, image: str) -> None:
    """An SLO the simulator cannot meet (TTFT p50 of 1 ms, where it waits 30 ms) through
    ``--tpot-slo``: the master exits 1 (the gate's code), with the verdict files. Two
    workers share 2 cores here: a client stall may not decide the verdict (``decisive``)."""
    gate = tmp_path / "gate.yaml"
    gate.write_text(
        "name: compose-gate\nclasses: {chat: {users: 4}}\n"
        "slo: {ttft: {p50: 1ms}, client_stalls: decisive}\n"
    )
    args = (
        f"--headless -u 4 -r 4 -t 4s --expect-workers {WORKERS} "
        "--expect-workers-max-wait 120 --tpot-out /results --only-summary "
        "--tpot-slo /results/gate.yaml"
    )
    code, logs, results = _compose_run(tmp_path, image, args, extra=(gate,))
    verdict = json.loads((results / "verdict.json").read_text())
    assert verdict["verdict"] == "fail" and code == 1, logs[-4000:]
    assert (results / "junit.xml").exists() and (results / "summary.md").exists()
