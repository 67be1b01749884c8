"""The load offered: open-loop traffic and bursts, a scenario's user classes and its settings."""
