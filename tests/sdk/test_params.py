import logging

import pytest

from cdcflow.errors import ConfigError
from cdcflow.params import (
    MASK,
    REDACTOR,
    Parameter,
    ParamType,
    install_redactor,
    masked,
    parse_duration,
    problems,
    validate,
)

SPEC = {
    "path": Parameter(required=True, description="where"),
    "count": Parameter(ParamType.INT, default="10", greater_than=0, less_than=1000),
    "ratio": Parameter(ParamType.FLOAT, default="0.5"),
    "enabled": Parameter(ParamType.BOOL, default="false"),
    "interval": Parameter(ParamType.DURATION, default="5s", greater_than=1),
    "mode": Parameter(default="fast", inclusion=("fast", "safe")),
    "name": Parameter(default="x", exclusion=("admin",), regex=r"[a-z]+"),
    "password": Parameter(secret=True),
    "kafka.*": Parameter(description="pass-through"),
}


def test_defaults_and_types():
    cfg = validate("p", SPEC, {"path": "/tmp/x", "kafka.sasl.mechanism": "PLAIN"})
    assert cfg == {
        "path": "/tmp/x",
        "count": 10,
        "ratio": 0.5,
        "enabled": False,
        "interval": 5.0,
        "mode": "fast",
        "name": "x",
        "password": None,
        "kafka.sasl.mechanism": "PLAIN",
    }


@pytest.mark.parametrize(
    "settings,param,rule",
    [
        ({}, "path", "required"),
        ({"path": "a", "count": "0"}, "count", "greater-than"),
        ({"path": "a", "count": "1000"}, "count", "less-than"),
        ({"path": "a", "count": "ten"}, "count", "type"),
        ({"path": "a", "enabled": "maybe"}, "enabled", "type"),
        ({"path": "a", "interval": "1s"}, "interval", "greater-than"),
        ({"path": "a", "interval": "5 parsecs"}, "interval", "type"),
        ({"path": "a", "mode": "slow"}, "mode", "inclusion"),
        ({"path": "a", "name": "admin"}, "name", "exclusion"),
        ({"path": "a", "name": "Bob1"}, "name", "regex"),
        ({"path": "a", "colour": "red"}, "colour", "unknown"),
    ],
)
def test_each_rule_is_named(settings, param, rule):
    with pytest.raises(ConfigError) as ei:
        validate("builtin:thing", SPEC, settings)
    err = ei.value
    assert (err.plugin, err.parameter, err.rule) == ("builtin:thing", param, rule)
    assert "builtin:thing" in str(err) and param in str(err)


def test_problems_lists_all():
    errs = problems("p", SPEC, {"count": "-1", "mode": "x"})
    assert {(e.parameter, e.rule) for e in errs} == {("path", "required"), ("count", "greater-than"), ("mode", "inclusion")}


def test_secret_never_in_messages_or_masked_output():
    spec = {"password": Parameter(ParamType.INT, secret=True)}
    errs = problems("p", spec, {"password": "hunter2"})
    assert errs and "hunter2" not in str(errs[0])
    assert masked(SPEC, {"password": "hunter2", "path": "/x"}) == {"password": MASK, "path": "/x"}


def test_redactor_masks_log_lines(caplog):
    REDACTOR.add("s3cr3t-value")
    install_redactor()
    caplog.handler.addFilter(REDACTOR)
    logging.getLogger("t").warning("connecting with %s", "s3cr3t-value")
    assert "s3cr3t-value" not in caplog.text and MASK in caplog.text


@pytest.mark.parametrize("text,sec", [("0", 0.0), ("250ms", 0.25), ("1m30s", 90.0), ("2h", 7200.0), ("-1.5s", -1.5), ("10us", 1e-5)])
def test_durations(text, sec):
    assert parse_duration(text) == pytest.approx(sec)


@pytest.mark.parametrize("text", ["", "5", "1x", "s", "1s2"])
def test_bad_durations(text):
    with pytest.raises(ValueError):
        parse_duration(text)
