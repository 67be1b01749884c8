"""A scenario file on plain Locust, e.g. a cluster's master and workers::

    TPOT_SCENARIO=scenarios/sweep.yaml locust -f locustfiles/scenario.py --master --host URL
    TPOT_SCENARIO=scenarios/sweep.yaml locust -f locustfiles/scenario.py --worker --master-host M

The same user classes, open-loop traffic, bursts, phases and SLOs as ``tpot-locust run``
gives Locust (every process needs the same file). ``tpot-locust sweep --master-url`` drives
such a master's web UI step by step.
"""

from tpot_locust.harness.entry.scenario_locustfile import *  # noqa: F403
