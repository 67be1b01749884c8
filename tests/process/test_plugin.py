"""The plugin is imported by the locustfile, never as a side effect of the user classes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import run_command
from tpot_locust.sim.process import start_simulator

WITHOUT_PLUGIN = """\
from tpot_locust import ChatUser


class Chat(ChatUser):
    output_tokens = 8
"""


def test_importing_the_user_classes_registers_nothing() -> None:
    code = (
        "import sys; from tpot_locust import ChatUser; "
        "print('tpot_locust.harness.listeners' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr


def test_a_locustfile_without_the_plugin_is_told_so(tmp_path: Path) -> None:
    locustfile = tmp_path / "no_plugin.py"
    locustfile.write_text(WITHOUT_PLUGIN)
    with start_simulator() as sim:
        result = run_command(
            [
                sys.executable,
                "-m",
                "locust",
                "-f",
                str(locustfile),
                "--headless",
                "-u",
                "3",
                "-r",
                "3",
                "-t",
                "2s",
                "--host",
                sim.url,
                "--only-summary",
            ],
            timeout=60,
        )
    assert "the plugin is not loaded" in result.stderr
    assert "import tpot_locust.plugin" in result.stderr
    assert result.stderr.count("the plugin is not loaded") == 1  # once, not per user
