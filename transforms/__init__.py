"""Transforms."""
