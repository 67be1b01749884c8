"""A run's results folder: named, made ready before anything starts (created, checked
writable, a reused folder's last results cleared), and the scenario saved in it as run."""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from tpot_locust.cli.run_inputs import RunOptions
from tpot_locust.common.results_files import (
    check_writable,
    clear_results,
    clear_temporaries,
    write_file,
)
from tpot_locust.common.results_folder import RESULTS_FILES, ResultsFolder
from tpot_locust.common.secrets import redact_mapping
from tpot_locust.common.text_safety import safe_slug
from tpot_locust.scenario.loader import ScenarioText
from tpot_locust.scenario.model import Scenario


def output_dir(options: RunOptions, scenario: Scenario) -> Path:
    if options.out is not None:
        return options.out
    if scenario.output:
        return Path(scenario.output)
    # a slug: a name such as ../../x or a/b/c stays one folder inside results/
    return Path("results") / f"{safe_slug(scenario.name)}-{time.strftime('%Y%m%d-%H%M%S')}"


def prepare_folder(folder: ResultsFolder) -> None:
    """The folder created and every results file in it writable; a folder that cannot be
    is a usage error (ValueError), before anything starts."""
    try:
        folder.root.mkdir(parents=True, exist_ok=True)
        check_writable([folder.root / name for name in RESULTS_FILES])
        # a reused folder's last results: never this run's, nor rebuilt into it after a crash
        clear_results(folder.histograms, folder.checkpoint, folder.summary, folder.workers)
        clear_temporaries(folder.root)
    except OSError as error:
        raise ValueError(f"results folder {folder.root}: {error.strerror or error}") from None


def save_scenario(path: Path, source: ScenarioText, overrides: list[str]) -> None:
    """``OUT/scenario.yaml``: the scenario as run, --set applied, with the values of headers
    and body fields whose names suggest a secret removed (keys belong in the environment)."""
    document = redact_mapping(source.document(overrides))
    keys = ", ".join(override.partition("=")[0] for override in overrides)
    header = f"# {source.path} as run" + (f"; set on the command line: {keys}" if keys else "")
    write_file(path, header + "\n" + yaml.safe_dump(document, sort_keys=False))
