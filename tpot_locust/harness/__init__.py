"""Everything that imports Locust: the user classes, the plugin that wires the recorder
into Locust's events, a process's run state, open-loop traffic and bursts, the master and
worker links, the web UI tab, and the event loop's lag probe.

Importing it changes nothing: a process's run (``listeners.get_state``) connects
aggregation's yield to gevent (``watch.loop_yield``) when it makes its recorder."""
