"""What a run reports: ``summary.json`` and the tables (``summary``), the truth check, the
SLO gate and its verdict files, comparing two runs, the progress line. Reads merged
metrics and scenarios; never Locust or gevent."""
