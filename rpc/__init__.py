"""The JSON-RPC API: one adapter over jsonrpcserver and one module per method group."""
