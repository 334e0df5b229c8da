"""Everything that is Spark's, not the data path's: the session and its settings
(``session``), the worker daemon that forks pre-imported Python workers (``daemon``), the
JVM class-data archive (``cds``), shipping third-party plugins to the executors (``ship``),
a worker's start marks (``worker``) and its heap policy (``heap``). The data path
(``cdcflow.engine.task`` and its nodes) runs inside a Spark task without importing PySpark.
"""
