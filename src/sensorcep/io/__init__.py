"""Kafka and Delta: the connectors' options and idempotent writes, the same calls locally and on Databricks."""
