"""Kafka source and destination speaking TiCDC protocols."""
