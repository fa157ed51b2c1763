"""Baton as an installed package: its version, the ``baton`` command (``baton.command``) and the
Python client (``baton.client``, which imports nothing of the server)."""

__version__ = "0.1.0"
