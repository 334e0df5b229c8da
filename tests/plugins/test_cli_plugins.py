"""``cdcflow plugins ...`` run as a real process; the --json shapes are pinned here
(docs/cli.md documents them)."""

import json
import os
import subprocess
import sys

import pytest

from helpers.plugins import install_fake_dist, subprocess_env

LIST_KEYS = {"plugins", "errors", "python_plugins", "blocked"}
PYTHON_PLUGIN_KEYS = {"name", "origin", "distribution"}
PLUGIN_KEYS = {"ref", "kind", "type", "name", "version", "sides", "summary", "origin"}
ERROR_KEYS = {"type", "origin", "reason"}
DESCRIBE_KEYS = PLUGIN_KEYS | {"description", "author", "parameters"}
PARAM_KEYS = {"type", "default", "description", "required", "secret", "validations"}

SECRET_PLUGIN = {
    "cdcflow_t_cli": """
        from cdcflow.hookspecs import hookimpl
        from cdcflow.params import Parameter, ParamType
        from cdcflow.sdk import ConnectorPlugin, Destination

        class Dst(Destination):
            def write(self, records):
                return None

        @hookimpl
        def cdcflow_connectors():
            return [ConnectorPlugin(name="vault", version="v1.0.0", summary="keeps secrets", destination=Dst,
                    destination_params={
                        "password": Parameter(ParamType.STRING, "hunter2-default", "pw", secret=True),
                        "retries": Parameter(ParamType.INT, "3", "tries", greater_than=0, less_than=10.5),
                        "mode": Parameter(ParamType.STRING, "a", "m", required=True, inclusion=("a", "b"),
                                          regex="[ab]")})]
    """,
    "cdcflow_t_cli_broken": "import nothing_here_at_all\n",
}


def cdcflow(*args, pythonpath=None, check=True):
    env = subprocess_env(**({"PYTHONPATH": str(pythonpath)} if pythonpath else {}))
    proc = subprocess.run([sys.executable, "-m", "cdcflow.cli", *args], capture_output=True, text=True,
                          env=env, timeout=120)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return install_fake_dist(tmp_path_factory.mktemp("site"), "cdcflow-t-cli", SECRET_PLUGIN,
                             {"vault": "cdcflow_t_cli", "broken": "cdcflow_t_cli_broken"})


def test_list_json_shape_and_load_errors(site):
    out = json.loads(cdcflow("plugins", "list", "--json", pythonpath=site).stdout)
    assert set(out) == LIST_KEYS
    for p in out["plugins"]:
        assert set(p) == PLUGIN_KEYS
    refs = {p["ref"]: p for p in out["plugins"]}
    gen = next(p for p in out["plugins"] if p["name"] == "generator")
    assert gen["kind"] == "connector" and gen["type"] == "builtin" and gen["sides"] == ["source"]
    assert refs["builtin:vault@v1.0.0"]["origin"] == "cdcflow_t_cli"
    assert [set(e) for e in out["errors"]] == [ERROR_KEYS] * len(out["errors"])
    broken = [e for e in out["errors"] if e["origin"] == "cdcflow_t_cli_broken"]
    assert broken and "nothing_here_at_all" in broken[0]["reason"]
    # what pluggy registered, by entry point name, with the distribution that declared it
    pyplugins = {p["name"]: p for p in out["python_plugins"]}
    assert all(set(p) == PYTHON_PLUGIN_KEYS for p in out["python_plugins"])
    assert pyplugins["vault"] == {"name": "vault", "origin": "cdcflow_t_cli", "distribution": "cdcflow-t-cli 0.1.0"}
    assert pyplugins["builtin-connectors"]["distribution"].startswith("cdcflow ")
    assert "broken" not in pyplugins and out["blocked"] == ["broken"]


def test_list_text_shows_plugins_and_errors(site):
    text = cdcflow("plugins", "list", pythonpath=site).stdout
    assert "generator" in text and "vault" in text
    assert "failed to load" in text and "nothing_here_at_all" in text


def test_describe_json_shape_masks_secrets(site):
    doc = json.loads(cdcflow("plugins", "describe", "vault", "--json", pythonpath=site).stdout)
    assert set(doc) == DESCRIBE_KEYS
    assert set(doc["parameters"]) == {"destination"}
    params = doc["parameters"]["destination"]
    assert all(set(p) == PARAM_KEYS for p in params.values())
    assert params["password"]["secret"] is True and params["password"]["default"] == "***"
    assert params["retries"] == {"type": "int", "default": "3", "description": "tries", "required": False,
                                 "secret": False, "validations": [{"type": "greater-than", "value": "0"},
                                                                  {"type": "less-than", "value": "10.5"}]}
    assert params["mode"]["validations"] == [{"type": "required", "value": ""}, {"type": "inclusion", "value": "a,b"},
                                             {"type": "regex", "value": "[ab]"}]
    text = cdcflow("plugins", "describe", "vault", pythonpath=site).stdout
    assert "hunter2-default" not in text and "secret" in text


def test_describe_builtin_generator_lists_its_parameters():
    doc = json.loads(cdcflow("plugins", "describe", "builtin:generator", "--json").stdout)
    assert {"recordCount", "rate", "operations", "format.type", "seed", "partitions"} <= set(doc["parameters"]["source"])


def test_unknown_plugin_exits_2_without_traceback():
    proc = cdcflow("plugins", "describe", "generatr", check=False)
    assert proc.returncode == 2
    assert "not found" in proc.stderr and "did you mean generator" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_json_log_format_emits_one_object_per_line(site):
    proc = cdcflow("--log-format", "json", "--log-level", "debug", "plugins", "list", pythonpath=site)
    lines = [json.loads(line) for line in proc.stderr.splitlines() if line.strip()]
    assert lines, "debug logging reports the load failures"
    assert all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    assert any("nothing_here_at_all" in line["message"] for line in lines)


def test_export_writes_an_executable_launcher(tmp_path):
    out = tmp_path / "out"
    proc = cdcflow("plugins", "export", "generator", "--out", str(out))
    path = proc.stdout.strip()
    assert os.access(path, os.X_OK) and os.path.dirname(path) == str(out)


def test_no_subcommand_prints_help_and_exits_2():
    proc = cdcflow(check=False)
    assert proc.returncode == 2 and "plugins" in proc.stderr


def test_invalid_arguments_are_config_errors_with_exit_2(tmp_path):
    proc = cdcflow("plugins", "init", "Bad Name", "--kind", "source", "--out", str(tmp_path / "x"), check=False)
    assert proc.returncode == 2 and "must match" in proc.stderr and "Traceback" not in proc.stderr
    proc = cdcflow("plugins", check=False)
    assert proc.returncode == 2 and "list" in proc.stderr
