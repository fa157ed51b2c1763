"""Advancing instances: the runner (the only code that steps SpiffWorkflow), the events it applies, what an advance produced, human-task rows, timer starts."""
