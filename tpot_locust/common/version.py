"""The package's version, importable without importing anything else of it."""

__version__ = "0.1.0"
