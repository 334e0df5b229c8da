"""Generated protobuf and gRPC modules (see ``generate.py``); import from here."""
