"""Metrics: HDR histograms, the per-process ``Recorder`` (intervals and deltas), burst
phases, client stall windows, and the master-side ``Collector`` (totals, time series,
interval logs). Imports ``common`` only; never Locust or gevent: aggregation yields through
``common.cooperation``, which the harness connects to gevent."""
