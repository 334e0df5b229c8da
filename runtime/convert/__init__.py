"""Conversions of records to and from wire forms: protobuf (lossless), google.protobuf.Struct (lossy), Conduit JSON."""
