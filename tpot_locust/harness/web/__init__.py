"""The web UI: the TPOT tab, what a web request may set, and the guard against other sites."""
