"""Watching the process and the server: loop lag, yields, GC, orphans and the server's metrics."""
