"""The version of Baton's own keys in a stored instance state, and one migration step per version.

Baton keeps a few keys of its own inside SpiffWorkflow's state: markers in a task's
``internal_data`` (``baton_dispatched``: an HTTP task handed to its job; ``baton_failed``: its call
failed, so ``process.retry`` calls again; since version 2 ``baton_from``: the element the flow into
a task came from, when the task was re-attached because its parent was pruned).

Version 2: the saved tree is pruned (``engine.store.pruning``): finished tasks that nothing reads
again are gone, their elements are rows of ``instance_steps``. A version 1 state is a whole tree
without ``baton_from``, which version 2 reads as it is (nothing was pruned yet); its next save
prunes it. When their names or meaning change, ``CURRENT`` grows
by one and ``STEPS`` gets the function that rewrites a state of the previous version, as
SpiffWorkflow's serializer migrates its own keys (its version is checked separately).
"""
from __future__ import annotations

from typing import Any, Callable

from engine.errors import BatonError

VERSION_KEY = "baton_version"
CURRENT = 2


def _from_unversioned(state: dict[str, Any]) -> dict[str, Any]:
    """States written before the version existed already use version 1's keys."""
    return state


def _from_whole_tree(state: dict[str, Any]) -> dict[str, Any]:
    """A version 1 state is the whole tree: a version 2 state with nothing pruned yet."""
    return state


STEPS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {0: _from_unversioned, 1: _from_whole_tree}
STAMP = {VERSION_KEY: CURRENT}  # the extra keys every saved state carries


def upgrade(state: dict[str, Any]) -> dict[str, Any]:
    """A stored state (its version key removed) brought to ``CURRENT``, one step at a time."""
    version = state.pop(VERSION_KEY, 0)
    if not isinstance(version, int) or version > CURRENT:
        raise BatonError(f"The stored instance state has Baton state version {version!r}; this build reads "
                         f"up to {CURRENT}.")
    while version < CURRENT:
        state = STEPS[version](state)
        version += 1
    return state
