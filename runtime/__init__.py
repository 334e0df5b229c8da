"""cdcflow: Conduit-compatible CDC connectors for TiCDC outputs."""
