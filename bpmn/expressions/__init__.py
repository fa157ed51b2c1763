"""Camunda's expression languages (JUEL, FEEL) translated at deploy into sandboxed Python."""
from bpmn.expressions.python import Translation, dialect_of, translate

__all__ = ["Translation", "dialect_of", "translate"]
