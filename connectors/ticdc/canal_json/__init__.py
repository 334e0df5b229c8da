"""TiCDC's canal-json protocol (Kafka and storage sink): ``schema`` (options, TiDB value texts,
``mysqlType`` <-> column model), ``encode`` (events -> messages), ``decode`` (messages and
claim-check files -> events); ``_canal_json`` is the optional compiled twin of the row-message
writer (``cdcflow.accel``)."""

from .decode import CanalJsonDecoder, decode_claim_check
from .encode import CanalJsonEncoder
from .schema import (CODEC, DDL_TYPES, DML_TYPES, META_CANAL_TYPE, WATERMARK, CanalJsonOptions, ddl_elements,
                     mysql_type, parse_mysql_type, parse_time, value_formatter, value_parser)

__all__ = ["CODEC", "DDL_TYPES", "DML_TYPES", "META_CANAL_TYPE", "WATERMARK", "CanalJsonDecoder", "CanalJsonEncoder",
           "CanalJsonOptions", "ddl_elements", "decode_claim_check", "mysql_type",
           "parse_mysql_type", "parse_time", "value_formatter", "value_parser"]
