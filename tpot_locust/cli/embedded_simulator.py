"""The simulator a run given no host starts: the scenario's ``simulator`` section as the
server's command line, and the server started with it as a child process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from tpot_locust.scenario.model import Scenario, Simulator, scenario_keys
from tpot_locust.scenario.parsed_values import ParsedDistribution
from tpot_locust.scenario.simulator_section import resolve_profile

if TYPE_CHECKING:
    from tpot_locust.sim.process import SimProcess


def simulator_args(scenario: Scenario) -> list[str]:
    """The ``simulator`` section as the embedded server's command line (``model.Simulator``
    names each key's flag)."""
    simulator = scenario.simulator
    args: list[str] = []
    for name, meta in scenario_keys(Simulator).items():
        value = getattr(simulator, meta["field"])
        if name == "seed" and value is None:
            value = scenario.seed
        if meta["flag"] is None or value is None:
            continue
        if meta["check"] == "flag":  # a switch: given when true
            args += [meta["flag"]] if value else []
            continue
        if isinstance(value, ParsedDistribution):  # as written: the simulator parses it
            text = json.dumps(value.written)
        elif meta["check"] == "distribution_or_zero":  # 0: none
            text = json.dumps(value)
        elif name == "profile":
            text = resolve_profile(value, scenario.base_dir)
        else:
            text = str(value)
        args += [meta["flag"], text]
    if scenario.server.tokenizer:  # the simulator counts prompts as the client builds them
        args += ["--tokenizer", scenario.server.tokenizer]
    for model in dict.fromkeys(name for t in scenario.classes for name in t.model or {}):
        args += ["--adapter", model]  # the classes' models: served beside the base model
    if simulator.profile is not None:
        for key, value in simulator.engine.items():
            args += ["--set", f"{key}={json.dumps(value)}"]
    return args


def start_embedded(scenario: Scenario, truth: Path) -> SimProcess:
    """The scenario's simulator, listening, writing its truth to ``truth``; ``sim.process``
    is imported only by a run that starts one."""
    from tpot_locust.sim.process import start_simulator

    return start_simulator(*simulator_args(scenario), truth=truth)
