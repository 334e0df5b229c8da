"""Storage source and destination for the TiCDC storage sink layout (local disk, S3, GCS, Azure).

Modules: ``settings`` (URI + options), ``layout`` (paths, names), ``schemafile``
(TiCDC schema files and checksum), ``writer`` (atomic files, index numbering,
checkpoint), ``destination`` and ``source`` (the connectors).
"""
