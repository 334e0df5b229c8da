"""Confluent-compatible schema registry: REST face of the schema store, and its client."""
