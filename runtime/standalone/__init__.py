"""Standalone plugins: the go-plugin handshake, the host that drives plugin processes over gRPC, and serving cdcflow plugins to Conduit."""
