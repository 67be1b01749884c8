"""The locustfile ``tpot-locust run`` hands to Locust: user classes from ``TPOT_SCENARIO``.

It sits alone in its folder because Locust puts a locustfile's folder on ``sys.path``.

Locust collects User classes from a locustfile's namespace at import, before any command
line option is parsed, so the scenario path travels in the environment (set by the CLI,
the same for the master and every worker).
"""

from __future__ import annotations

import sys
from pathlib import Path

from tpot_locust.common import env_vars
from tpot_locust.common.text_safety import printable
from tpot_locust.harness import listeners  # noqa: F401  (the plugin: our listeners on Locust's events)
from tpot_locust.harness.load.scenario_in_use import use_scenario
from tpot_locust.harness.load.scenario_users import build_shape_class, build_user_classes
from tpot_locust.scenario.loader import ScenarioError, load_scenario, overrides_from_env

_scenario_path = env_vars.text(env_vars.SCENARIO) or None
if not _scenario_path:
    raise SystemExit("the scenario locustfile needs TPOT_SCENARIO=path/to/scenario.yaml")
_overrides = overrides_from_env(env_vars.text(env_vars.OVERRIDES) or None)
try:
    _scenario = load_scenario(Path(_scenario_path), _overrides)
except ScenarioError as _error:  # as `tpot-locust validate` says it: one line a problem, exit 2
    for _line in str(_error).splitlines():
        print(f"tpot-locust: {printable(_line)}", file=sys.stderr)
    raise SystemExit(2) from None
_classes = build_user_classes(_scenario)
use_scenario(_scenario, {cls.__name__: cls for cls in _classes}, Path(_scenario_path), _overrides)
globals().update({cls.__name__: cls for cls in _classes})
_shape = build_shape_class(_scenario)
if _shape is not None:
    globals()[_shape.__name__] = _shape
del _shape  # Locust takes every shape class in the namespace: keep only one name
