"""The engine: the only layer that advances process instances and owns their state.

A request enters in ``rpc/`` or ``channels/`` and calls a use case here; the use case writes the
state change and the job it causes in one transaction; a worker claims the job and the runner
advances the instance; calls to other servers go out from ``outbound``.

``LAYERS`` below is the map of the whole tree, drawn with what each layer owns in the README's
layout table; tests/unit/test_layering.py holds every module to it and the table to the map. A row
lists every layer its modules may reach, directly or through the modules they import (inside
functions too): a layer whose row is narrower than the rows of what it imports may use only the
part of them that stays inside its own row. That is why:

- ``bpmn`` is two halves. What an instance's state is made of (the spec classes, their serializer,
  the event helpers, re-exported by ``bpmn/__init__``) reaches only ``errors``; deploying
  (``bpmn.deploy`` and the parser, checks and translators under it) checks a model's code with the
  ``sandbox``'s own rules, statically, so that no code the sandbox would refuse is ever stored.
  ``store``, ``outbound`` and ``chat`` use the first half and never load the sandbox; the use cases
  (``definitions``) deploy.
- ``chat`` reaches ``ai`` only from its AI turns (``chat.ai_turns``, which ``app`` builds), so the
  runtime, which reaches the rest of ``chat``, does not load the model providers.
- ``errors`` and ``json_values`` are leaves (they reach nothing of Baton, like ``telemetry`` and
  ``ai``) on every row of the engine's parts and ``bpmn``.
- ``baton`` is the installed package: its version (the OpenRPC document's), its command (which
  runs the server's commands too) and the generator of the client's calls; ``baton.client``, the
  Python client, reaches nothing of Baton: it talks to a server over HTTP only.
- Only ``store`` touches Flask (the database extension lives there); engine/ and bpmn/ never read
  the HTTP request: the doors above hand them what they need.
"""

# What each layer may reach of Baton, directly or not (itself and its parts always). A name covers
# the layer and every layer under it ("engine" is engine/ with all its parts); "*" is everything.
LAYERS = {
    "app": ("*",),
    "cli": ("*",),
    "baton": ("*",),
    "baton.client": (),
    "rpc": ("engine", "bpmn"),
    "channels": ("engine", "bpmn"),
    "console": (),
    "engine": ("bpmn",),
    "engine.errors": (),
    "engine.json_values": (),
    "engine.telemetry": (),
    "engine.store": ("engine.errors", "engine.json_values", "engine.telemetry", "bpmn"),
    "engine.jobs": ("engine.errors", "engine.json_values", "engine.store", "engine.telemetry"),
    "engine.sandbox": ("engine.errors", "engine.json_values", "engine.telemetry"),
    "engine.outbound": ("engine.errors", "engine.json_values", "engine.store", "engine.jobs", "engine.telemetry",
                        "bpmn"),
    "engine.chat": ("engine.errors", "engine.json_values", "engine.store", "engine.jobs", "engine.outbound",
                    "engine.telemetry", "bpmn", "ai"),
    "engine.runtime": ("engine.errors", "engine.json_values", "engine.store", "engine.jobs", "engine.sandbox",
                       "engine.outbound", "engine.chat", "engine.telemetry", "bpmn"),
    "bpmn": ("engine.errors", "engine.json_values", "engine.sandbox", "engine.telemetry"),
    "ai": (),
}
