"""What a server says about itself: its Prometheus ``/metrics`` page (vLLM, SGLang, TGI, the
simulator) and a DCGM exporter's GPU page, read into our series.

Why a layer of its own (issue 47): the wire's job is bytes to token events; this is another
thing, sampled by a child process (``scraper``, ``python -m tpot_locust.server_state.scraper``)
and read by the harness (``harness.watch.server_sampler``, ``harness.watch.gpu_samplers``),
the cause windows (``metrics.server_windows``) and the report (``report.server_view``).
Imports only ``common``.

- ``snapshots``: one page parsed into a ``Snapshot``; two of them into an ``Interval``
- ``engines``: each engine's metric names for our series (``EngineNames``: the only place
  that knows them)
- ``dcgm_page``: a DCGM exporter's page: SM clock, power, heat, clock event reasons, XID
- ``scraper``: the child process sampling a page into ``server_metrics.jsonl``
"""
