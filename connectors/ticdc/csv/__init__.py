"""TiCDC's CSV protocol (storage sink): ``options`` (the ``[sink.csv]`` settings and column text
forms), ``encode`` (rows -> file bytes), ``decode`` (file bytes -> rows, columns, records); ``_csv`` is the optional compiled twin of the hot reader and writer (``cdcflow.accel``)."""

from .decode import CsvColumns, CsvDecoder, decode_rows
from .encode import encode_rows, encode_table_rows
from .options import (CODEC, HEADER_COMMIT_TS, HEADER_HANDLE_KEY, HEADER_IS_UPDATE, HEADER_META, CsvOptions,
                      header_line)

__all__ = ["CODEC", "HEADER_COMMIT_TS", "HEADER_HANDLE_KEY", "HEADER_IS_UPDATE", "HEADER_META", "CsvColumns",
           "CsvDecoder", "CsvOptions", "decode_rows", "encode_rows", "encode_table_rows", "header_line"]
