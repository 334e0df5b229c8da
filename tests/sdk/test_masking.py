"""cdcflow.masking: the one rule for secrets in settings and URIs (issue 16, item 7)."""

from __future__ import annotations

import io
import json
import logging

import pytest

from cdcflow.masking import is_secret_name, mask_setting, mask_text, mask_uri, secrets_in
from cdcflow.params import REDACTOR, SecretRedactor, masked


@pytest.mark.parametrize("name", ["password", "sasl-password", "kafka.sasl.password", "SASL_PASSWORD",
                                  "secret-access-key", "s3.secret-access-key", "access-key", "session-token",
                                  "basic.auth.user.info", "user-info", "account_key", "sas_token",
                                  "connection_string", "api-key", "sig", "ssl.key.password"])
def test_secret_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["uri", "protocol", "sasl-user", "key", "ssl.key.location", "output-handle-key",
                                  "endpoint", "region", "topic", "path"])
def test_plain_names(name):
    assert not is_secret_name(name)


@pytest.mark.parametrize("uri,shown", [
    ("s3://b/p?protocol=csv&access-key=AK&secret-access-key=S%2Fx&region=r",
     "s3://b/p?protocol=csv&access-key=***&secret-access-key=***&region=r"),
    ("kafka://h:9092/t?protocol=avro&sasl-user=u&sasl-password=pw", "kafka://h:9092/t?protocol=avro&sasl-user=u&sasl-password=***"),
    ("http://user:p%40ss@reg:8081/x", "http://user:***@reg:8081/x"),
    ("https://tok3n@host/x", "https://***@host/x"),
    ("azure://c/p?sig=abc&sv=2020", "azure://c/p?sig=***&sv=2020"),
    ("file:///tmp/out", "file:///tmp/out"),
    ("/plain/path", "/plain/path"),
])
def test_mask_uri(uri, shown):
    assert mask_uri(uri) == shown


def test_mask_text_masks_uris_inside_prose():
    text = "cannot reach 'kafka://h:1/t?sasl-password=pw' (or http://u:pw@r:1): gave up"
    assert mask_text(text) == "cannot reach 'kafka://h:1/t?sasl-password=***' (or http://u:***@r:1): gave up"


def test_mask_setting_and_secrets_in():
    assert mask_setting("kafka.sasl.password", "pw") == "***"
    assert mask_setting("uri", "s3://b?secret-access-key=S") == "s3://b?secret-access-key=***"
    assert mask_setting("batch", 5) == 5
    assert sorted(secrets_in("uri", "s3://b?secret-access-key=S%2Fx&region=r")) == ["S%2Fx", "S/x"]
    assert secrets_in("registry", "http://u:pw@h:1") == ["pw"]
    assert secrets_in("password", "pw") == ["pw"]


def test_masked_uses_spec_secrets_and_name_rules():
    from cdcflow.params import Parameter

    spec = {"opaque": Parameter(description="x", secret=True), "uri": Parameter(description="u")}
    shown = masked(spec, {"opaque": "o", "uri": "kafka://h/t?sasl-password=pw", "sasl-password": "p2"})
    assert shown == {"opaque": "***", "uri": "kafka://h/t?sasl-password=***", "sasl-password": "***"}


def test_redactor_masks_messages_and_exception_text_in_json_logs():
    from cdcflow.cli import JsonLogFormatter

    redactor = SecretRedactor()
    redactor.add("hunter2")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonLogFormatter())
    handler.addFilter(redactor)
    log = logging.getLogger("test.masking")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("writing to %s with %s", "s3://b/p?secret-access-key=S3KEY", "hunter2")
        try:
            raise RuntimeError("connect kafka://h:1/t?sasl-password=SASLPW failed")
        except RuntimeError:
            log.exception("failed")
    finally:
        log.removeHandler(handler)
    text = stream.getvalue()
    assert "S3KEY" not in text and "hunter2" not in text and "SASLPW" not in text
    lines = [json.loads(line) for line in text.splitlines()]
    assert lines[0]["message"] == "writing to s3://b/p?secret-access-key=*** with ***"
    assert "sasl-password=***" in lines[1]["error"]


def test_validation_registers_uri_secrets_with_the_process_redactor():
    from cdcflow.registry import load_registry

    plugin = load_registry().connector("builtin:storage")
    plugin.validate("destination", {"uri": "s3://b/p?secret-access-key=RegisteredS3cret"})
    assert "RegisteredS3cret" not in REDACTOR.redact("value RegisteredS3cret seen")


def test_unconfigured_process_logs_are_masked_too():
    """Spark's Python workers configure no logging: Python's last-resort handler must mask as well."""
    import subprocess
    import sys

    code = ("import logging\nfrom cdcflow.params import install_redactor\ninstall_redactor()\n"
            "logging.getLogger('w').warning('open s3://b/p?secret-access-key=W0rkerS3cret')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "secret-access-key=***" in r.stderr and "W0rkerS3cret" not in r.stderr


def test_short_secrets_are_masked_as_whole_words_long_ones_anywhere():
    redactor = SecretRedactor()
    redactor.add("k", "pw1", "LongSecretValue")
    # a short secret stands alone (in a URI, after '=' or ':') → masked; inside a word it is left alone
    assert redactor.redact("user:pw1@host key=k; working on kafka") == "user:***@host key=***; working on kafka"
    # a long one is masked even glued to other text
    assert redactor.redact("tokenLongSecretValue123") == "token***123"
