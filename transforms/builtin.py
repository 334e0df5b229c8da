"""Registers cdcflow's built-in transforms (entry point ``builtin-transforms``)."""

from __future__ import annotations

from cdcflow.hookspecs import hookimpl
from cdcflow.sdk import Transform

from .cdc_dedup import CdcDedup
from .cdc_filter import CdcFilter
from .cdc_mask import CdcMask
from .cdc_route import CdcRoute
from .codec_avro import AvroDecode, AvroEncode
from .codec_base64 import Base64Decode, Base64Encode
from .codec_json import JsonDecode, JsonEncode
from .cohere import CohereCommand, CohereEmbed, CohereRerank
from .error import Error
from .fanout import Clone, Split
from .field_convert import FieldConvert
from .field_exclude import FieldExclude
from .field_rename import FieldRename
from .field_set import FieldSet
from .filter import Filter
from .javascript import CustomJavascript
from .ollama import Ollama
from .openai import OpenAIEmbeddings, OpenAITextgen
from .unwrap import UnwrapDebezium, UnwrapKafkaConnect, UnwrapOpenCDC
from .webhook import WebhookHTTP

#: Conduit's processors (same names and settings), then cdcflow's CDC transforms
BUILTIN_TRANSFORMS: list[type[Transform]] = [
    FieldSet, FieldRename, FieldExclude, FieldConvert, Filter,
    JsonDecode, JsonEncode, AvroDecode, AvroEncode, Base64Decode, Base64Encode,
    UnwrapDebezium, UnwrapKafkaConnect, UnwrapOpenCDC,
    Split, Clone, Error, WebhookHTTP, CustomJavascript,
    OpenAIEmbeddings, OpenAITextgen, CohereCommand, CohereEmbed, CohereRerank, Ollama,
    CdcRoute, CdcFilter, CdcMask, CdcDedup,
]


@hookimpl
def cdcflow_transforms() -> list[type[Transform]]:
    return list(BUILTIN_TRANSFORMS)
