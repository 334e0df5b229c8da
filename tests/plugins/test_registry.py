import logging

import pytest

from cdcflow.errors import ConfigError, DuplicatePluginError, PluginNotFoundError
from cdcflow.params import MASK, REDACTOR, Parameter, ParamType
from cdcflow.registry import PluginInfo, PluginRef, Registry, load_registry, version_key

from helpers.plugins import install_fake_dist

PLUGIN_MODULES = {
    "cdcflow_t_broken": """
        raise RuntimeError("boom at import")
    """,
    "cdcflow_t_hookfails": """
        from cdcflow.hookspecs import hookimpl

        @hookimpl
        def cdcflow_connectors():
            raise ValueError("cannot list")
    """,
    "cdcflow_t_badreturn": """
        from cdcflow.hookspecs import hookimpl

        @hookimpl
        def cdcflow_connectors():
            return [object()]
    """,
    "cdcflow_t_versions": """
        from cdcflow.hookspecs import hookimpl
        from cdcflow.params import Parameter
        from cdcflow.sdk import ConnectorPlugin, Destination, Source, Transform

        class Dst(Destination):
            def write(self, records):
                return None

        class Src(Source):
            def read(self, n):
                return None

        SPEC = {"token": Parameter(required=True, secret=True, description="API token"),
                "url": Parameter(default="http://x", description="where")}

        @hookimpl
        def cdcflow_connectors():
            return [ConnectorPlugin(name="multi", version=v, destination=Dst, destination_params=SPEC)
                    for v in ("v1.2.0", "v1.10.0", "v1.10.0-rc.1", "v1.9.9")] + [
                    ConnectorPlugin(name="dup", version="v1.0.0", source=Src)]

        class Upper(Transform):
            name = "upper"
            version = "v2.0.0"
            parameters = {"field": Parameter(required=True)}

            def process_record(self, record):
                return record

        @hookimpl
        def cdcflow_transforms():
            return [Upper]
    """,
    "cdcflow_t_dup": """
        from cdcflow.hookspecs import hookimpl
        from cdcflow.sdk import ConnectorPlugin, Source

        class Src(Source):
            def read(self, n):
                return None

        @hookimpl
        def cdcflow_connectors():
            return [ConnectorPlugin(name="dup", version="v1.0.0", source=Src)]
    """,
}
ENTRY_POINTS = {
    "broken": "cdcflow_t_broken",
    "hookfails": "cdcflow_t_hookfails",
    "badreturn": "cdcflow_t_badreturn",
    "versions": "cdcflow_t_versions",
    "dup": "cdcflow_t_dup",
    "missing": "cdcflow_t_not_there",
}


@pytest.fixture
def registry(tmp_path, clean_env) -> Registry:
    root = install_fake_dist(tmp_path / "site", "cdcflow-test-plugins", PLUGIN_MODULES, ENTRY_POINTS)
    clean_env.syspath_prepend(str(root))
    return load_registry()


def test_version_order_is_semver():
    versions = ["v1.10.0", "v1.2.0", "v1.10.0-rc.1", "v1.10.0-rc.2", "v1.10.0-alpha", "v0.9", "junk", "1.2.1"]
    ordered = sorted(versions, key=version_key)
    assert ordered == ["junk", "v0.9", "v1.2.0", "1.2.1", "v1.10.0-alpha", "v1.10.0-rc.1", "v1.10.0-rc.2", "v1.10.0"]


@pytest.mark.parametrize("text,expected", [
    ("file", PluginRef("any", "file", None)),
    ("builtin:file", PluginRef("builtin", "file", None)),
    ("standalone:my-conn@v1.2.3", PluginRef("standalone", "my-conn", "v1.2.3")),
    ("any:file@latest", PluginRef("any", "file", None)),
    ("field.set", PluginRef("any", "field.set", None)),
])
def test_reference_parsing(text, expected):
    assert PluginRef.parse(text) == expected


@pytest.mark.parametrize("bad", ["nope:file", "file@", "@v1", ""])
def test_invalid_references_are_errors(bad):
    with pytest.raises(PluginNotFoundError, match="reference"):
        PluginRef.parse(bad)


def test_builtins_are_registered_through_the_entry_point(clean_env):
    reg = load_registry()
    names = {(p.kind, p.name) for p in reg.plugins()}
    assert {("connector", "generator"), ("connector", "file"), ("connector", "log")} <= names
    gen = reg.connector("generator")
    assert gen.type == "builtin" and gen.origin == "cdcflow.connectors.builtin"
    assert gen.ref == f"builtin:generator@{gen.version}"
    assert gen.has_source and not gen.has_destination
    assert reg.connector("builtin:file").sides == ("source", "destination")


def test_every_load_failure_is_recorded_with_its_reason(registry):
    by_origin = {e.origin: e.reason for e in registry.errors}
    assert "RuntimeError: boom at import" in by_origin["cdcflow_t_broken"]
    assert "ValueError: cannot list" in by_origin["cdcflow_t_hookfails"]
    assert "not a ConnectorPlugin" in by_origin["cdcflow_t_badreturn"]
    assert "No module named 'cdcflow_t_not_there'" in by_origin["cdcflow_t_not_there"]
    # the good plugins of the same distribution are still there
    assert registry.connector("multi").origin == "cdcflow_t_versions"


def test_default_version_is_the_highest_release(registry):
    assert registry.connector("multi").version == "v1.10.0"
    assert registry.connector("multi@v1.9.9").version == "v1.9.9"
    assert registry.connector("builtin:multi@1.2.0").version == "v1.2.0"
    assert registry.connector("multi@v1.10.0-rc.1").version == "v1.10.0-rc.1"


def test_unknown_version_lists_the_available_ones(registry):
    with pytest.raises(PluginNotFoundError) as e:
        registry.connector("multi@v3.0.0")
    assert "builtin:multi@v1.10.0" in str(e.value) and "builtin:multi@v1.2.0" in str(e.value)


def test_unknown_name_suggests_close_names(registry):
    with pytest.raises(PluginNotFoundError, match="did you mean generator"):
        registry.connector("generater")
    with pytest.raises(PluginNotFoundError):
        registry.connector("standalone:generator")  # exists only as builtin
    with pytest.raises(PluginNotFoundError):
        registry.transform("multi")  # a connector, not a transform


def test_duplicates_are_an_error_naming_both_origins(registry):
    with pytest.raises(DuplicatePluginError) as e:
        registry.connector("dup")
    assert "cdcflow_t_versions" in str(e.value) and "cdcflow_t_dup" in str(e.value)
    assert any("provided twice" in f.reason for f in registry.errors)


def test_transforms_are_registered_and_validated(registry):
    info = registry.transform("upper")
    assert (info.kind, info.type, info.version, info.sides) == ("transform", "builtin", "v2.0.0", ("transform",))
    assert info.new_transform().name == "upper"
    with pytest.raises(ConfigError) as e:
        info.validate("transform", {})
    assert e.value.parameter == "field" and e.value.rule == "required" and "builtin:upper@v2.0.0" in str(e.value)


def test_validate_names_plugin_parameter_and_rule_and_registers_secrets(registry, caplog):
    info = registry.connector("multi")
    with pytest.raises(ConfigError) as e:
        info.validate("destination", {"url": "x"}, plugin_id="out")
    assert (e.value.parameter, e.value.rule) == ("token", "required")
    assert "out (builtin:multi@v1.10.0)" in str(e.value)
    with pytest.raises(ConfigError, match="has no source side"):
        info.validate("source", {})

    cfg = info.validate("destination", {"token": "s3cr3t-value-42"})
    own = {k: v for k, v in cfg.items() if not k.startswith("sdk.")}  # Conduit's middleware settings aside
    assert own == {"token": "s3cr3t-value-42", "url": "http://x"}
    assert cfg["sdk.batch.size"] == 0 and cfg["sdk.record.format"] == "opencdc/json"
    assert REDACTOR.redact("token is s3cr3t-value-42") == f"token is {MASK}"


def test_factories_build_fresh_sdk_instances(clean_env):
    reg = load_registry()
    file_conn = reg.connector("file")
    a, b = file_conn.new_source(), file_conn.new_source()
    assert a is not b and type(a).__name__ == "FileSource"
    assert type(file_conn.new_destination()).__name__ == "FileDestination"
    with pytest.raises(ConfigError):
        reg.connector("log").new_source()


def test_extra_plugins_register_like_entry_points(clean_env):
    from cdcflow.hookspecs import hookimpl
    from cdcflow.sdk import ConnectorPlugin, Destination

    class Sink(Destination):
        def write(self, records):
            return None

    class Extra:
        @hookimpl
        def cdcflow_connectors(self):
            return [ConnectorPlugin(name="sink", destination=Sink,
                                    destination_params={"pw": Parameter(ParamType.STRING, secret=True)})]

    reg = load_registry(extra_plugins=[("tests.extra", Extra())])
    info = reg.connector("sink")
    assert info.origin == "tests.extra" and info.destination_params["pw"].secret


def test_plugin_info_is_frozen_and_hashable(clean_env):
    info = load_registry().connector("generator")
    assert isinstance(info, PluginInfo)
    with pytest.raises(AttributeError):
        info.name = "x"  # type: ignore[misc]
    assert len({info, load_registry().connector("generator")}) == 1


def test_missing_plugins_dir_is_a_load_error_not_a_crash(tmp_path, clean_env):
    reg = load_registry(tmp_path / "nope")
    assert any(e.type == "standalone" and "does not exist" in e.reason for e in reg.errors)
    assert reg.connector("generator")


def test_load_failures_name_the_entry_point_and_its_distribution(registry):
    by_origin = {e.origin: e.reason for e in registry.errors}
    assert "entry point 'broken' of cdcflow-test-plugins 0.1.0 failed to load" in by_origin["cdcflow_t_broken"]
    assert "entry point 'missing' of cdcflow-test-plugins 0.1.0" in by_origin["cdcflow_t_not_there"]
    # pluggy blocks what failed to load, and lists what it registered with its distribution
    assert {"broken", "missing"} <= set(registry.blocked)
    by_name = {p.name: p for p in registry.python_plugins}
    assert by_name["versions"].distribution == "cdcflow-test-plugins 0.1.0"
    assert by_name["builtin-connectors"].origin == "cdcflow.connectors.builtin"
    assert by_name["builtin-connectors"].distribution.startswith("cdcflow ")


def test_an_entry_point_name_taken_by_another_distribution_is_an_error_naming_both(tmp_path, clean_env):
    for dist, module in (("cdcflow-second", "cdcflow_t_second"), ("cdcflow-first", "cdcflow_t_first")):
        root = install_fake_dist(tmp_path / dist, dist, {module: PLUGIN_MODULES["cdcflow_t_dup"]}, {"same": module})
        clean_env.syspath_prepend(str(root))  # the last prepended is first on sys.path
    reg = load_registry()
    assert reg.connector("dup").origin == "cdcflow_t_first"  # the first on sys.path wins, as in pluggy
    clash = [e for e in reg.errors if e.origin == "cdcflow_t_second"]
    assert len(clash) == 1
    assert "'same' of cdcflow-second 0.1.0 is not loaded: cdcflow-first 0.1.0" in clash[0].reason


def test_blocked_entry_points_are_not_loaded(tmp_path, clean_env):
    root = install_fake_dist(tmp_path / "site", "cdcflow-test-plugins", PLUGIN_MODULES, ENTRY_POINTS)
    clean_env.syspath_prepend(str(root))
    clean_env.setenv("CDCFLOW_BLOCK_PLUGINS", "versions, broken")
    reg = load_registry()
    assert {"versions", "broken"} <= set(reg.blocked)
    with pytest.raises(PluginNotFoundError):
        reg.connector("multi")
    assert not any(e.origin == "cdcflow_t_broken" for e in reg.errors)  # blocked before import
    assert reg.connector("dup").origin == "cdcflow_t_dup"  # no longer provided twice
    assert reg.connector("generator")  # everything else still loads
    assert load_registry(blocked=()).connector("multi")  # an explicit list overrides the variable


def test_hooks_are_called_through_pluggy_so_wrappers_see_every_call(clean_env):
    """A plugin may wrap a hook (pluggy's ``wrapper=True``), as pytest plugins do: the
    registry calls ``pm.hook.<name>()``, not each implementation on its own."""
    from cdcflow.hookspecs import hookimpl

    seen: list[int] = []

    class Observer:
        @hookimpl(wrapper=True)
        def cdcflow_transforms(self):
            result = yield
            seen.append(sum(len(r) for r in result))
            return result

    reg = load_registry(extra_plugins=[("tests.observer", Observer())])
    assert seen == [len(reg.transforms())] and seen[0] > 0
    assert not [e for e in reg.errors if e.origin == "tests.observer"]


def test_a_hook_returning_none_is_named_and_the_others_still_count(clean_env):
    from cdcflow.hookspecs import hookimpl

    class Nothing:
        @hookimpl
        def cdcflow_connectors(self):
            return None

    reg = load_registry(extra_plugins=[("tests.nothing", Nothing())])
    assert [e.reason for e in reg.errors if e.origin == "tests.nothing"] == ["cdcflow_connectors() returned None, not a list"]
    assert reg.connector("file").origin == "cdcflow.connectors.builtin"
