"""Everything that imports Locust: the user classes, the plugin that wires the recorder
into Locust's events, a process's run state, open-loop traffic and bursts, the master and
worker links, the web UI tab, and the event loop's lag probe."""

from tpot_locust.harness import loop_yield

# In every process that runs the harness, aggregation (metrics, report) yields to gevent's
# loop between slices of work, so streams are read meanwhile.
loop_yield.install()
