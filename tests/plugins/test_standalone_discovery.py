"""Standalone plugins found in a plugins directory: real executables, specified over gRPC."""

import time

import pytest

from cdcflow.registry import load_registry
from cdcflow.standalone.export import export_launcher

from helpers.plugins import write_executable


@pytest.fixture(scope="module")
def generator_launcher(tmp_path_factory):
    return export_launcher("builtin:generator", tmp_path_factory.mktemp("export"))


def test_plugins_dir_is_scanned_and_standalone_is_preferred(tmp_path, clean_env, generator_launcher):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    counter = tmp_path / "starts"
    # a wrapper counting how often the plugin is started, then running the exported launcher
    write_executable(plugins / "gen", f'#!/bin/sh\necho x >> "{counter}"\nexec "{generator_launcher}" "$@"\n')
    write_executable(plugins / "crashes", "#!/bin/sh\necho 'cannot start: missing config' >&2\nexit 3\n")
    (plugins / "notes.txt").write_text("not executable, ignored")

    clean_env.setenv("CDCFLOW_PLUGINS_DIR", str(plugins))
    reg = load_registry()  # directory from the environment
    standalone = reg.connector("standalone:generator")
    assert standalone.origin == str(plugins / "gen")
    assert standalone.ref.startswith("standalone:generator@")
    assert standalone.has_source and "recordCount" in standalone.source_params
    assert reg.connector("generator") == standalone  # any: standalone preferred
    assert reg.connector("builtin:generator").type == "builtin"

    failures = {e.origin: e for e in reg.errors if e.type == "standalone"}
    assert str(plugins / "crashes") in failures
    assert "failed to specify" in failures[str(plugins / "crashes")].reason
    assert not any("notes.txt" in e.origin for e in reg.errors)

    # specified once: a second load reuses the spec while the file is unchanged
    starts = counter.read_text().count("x")
    load_registry(plugins)
    assert counter.read_text().count("x") == starts


def test_standalone_plugin_runs_through_the_factory(tmp_path, clean_env, generator_launcher):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    write_executable(plugins / "gen", f'#!/bin/sh\nexec "{generator_launcher}" "$@"\n')
    info = load_registry(plugins).connector("standalone:generator")
    source = info.new_source()
    try:
        source.configure(info.validate("source", {"recordCount": "5", "format.options.id": "int"}))
        source.open(None)
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 5 and time.monotonic() < deadline:
            batch = source.read(10)  # non-blocking: [] until records arrive
            assert batch is not None, "the stream ended before 5 records"
            got += batch
            time.sleep(0.02)
        assert [r.position for r in got[:5]] == [f"0/{i}".encode() for i in range(5)]
    finally:
        source.stop()
        source.teardown()
