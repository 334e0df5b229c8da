import logging

import pytest

from cdcflow.errors import ConfigError
from cdcflow.params import REDACTOR
from cdcflow.record import Operation, Record
from cdcflow.registry import load_registry


@pytest.fixture(scope="module")
def info():
    return load_registry(None).connector("builtin:log")


def log_destination(info, **settings):
    dest = info.new_destination()
    dest.id = "dlq"
    dest.configure(info.validate("destination", settings))
    dest.open()
    return dest


def test_logs_each_record_at_the_configured_level(info, caplog):
    dest = log_destination(info, level="warn", message="dead letter:")
    records = [Record(str(i).encode(), Operation.CREATE, {"k": "v"}, {"id": i}, None, {"id": i}) for i in range(3)]
    with caplog.at_level(logging.DEBUG, logger="cdcflow.connectors.log"):
        assert dest.write(records) is None
    lines = [r for r in caplog.records if r.name == "cdcflow.connectors.log.dlq"]
    assert len(lines) == 3 and all(r.levelno == logging.WARNING for r in lines)
    assert all(r.getMessage().startswith("dead letter: {") for r in lines)
    assert '"operation":"create"' in lines[0].getMessage().replace(" ", "")


def test_level_below_the_logger_threshold_logs_nothing(info, caplog):
    dest = log_destination(info, level="trace")
    with caplog.at_level(logging.INFO, logger="cdcflow.connectors.log"):
        dest.write([Record(b"1", Operation.CREATE, {}, None, None, {"a": 1})])
    assert not [r for r in caplog.records if r.name.startswith("cdcflow.connectors.log")]


def test_secrets_are_never_logged(info, caplog):
    REDACTOR.add("tok-9f8e7d6c5b")
    dest = log_destination(info)
    with caplog.at_level(logging.INFO, logger="cdcflow.connectors.log"):
        dest.write([Record(b"1", Operation.CREATE, {"auth": "tok-9f8e7d6c5b"}, None, None, {"pw": "tok-9f8e7d6c5b"})])
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "tok-9f8e7d6c5b" not in text and "***" in text


def test_unknown_level_is_rejected(info):
    with pytest.raises(ConfigError) as e:
        info.validate("destination", {"level": "loud"})
    assert (e.value.parameter, e.value.rule) == ("level", "inclusion")
