"""The engine: the only layer that advances process instances and owns their state."""
