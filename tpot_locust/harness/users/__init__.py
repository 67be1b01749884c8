"""The simulated users: their classes, each turn planned, built and sent, and what they are told."""
