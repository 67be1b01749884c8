"""The ``tpot-locust`` command: a thin layer that validates, starts the simulator when no
host is given, supervises the Locust processes and gates the result. The only layer that
starts the simulator."""
