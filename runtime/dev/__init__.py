"""Local development services: the embedded Kafka broker and the built-in schema registry."""
