"""Settings of the ``kafka`` connector: TiCDC sink URI plus discrete settings.

A TiCDC user already has a sink URI (``kafka://host:port/topic?protocol=avro&...``);
accepting it unchanged makes cdcflow a drop-in consumer/producer. Discrete
settings with the same names win over the URI, so one URI can be shared and
tweaked per connector. Every combination TiCDC refuses is refused here too,
before anything connects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

from confluent_kafka import KafkaException

from cdcflow.errors import ConfigError
from cdcflow.params import Parameter, ParamType, did_you_mean, option_bool

from .clientlog import CLIENT_LOG

PLUGIN = "kafka"
T = TypeVar("T")
PROTOCOLS = ("avro", "canal-json", "open-protocol", "opencdc-json", "raw")
PROTOCOL_ALIASES = {"flat-avro": "avro"}  # TiCDC's other name for its Avro protocol
DISPATCHERS = ("default", "table", "ts", "index-value", "rowid", "columns")
CONSISTENCY = ("row", "transaction")
READ_FROM = ("earliest", "latest")
DEFAULT_MAX_MESSAGE_BYTES = 10 * 1024 * 1024  # TiCDC's default
LARGE_MESSAGE_OPTIONS = ("none", "handle-key-only")  # claim-check: not implemented
DEFAULT_PARTITION_NUM = 3  # TiCDC creates missing topics with 3 partitions

# URI query parameters that are TiCDC sink options with a cdcflow setting of the same name
_URI_OPTIONS = (
    "protocol", "enable-tidb-extension", "avro-decimal-handling-mode", "avro-bigint-unsigned-handling-mode",
    "avro-enable-watermark", "schema-registry", "max-message-bytes", "partition-num", "max-batch-size",
    "content-compatible", "only-output-updated-columns", "partition", "columns", "large-message-handle-option",
    "replication-factor", "auto-create-topic",
)
# URI query parameters TiCDC knows that map onto librdkafka properties
_URI_CLIENT = {
    "sasl-user": "sasl.username", "sasl-password": "sasl.password", "sasl-mechanism": "sasl.mechanism",
    "ca": "ssl.ca.location", "cert": "ssl.certificate.location", "key": "ssl.key.location",
    "kafka-client-id": "client.id", "compression": "compression.type",
    "sasl-gssapi-service-name": "sasl.kerberos.service.name", "sasl-gssapi-keytab-path": "sasl.kerberos.keytab",
}
# URI parameters read below, before they become client properties (or errors)
_URI_CLIENT_RULES = ("enable-tls", "insecure-skip-verify", "sasl-gssapi-auth-type", "sasl-gssapi-user",
                     "sasl-gssapi-realm", "sasl-gssapi-password", "sasl-gssapi-kerberos-config-path",
                     "sasl-gssapi-disable-pafxfast")
# accepted and ignored: they tune TiCDC's own Kafka client in ways librdkafka decides itself
# (``required-acks``: cdcflow's idempotent producer always waits for every in-sync replica)
_URI_IGNORED = frozenset({"kafka-version", "dial-timeout", "read-timeout", "write-timeout", "required-acks"})
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER")
COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")


def _p(description: str, **kw: Any) -> Parameter:
    return Parameter(description=description, **kw)


# Conduit's kafka connector (github.com/ConduitIO/conduit-connector-kafka): its setting names, read
# when a pipeline file written for Conduit gives them; the messages are then Conduit's too (no
# ``protocol``: the source reads raw messages, the destination writes records in the JSON form)
_CONDUIT_COMMON: dict[str, Parameter] = {
    "clientID": _p("Conduit: client id of the connections (kafka.client.id)."),
    "tls.enabled": _p("Conduit: connect with TLS.", type=ParamType.BOOL),
    "caCert": _p("Conduit: CA certificate (PEM text) the brokers' certificates are checked against."),
    "clientCert": _p("Conduit: client certificate (PEM text)."),
    "clientKey": _p("Conduit: client key (PEM text, secret).", secret=True),
    "insecureSkipVerify": _p("Conduit: do not check the brokers' certificates.", type=ParamType.BOOL),
    "saslMechanism": _p("Conduit: SASL mechanism.", inclusion=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")),
    "saslUsername": _p("Conduit: SASL user name."),
    "saslPassword": _p("Conduit: SASL password (secret).", secret=True),
}
_CONDUIT_SOURCE: dict[str, Parameter] = {
    "groupID": _p("Conduit: consumer group id (group.id)."),
    "readFromBeginning": _p("Conduit: a partition without a committed offset starts at its first message "
                            "(else at its end; read-from).", type=ParamType.BOOL),
    "retryGroupJoinErrors": _p("Conduit: accepted; the consumer always retries joining its group.", type=ParamType.BOOL),
    "commitOffsetsSize": _p("Conduit: accepted; offsets are committed once their records are acknowledged.",
                            type=ParamType.INT, greater_than=-1),
    "commitOffsetsDelay": _p("Conduit: accepted; offsets are committed once their records are acknowledged.",
                             type=ParamType.DURATION),
}
_CONDUIT_DESTINATION: dict[str, Parameter] = {
    "acks": _p("Conduit: acknowledgements a write waits for; cdcflow's idempotent producer always waits for "
               "every in-sync replica, so only all is accepted.", inclusion=("all",)),
    "deliveryTimeout": _p("Conduit: longest wait for one batch's delivery (delivery-timeout).", type=ParamType.DURATION),
    "compression": _p("Conduit: message compression (kafka.compression.type).", inclusion=COMPRESSIONS),
    "batchBytes": _p("Conduit: largest batch of messages sent at once, in bytes (kafka.batch.size).",
                     type=ParamType.INT, greater_than=0),
}
# Conduit name -> the cdcflow setting it stands for
_CONDUIT_NAMES = {
    "groupID": "group.id", "clientID": "kafka.client.id", "saslMechanism": "kafka.sasl.mechanism",
    "saslUsername": "kafka.sasl.username", "saslPassword": "kafka.sasl.password",
    "caCert": "kafka.ssl.ca.pem", "clientCert": "kafka.ssl.certificate.pem", "clientKey": "kafka.ssl.key.pem",
    "deliveryTimeout": "delivery-timeout", "compression": "kafka.compression.type", "batchBytes": "kafka.batch.size",
}

_COMMON: dict[str, Parameter] = {
    "uri": _p("TiCDC sink URI kafka://host:port[,host:port]/topic?protocol=...&...; discrete settings win."),
    "servers": _p("Bootstrap servers, comma separated (default: the URI's hosts)."),
    "protocol": _p("Message format (flat-avro: TiCDC's alias of avro).", inclusion=(*PROTOCOLS, *PROTOCOL_ALIASES)),
    "schema-registry": _p("Confluent schema registry URL (user:password@ allowed) for avro; "
                          "default: cdcflow's built-in schema store."),
    "enable-tidb-extension": _p("TiCDC's _tidb_* fields / _tidb block / watermarks.", type=ParamType.BOOL),
    "avro-decimal-handling-mode": _p("Avro DECIMAL as precise bytes or string.", inclusion=("precise", "string")),
    "avro-bigint-unsigned-handling-mode": _p("Avro BIGINT UNSIGNED as long or string.",
                                             inclusion=("long", "string")),
    "avro-enable-watermark": _p("Avro DDL and checkpoint messages (TiCDC testing option; needs the extension).",
                                type=ParamType.BOOL),
    "max-message-bytes": _p("Largest Kafka message (key + value) written or accepted.", type=ParamType.INT,
                            greater_than=0),
    "schema-registry-timeout": _p("Bound of one schema registry request (connect, send, answer); a registry "
                                  "not answering within it is an outage, never a record's fault.",
                                  type=ParamType.DURATION, default="10s"),
    "kafka.*": _p("librdkafka client property, passed through without the prefix (SASL, TLS, ...)."),
    "kafka.sasl.password": _p("SASL password (secret).", secret=True),
    "kafka.ssl.key.password": _p("TLS key password (secret).", secret=True),
}

SOURCE_PARAMS: dict[str, Parameter] = {
    **_COMMON,
    **_CONDUIT_COMMON,
    **_CONDUIT_SOURCE,
    "topics": _p("Topics to read, comma separated (default: the URI's topic)."),
    "group.id": _p("Consumer group offsets are committed to after downstream acknowledgement "
                   "(default: cdcflow-<connector id>)."),
    "read-from": _p("Where a partition without a committed offset starts.", inclusion=READ_FROM),
    "consistency": _p("row: stream rows as they come, one engine partition per Kafka partition; transaction: "
                      "release rows up to the global resolved ts in commit-ts order (one engine partition).",
                      inclusion=CONSISTENCY),
    "poll-timeout": _p("How long one read waits for messages.", type=ParamType.DURATION, default="100ms"),
    "broker-timeout": _p("How long the source waits for a broker that does not answer (metadata at start, "
                         "high watermarks while quiet, failing offset commits) before it fails with the "
                         "broker named.", type=ParamType.DURATION, default="30s"),
}

DESTINATION_PARAMS: dict[str, Parameter] = {
    **_COMMON,
    **_CONDUIT_COMMON,
    **_CONDUIT_DESTINATION,
    "topic": _p("Topic or topic rule with {schema} and {table} (default: the URI's topic); in Conduit's record "
                "mode (no protocol) a Go template rendered per record, by default "
                "{{ index .Metadata \"opencdc.collection\" }} as Conduit's."),
    "partition": _p("Partition dispatcher.", inclusion=DISPATCHERS),
    "columns": _p("Columns the 'columns' dispatcher hashes, comma separated."),
    "partition-num": _p("Partitions of a topic the destination creates (default 3); set on an existing topic, "
                        "rows are dispatched over that many partitions, as TiCDC does.",
                        type=ParamType.INT, greater_than=0),
    "replication-factor": _p("Replication factor of a topic the destination creates (default 1).",
                             type=ParamType.INT, greater_than=0),
    "auto-create-topic": _p("Create a missing topic (default true; false: a missing topic is an error).",
                            type=ParamType.BOOL),
    "max-batch-size": _p("open-protocol: rows per message.", type=ParamType.INT, greater_than=0),
    "content-compatible": _p("canal-json: Canal-compatible mysqlType/old.", type=ParamType.BOOL),
    "only-output-updated-columns": _p("canal-json/open-protocol: old image holds changed columns only.",
                                      type=ParamType.BOOL),
    "delivery-timeout": _p("Longest wait for delivery reports of one batch.", type=ParamType.DURATION,
                           default="60s"),
    "large-message-handle-option": _p("A row message over max-message-bytes: none (to the DLQ) or "
                                      "handle-key-only (sent with the handle-key columns only, flagged; "
                                      "canal-json with the extension, open-protocol).",
                                      inclusion=LARGE_MESSAGE_OPTIONS),
}


@dataclass
class KafkaSettings:
    """Resolved settings: URI merged with discrete settings, defaults applied, rules checked."""

    servers: str
    protocol: str
    topics: list[str] = field(default_factory=list)  # source
    topic_rule: str = ""  # destination
    schema_registry: str | None = None
    enable_tidb_extension: bool = False
    avro_decimal_handling_mode: str = "precise"
    avro_bigint_unsigned_handling_mode: str = "long"
    avro_enable_watermark: bool = False
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    partition: str = "default"
    columns: list[str] = field(default_factory=list)
    partition_num: int = DEFAULT_PARTITION_NUM
    partition_num_set: bool = False  # given by the user: dispatch over that many partitions
    replication_factor: int = 1
    auto_create_topic: bool = True
    max_batch_size: int = 16
    content_compatible: bool = False
    only_output_updated_columns: bool = False
    group_id: str | None = None
    read_from: str = "earliest"
    consistency: str = "row"
    poll_timeout: float = 0.1
    broker_timeout: float = 30.0
    schema_registry_timeout: float = 10.0
    delivery_timeout: float = 60.0
    large_message_handle_option: str = "none"
    client: dict[str, str] = field(default_factory=dict)  # librdkafka properties

    @property
    def codec_options(self) -> dict[str, str]:
        """TiCDC-named options as the codecs' ``from_config`` read them."""
        return {
            "enable-tidb-extension": str(self.enable_tidb_extension).lower(),
            "avro-decimal-handling-mode": self.avro_decimal_handling_mode,
            "avro-bigint-unsigned-handling-mode": self.avro_bigint_unsigned_handling_mode,
            "avro-enable-watermark": str(self.avro_enable_watermark).lower(),
            "content-compatible": str(self.content_compatible).lower(),
            "only-output-updated-columns": str(self.only_output_updated_columns).lower(),
        }

    @property
    def carries_commit_ts(self) -> bool:
        """Whether every row message carries its commit ts (needed for dedup and ordering)."""
        return self.protocol in ("canal-json", "open-protocol") or (
            self.protocol == "avro" and self.enable_tidb_extension)

    @property
    def carries_resolved(self) -> bool:
        """Whether the protocol emits resolved events/watermarks (needed for transaction consistency)."""
        if self.protocol == "open-protocol":
            return True
        if self.protocol == "canal-json":
            return self.enable_tidb_extension
        if self.protocol == "avro":
            return self.enable_tidb_extension and self.avro_enable_watermark
        return False


def parse_uri(uri: str, plugin: str = PLUGIN) -> tuple[str, str, dict[str, str]]:
    """``kafka://h1:p1,h2:p2/topic?k=v`` → (servers, topic, options with client properties as ``kafka.*``)."""
    parts = urlsplit(uri)
    if parts.scheme not in ("kafka", "kafka+ssl"):
        raise ConfigError(plugin, "uri", "scheme", f"scheme must be kafka:// or kafka+ssl://, got {parts.scheme!r}")
    servers = parts.netloc.rsplit("@", 1)[-1]
    if not servers:
        raise ConfigError(plugin, "uri", "servers", "the URI names no broker (kafka://host:port/topic)")
    topic = unquote(parts.path.lstrip("/"))
    opts: dict[str, str] = {}
    rules: dict[str, str] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in _URI_OPTIONS:
            opts[name] = value
        elif name in _URI_CLIENT:
            opts["kafka." + _URI_CLIENT[name]] = value
        elif name in _URI_CLIENT_RULES:
            rules[name] = value
        elif name not in _URI_IGNORED:
            names = (*_URI_OPTIONS, *_URI_CLIENT, *_URI_CLIENT_RULES, *_URI_IGNORED)
            raise ConfigError(plugin, "uri", "query", f"unknown URI parameter {name!r}{did_you_mean(name, names)} "
                              f"(known: {', '.join(sorted(names))})")
    _client_security(opts, rules, parts.scheme == "kafka+ssl", plugin)
    return servers, topic, opts


def _conduit_settings(merged: dict[str, Any], plugin: str) -> None:
    """Conduit's kafka setting names, given in ``merged``, become the cdcflow settings they stand for
    (a cdcflow name given as well wins); TLS and SASL then follow the same rules as TiCDC's."""
    given = [k for k in (*_CONDUIT_NAMES, "readFromBeginning", "tls.enabled", "insecureSkipVerify") if k in merged]
    if not given:
        return
    for conduit, ours in _CONDUIT_NAMES.items():
        if conduit in merged:
            merged.setdefault(ours, merged.pop(conduit))
    if "readFromBeginning" in merged:
        merged.setdefault("read-from", "earliest" if option_bool(plugin, "readFromBeginning",
                                                                 merged.pop("readFromBeginning")) else "latest")
    rules = {}
    if "tls.enabled" in merged:
        rules["enable-tls"] = merged.pop("tls.enabled")
    if any(f"kafka.ssl.{n}.pem" in merged for n in ("ca", "certificate", "key")):
        rules.setdefault("enable-tls", "true")
    if "insecureSkipVerify" in merged:
        rules["insecure-skip-verify"] = merged.pop("insecureSkipVerify")
    if rules or any(k.startswith("kafka.sasl.") for k in merged):
        opts = {k: str(v) for k, v in merged.items() if k.startswith("kafka.")}
        _client_security(opts, {k: str(v) for k, v in rules.items()}, False, plugin)
        merged.update(opts)


def _client_security(opts: dict[str, str], rules: dict[str, str], ssl_scheme: bool, plugin: str) -> None:
    """TiCDC's TLS and SASL URI parameters → librdkafka's ``security.protocol`` and friends.

    TLS is on with ``kafka+ssl://``, ``enable-tls=true`` or any of ``ca``/``cert``/``key`` (TiCDC's
    rule: credential files imply TLS, and contradict ``enable-tls=false``); SASL is on with a user
    or mechanism. Kerberos settings librdkafka cannot take are refused, naming the alternative.
    """
    files = [n for n in ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location") if f"kafka.{n}" in opts]
    enable_tls = rules.get("enable-tls")
    tls = ssl_scheme or bool(files)
    if enable_tls is not None:
        wanted = option_bool(plugin, "enable-tls", enable_tls)
        if files and not wanted:
            raise ConfigError(plugin, "uri", "enable-tls", "credential files (ca, cert, key) are given but "
                              "enable-tls=false (TiCDC's rule)")
        tls = tls or wanted
    if tls and option_bool(plugin, "insecure-skip-verify", rules.get("insecure-skip-verify", False)):
        opts["kafka.enable.ssl.certificate.verification"] = "false"
    mechanism = opts.get("kafka.sasl.mechanism")
    if mechanism is not None:
        mechanism = opts["kafka.sasl.mechanism"] = mechanism.upper()
        if mechanism not in SASL_MECHANISMS:
            raise ConfigError(plugin, "uri", "sasl-mechanism",
                              f"sasl-mechanism {mechanism!r} must be one of {', '.join(SASL_MECHANISMS)}")
    if "sasl-gssapi-password" in rules or rules.get("sasl-gssapi-auth-type", "").lower() == "user":
        raise ConfigError(plugin, "uri", "sasl-gssapi-auth-type",
                          "Kerberos with a password (sasl-gssapi-auth-type=user) is not supported by librdkafka; "
                          "use sasl-gssapi-auth-type=keytab with sasl-gssapi-keytab-path")
    if "sasl-gssapi-kerberos-config-path" in rules:
        raise ConfigError(plugin, "uri", "sasl-gssapi-kerberos-config-path",
                          "librdkafka reads the Kerberos configuration from the KRB5_CONFIG environment variable; "
                          "set it for the run instead of sasl-gssapi-kerberos-config-path")
    user = rules.get("sasl-gssapi-user")
    if user:
        realm = rules.get("sasl-gssapi-realm")
        opts["kafka.sasl.kerberos.principal"] = f"{user}@{realm}" if realm else user
    sasl = "kafka.sasl.username" in opts or mechanism is not None
    if sasl:
        opts.setdefault("kafka.sasl.mechanism", "PLAIN")
    if tls or sasl:
        opts["kafka.security.protocol"] = ("sasl_" if sasl else "") + ("ssl" if tls else "plaintext")
    compression = opts.get("kafka.compression.type")
    if compression is not None and compression not in COMPRESSIONS:
        raise ConfigError(plugin, "uri", "compression",
                          f"compression {compression!r} must be one of {', '.join(COMPRESSIONS)}")


def _positive(plugin: str, name: str, value: Any, kind: type = int) -> Any:
    """A positive number; ``kind=float`` for durations (already seconds after ``params.validate``)."""
    try:
        n = kind(value)
    except (TypeError, ValueError):
        raise ConfigError(plugin, name, "type", f"value {value!r} is not a valid {kind.__name__}") from None
    if n <= 0:
        raise ConfigError(plugin, name, "greater-than", f"value {n:g} must be greater than 0")
    return n


def _choice(plugin: str, name: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ConfigError(plugin, name, "inclusion", f"value {value!r} must be one of {', '.join(allowed)}")
    return value


def resolve(config: Mapping[str, Any], side: str, plugin: str = PLUGIN) -> KafkaSettings:
    """Merge ``uri`` with the discrete settings (typed by ``params.validate``) and check TiCDC's rules.

    ``side`` is ``source`` or ``destination``.
    """
    merged: dict[str, Any] = {}
    uri_topic = ""
    servers = ""
    if config.get("uri"):
        servers, uri_topic, merged = parse_uri(str(config["uri"]), plugin)
    for k, v in config.items():
        if k != "uri" and v is not None and v != "":
            merged[k] = v
    _conduit_settings(merged, plugin)
    servers = str(merged.get("servers") or servers)
    if not servers:
        raise ConfigError(plugin, "servers", "required", "set servers or uri (kafka://host:port/topic)")
    protocol = str(merged.get("protocol") or "")
    protocol = _choice(plugin, "protocol", PROTOCOL_ALIASES.get(protocol, protocol), PROTOCOLS) if protocol else None
    if protocol is None:  # Conduit's kafka connector: raw messages in, records in the JSON form out
        protocol = "raw" if side == "source" else "opencdc-json"
        merged.setdefault("read-from", "latest")  # Conduit's readFromBeginning defaults to false
    if protocol == "raw" and side != "source":
        raise ConfigError(plugin, "protocol", "source-only", "protocol raw is for the source (Conduit's raw "
                          "messages); the destination writes opencdc-json, as Conduit's does")
    s = KafkaSettings(servers=servers, protocol=protocol)
    s.enable_tidb_extension = option_bool(plugin, "enable-tidb-extension", merged.get("enable-tidb-extension", False))
    s.avro_enable_watermark = option_bool(plugin, "avro-enable-watermark", merged.get("avro-enable-watermark", False))
    s.avro_decimal_handling_mode = _choice(plugin, "avro-decimal-handling-mode", str(
        merged.get("avro-decimal-handling-mode", "precise")).lower(), ("precise", "string"))
    s.avro_bigint_unsigned_handling_mode = _choice(plugin, "avro-bigint-unsigned-handling-mode", str(
        merged.get("avro-bigint-unsigned-handling-mode", "long")).lower(), ("long", "string"))
    s.content_compatible = option_bool(plugin, "content-compatible", merged.get("content-compatible", False))
    s.only_output_updated_columns = option_bool(plugin, "only-output-updated-columns",
                                          merged.get("only-output-updated-columns", False))
    if merged.get("max-message-bytes") is not None:
        s.max_message_bytes = _positive(plugin, "max-message-bytes", merged["max-message-bytes"])
    if merged.get("schema-registry"):
        s.schema_registry = str(merged["schema-registry"])
    if merged.get("schema-registry-timeout") is not None:
        s.schema_registry_timeout = _positive(plugin, "schema-registry-timeout", merged["schema-registry-timeout"],
                                              float)
    s.client = {k[len("kafka."):]: str(v) for k, v in merged.items() if k.startswith("kafka.") and v is not None}

    if s.avro_enable_watermark and not s.enable_tidb_extension:
        raise ConfigError(plugin, "avro-enable-watermark", "needs-extension",
                          "avro-enable-watermark needs enable-tidb-extension=true (TiCDC's rule)")
    if protocol != "avro":
        for name in ("schema-registry", "avro-enable-watermark"):
            if merged.get(name) not in (None, "", False, "false"):
                raise ConfigError(plugin, name, "avro-only", f"{name} applies to protocol avro only, not {protocol}")
    if s.schema_registry and not s.schema_registry.startswith(("http://", "https://")):
        raise ConfigError(plugin, "schema-registry", "url", f"{s.schema_registry!r} is not an http(s) URL")

    if side == "source":
        _resolve_source(s, merged, uri_topic, plugin)
    else:
        _resolve_destination(s, merged, uri_topic, plugin)
    return s


def _resolve_source(s: KafkaSettings, merged: dict, uri_topic: str, plugin: str) -> None:
    topics = str(merged.get("topics") or uri_topic)
    s.topics = [t.strip() for t in topics.split(",") if t.strip()]
    if not s.topics:
        raise ConfigError(plugin, "topics", "required", "set topics or a topic in the URI path")
    for t in s.topics:
        if "{" in t:
            raise ConfigError(plugin, "topics", "concrete", f"source topics are names, not rules: {t!r}")
    s.group_id = merged.get("group.id") or None
    s.read_from = _choice(plugin, "read-from", str(merged.get("read-from") or "earliest"), READ_FROM)
    s.consistency = _choice(plugin, "consistency", str(merged.get("consistency") or "row"), CONSISTENCY)
    if merged.get("poll-timeout") is not None:
        s.poll_timeout = float(merged["poll-timeout"])
    if merged.get("broker-timeout") is not None:
        s.broker_timeout = _positive(plugin, "broker-timeout", merged["broker-timeout"], float)
    if s.consistency == "transaction" and not s.carries_resolved:
        why = {
            "canal-json": "canal-json has watermarks only with enable-tidb-extension=true",
            "avro": "avro has checkpoint events only with enable-tidb-extension=true and avro-enable-watermark=true",
            "opencdc-json": "opencdc-json carries no resolved events",
            "raw": "raw messages carry no resolved events",
        }[s.protocol]
        raise ConfigError(plugin, "consistency", "needs-resolved-ts",
                          f"consistency=transaction needs resolved events: {why}")


#: Conduit's kafka destination writes each record to the topic its collection names by default
CONDUIT_DEFAULT_TOPIC = '{{ index .Metadata "opencdc.collection" }}'


def _resolve_destination(s: KafkaSettings, merged: dict, uri_topic: str, plugin: str) -> None:
    s.topic_rule = str(merged.get("topic") or uri_topic)
    if not s.topic_rule and s.protocol == "opencdc-json":
        s.topic_rule = CONDUIT_DEFAULT_TOPIC
    if "{{" in s.topic_rule:
        if s.protocol != "opencdc-json":
            raise ConfigError(plugin, "topic", "template", "a Go-template topic is Conduit's: it needs Conduit's "
                              "record mode (no protocol); TiCDC's protocols take a rule with {schema}/{table}")
        from cdcflow.expr import ExpressionError, Template

        try:
            Template.compile(s.topic_rule)
        except ExpressionError as e:
            raise ConfigError(plugin, "topic", "template", f"not a valid template: {e}") from None
    if not s.topic_rule:
        raise ConfigError(plugin, "topic", "required", "set topic (or a rule with {schema}/{table}) or the URI path")
    if s.protocol == "avro" and not ("{schema}" in s.topic_rule and "{table}" in s.topic_rule):
        raise ConfigError(plugin, "topic", "avro-topic-rule",
                          f"protocol avro needs one table per topic: the topic rule {s.topic_rule!r} must contain "
                          "both {schema} and {table} (TiCDC's rule)")
    s.partition = _choice(plugin, "partition", str(merged.get("partition") or "default"), DISPATCHERS)
    cols = str(merged.get("columns") or "")
    s.columns = [c.strip() for c in cols.split(",") if c.strip()]
    if s.partition == "columns" and not s.columns:
        raise ConfigError(plugin, "columns", "required", "partition=columns needs the columns to hash")
    if s.columns and s.partition != "columns":
        raise ConfigError(plugin, "columns", "columns-dispatcher", "columns applies to partition=columns only")
    if merged.get("partition-num") is not None:
        s.partition_num = _positive(plugin, "partition-num", merged["partition-num"])
        s.partition_num_set = True
    if merged.get("replication-factor") is not None:
        s.replication_factor = _positive(plugin, "replication-factor", merged["replication-factor"])
    s.auto_create_topic = option_bool(plugin, "auto-create-topic", merged.get("auto-create-topic", True))
    if merged.get("max-batch-size") is not None:
        s.max_batch_size = _positive(plugin, "max-batch-size", merged["max-batch-size"])
    if merged.get("delivery-timeout") is not None:
        s.delivery_timeout = float(merged["delivery-timeout"])
    option = str(merged.get("large-message-handle-option") or "none")
    if option == "claim-check":
        raise ConfigError(plugin, "large-message-handle-option", "not-implemented",
                          "claim-check is not implemented; use handle-key-only or none")
    s.large_message_handle_option = _choice(plugin, "large-message-handle-option", option, LARGE_MESSAGE_OPTIONS)
    if s.large_message_handle_option != "none":
        if s.protocol not in ("canal-json", "open-protocol"):
            raise ConfigError(plugin, "large-message-handle-option", "protocol",
                              f"large-message-handle-option={option} supports canal-json and open-protocol, "
                              f"not {s.protocol} (TiCDC's rule)")
        if s.protocol == "canal-json" and not s.enable_tidb_extension:
            raise ConfigError(plugin, "large-message-handle-option", "needs-extension",
                              f"large-message-handle-option={option} with canal-json needs "
                              "enable-tidb-extension=true: the onlyHandleKey flag lives in _tidb (TiCDC's rule)")


def client_config(s: KafkaSettings, **extra: Any) -> dict[str, Any]:
    """librdkafka configuration: bootstrap servers, cdcflow's logger, ``extra`` defaults, then the
    user's ``kafka.*`` (which win)."""
    conf: dict[str, Any] = {"bootstrap.servers": s.servers, "logger": CLIENT_LOG, **extra}
    conf.update(s.client)
    return conf


def make_client(factory: Callable[[dict[str, Any]], T], s: KafkaSettings, plugin: str = PLUGIN, **extra: Any) -> T:
    """A confluent-kafka client on ``client_config``; librdkafka refusing the configuration (an unknown
    property, a SASL mechanism this build lacks) is a configuration error naming the settings."""
    try:
        return factory(client_config(s, **extra))
    except KafkaException as e:
        raise ConfigError(plugin, "kafka.*", "client", f"librdkafka refused the client configuration "
                          f"({', '.join(sorted(s.client)) or 'no kafka.* settings'}): {e.args[0].str()}") from None
