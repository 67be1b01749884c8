"""A process's run: its state, role and ticks, its options and facts, workers and the master."""
