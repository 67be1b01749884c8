"""Servers, locustfiles and process helpers the tests share."""
