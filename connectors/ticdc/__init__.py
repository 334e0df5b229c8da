"""TiCDC wire formats: codecs (pure functions over bytes) and their mapping to OpenCDC records."""
