"""Storage source and destination for the TiCDC storage sink layout (local disk, S3, GCS, Azure)."""
