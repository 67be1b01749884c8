"""Real engines as servers under test: cached environments, a tiny local model, start/stop."""
