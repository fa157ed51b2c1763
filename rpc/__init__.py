"""The JSON-RPC adapter: the endpoint (``endpoint``), the method table (``registry``, ``methods``),
param checks (``params``), and one module per method group, each declaring its ``METHODS``."""
