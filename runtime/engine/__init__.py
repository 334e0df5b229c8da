"""Execution of pipelines on Apache Spark."""
