"""Import this in a locustfile to record, merge and report per-token timings::

    import tpot_locust.plugin  # noqa: F401  (records and reports TPOT, TTFT, ITL, ...)
    from tpot_locust import ChatUser

Importing it registers tpot-locust's listeners on Locust's events (its command-line
options, the recorder, the master/worker links, the TPOT tab, the report at quit), as a
locustfile's own ``@events`` listeners would be. The user classes do not import it.
"""

from tpot_locust.harness import listeners as _listeners  # noqa: F401

__all__: list[str] = []
