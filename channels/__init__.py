"""Inbound HTTP: the doors a call comes in by (webhook starts, web-chat, the messengers' webhooks,
task callbacks, health, ``/metrics``), the request layer around them and JSON errors, the HTTP
server's own included. Nothing here calls another server: deliveries, messenger sends and model
calls go out from the engine."""
