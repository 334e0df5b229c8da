"""Handshake line parsing, plugin environment, parameter mapping (no subprocesses)."""

from __future__ import annotations

import pytest

from cdcflow.params import Parameter, ParamType, validate
from cdcflow.standalone import handshake as hs
from cdcflow.standalone.spec import parameter_from_proto, parameter_to_proto, settings_to_wire


def test_parse_tcp_and_unix() -> None:
    line = hs.parse_handshake("1|2|tcp|127.0.0.1:41233|grpc\n", "p")
    assert (line.network, line.address, line.grpc_target) == ("tcp", "127.0.0.1:41233", "127.0.0.1:41233")
    unix = hs.parse_handshake("1|2|unix|/tmp/plugin123/sock|grpc|", "p")
    assert unix.grpc_target == "unix:/tmp/plugin123/sock" and unix.tls_cert == ""
    assert hs.parse_handshake(line.format(), "p") == line


@pytest.mark.parametrize("text, fragment", [
    ("hello", "expected a handshake line"),
    ("1|2|tcp", "expected a handshake line"),
    ("x|2|tcp|a:1|grpc", "integers"),
    ("2|2|tcp|a:1|grpc", "core protocol 2"),
    ("1|1|tcp|a:1|grpc", "protocol 1"),
    ("1|2|udp|a:1|grpc", "unsupported network"),
    ("1|2|tcp||grpc", "empty address"),
    ("1|2|tcp|a:1", "only grpc"),
    ("1|2|tcp|a:1|netrpc", "only grpc"),
    ("1|2|tcp|a:1|grpc|" + "C" * 60, "TLS"),
])
def test_bad_lines_name_the_plugin(text: str, fragment: str) -> None:
    with pytest.raises(hs.HandshakeError, match=fragment) as err:
        hs.parse_handshake(text, "my-plugin")
    assert err.value.plugin == "my-plugin" and "my-plugin" in str(err.value)


def test_plugin_env() -> None:
    env = hs.plugin_env(connector_id="pipe:c", log_level="debug", utilities_target="127.0.0.1:9", token="t",
                        base={"PATH": "/bin"})
    assert env[hs.MAGIC_COOKIE_KEY] == hs.MAGIC_COOKIE_VALUE
    assert env["PLUGIN_PROTOCOL_VERSIONS"] == "2" and env["PATH"] == "/bin"
    assert env["CONDUIT_CONNECTOR_MAX_RECEIVE_RECORD_SIZE"] == str(64 * 1024 * 1024)
    assert env["CONDUIT_CONNECTOR_UTILITIES_GRPC_TARGET"] == "127.0.0.1:9" and env["CONDUIT_CONNECTOR_TOKEN"] == "t"
    assert (env["CONDUIT_CONNECTOR_ID"], env["CONDUIT_CONNECTOR_LOG_LEVEL"]) == ("pipe:c", "debug")
    assert hs.plugin_env(max_record_size=1000, base={})["CONDUIT_CONNECTOR_MAX_RECEIVE_RECORD_SIZE"] == "1000"
    assert "CONDUIT_CONNECTOR_TOKEN" not in hs.plugin_env(base={})


def test_cookie_and_versions() -> None:
    with pytest.raises(hs.PluginEnvError):
        hs.check_cookie({})
    hs.check_cookie({hs.MAGIC_COOKIE_KEY: hs.MAGIC_COOKIE_VALUE})
    assert hs.negotiate_version({"PLUGIN_PROTOCOL_VERSIONS": "1,2"}) == 2
    with pytest.raises(hs.PluginEnvError, match="speaks 2"):
        hs.negotiate_version({"PLUGIN_PROTOCOL_VERSIONS": "1"})


def test_parameter_roundtrip() -> None:
    p = Parameter(type=ParamType.FLOAT, default="1.5", description="d", required=True, greater_than=0.5,
                  less_than=10, inclusion=("1.5", "2"), exclusion=("3",), regex=r"\d+(\.\d+)?")
    assert parameter_from_proto(parameter_to_proto(p)) == p
    assert parameter_from_proto(parameter_to_proto(Parameter())) == Parameter()


def test_settings_to_wire_validates_back() -> None:
    spec = {"n": Parameter(ParamType.INT), "f": Parameter(ParamType.FLOAT), "b": Parameter(ParamType.BOOL),
            "d": Parameter(ParamType.DURATION), "s": Parameter(), "unset": Parameter()}
    typed = validate("p", spec, {"n": "12", "f": "0.1", "b": "yes", "d": "1m30.5s", "s": "x"})
    wire = settings_to_wire(typed, spec)
    assert "unset" not in wire
    assert validate("p", spec, wire) == typed
