"""``cdcflow plugins init``: the scaffolded package installs (into a private
target, never the shared venv), is listed, and passes its own tests."""

import json
import subprocess
import sys

import pytest

from cdcflow.errors import ConfigError
from cdcflow.scaffold import scaffold

from helpers.plugins import subprocess_env


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=300, **kw)


@pytest.mark.parametrize("kind", ["source", "destination", "transform"])
def test_scaffolded_plugin_installs_is_listed_and_passes_its_test(tmp_path, kind):
    name = f"acme-{kind}"
    pkg = tmp_path / "pkg"
    env = subprocess_env()
    proc = run([sys.executable, "-m", "cdcflow.cli", "plugins", "init", name, "--kind", kind, "--out", str(pkg)], env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(pkg)
    assert (pkg / "pyproject.toml").read_text().count('"cdcflow_acme_' + kind + '.plugin"') == 1

    site = tmp_path / "site"
    proc = run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                "--target", str(site), str(pkg)], env=env)
    assert proc.returncode == 0, proc.stderr

    env_site = subprocess_env(PYTHONPATH=str(site))
    proc = run([sys.executable, "-m", "cdcflow.cli", "plugins", "list", "--json"], env=env_site)
    assert proc.returncode == 0, proc.stderr
    listed = {p["name"]: p for p in json.loads(proc.stdout)["plugins"]}
    assert listed[name]["origin"] == f"cdcflow_acme_{kind}.plugin"
    assert listed[name]["kind"] == ("transform" if kind == "transform" else "connector")
    assert listed[name]["sides"] == [kind]

    proc = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(pkg),
                "-c", str(pkg / "pyproject.toml"), str(pkg / "tests")], env=env_site, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 passed" in proc.stdout


def test_init_refuses_bad_names_and_non_empty_directories(tmp_path):
    with pytest.raises(ConfigError, match="must match"):
        scaffold("Bad Name", "source", tmp_path / "x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not an empty directory"):
        scaffold("ok", "source", tmp_path / "full")
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"
