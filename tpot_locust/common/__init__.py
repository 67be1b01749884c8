"""The vocabulary every layer shares and nothing else: failure categories (``errors``),
length and time distributions, the per-request record ``RequestTimings`` and the arrays it
holds, and the one yield function through which long aggregation lets streams be read.
Imports nothing of the package, no Locust and no gevent."""
