"""The plugin registry: every connector and transform this process can use.

Two kinds of origin feed it:

* ``builtin`` — Python plugins in the cdcflow process. A pluggy ``PluginManager``
  loads every entry point of the ``cdcflow`` group (``load_setuptools_entrypoints``;
  cdcflow's own connectors and transforms are two such entry points), and the
  ``pm.hook.cdcflow_connectors()`` / ``pm.hook.cdcflow_transforms()`` calls say
  what they provide.
* ``standalone`` — executables in a plugins directory, asked once for their
  specification over the Conduit protocol (``cdcflow.standalone.host.specify``).

Anything that fails to load is kept as a ``LoadFailure`` with its reason, so
``plugins list`` can show it; nothing is skipped silently and one broken plugin
never hides the others.

References name a plugin as ``[builtin|standalone|any:]NAME[@VERSION]``; ``any``
(the default) prefers standalone plugins, and the default version is the highest
semver (``latest``).
"""

from __future__ import annotations

import difflib
import importlib.metadata
import logging
import os
import re
import stat
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

import pluggy

from . import extras, hookspecs
from .errors import ConfigError, DuplicatePluginError, PluginLoadError, PluginNotFoundError
from .params import REDACTOR, Parameter, secret_values, validate as validate_params
from .sdk import ConnectorPlugin, Destination, Source, Transform

if TYPE_CHECKING:
    from .standalone.spec import PluginSpec

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "cdcflow"
PLUGINS_DIR_ENV = "CDCFLOW_PLUGINS_DIR"
BLOCK_PLUGINS_ENV = "CDCFLOW_BLOCK_PLUGINS"
BUILTIN = "builtin"
STANDALONE = "standalone"
ANY = "any"
CONNECTOR = "connector"
TRANSFORM = "transform"
SIDES = ("source", "destination", "transform")


# -- versions ----------------------------------------------------------------------
_SEMVER = re.compile(
    r"^v?(?P<core>\d+(?:\.\d+)*)(?:-(?P<pre>[0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$"
)


def version_key(version: str) -> tuple:
    """Sort key ordering versions as semver does (``v`` prefix optional).

    Pre-releases order below their release (``v1.0.0-rc.1`` < ``v1.0.0``);
    numeric pre-release identifiers compare as numbers. Strings that are not
    semver sort below every semver version, among themselves alphabetically.
    """
    m = _SEMVER.match(version.strip())
    if m is None:
        return (0, (), 0, (), version)
    core = tuple(int(p) for p in m.group("core").split("."))
    core = core + (0,) * (3 - len(core)) if len(core) < 3 else core
    pre = m.group("pre")
    if pre is None:
        return (1, core, 1, (), "")
    ids = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split("."))
    return (1, core, 0, ids, "")


def _same_version(a: str, b: str) -> bool:
    return a == b or a.lstrip("v") == b.lstrip("v")


# -- records of what was found -------------------------------------------------------
@dataclass(frozen=True)
class LoadFailure:
    """A plugin that was found but could not be used, and why."""

    type: str  # builtin | standalone
    origin: str  # entry point "name = module" or executable path
    reason: str

    def __str__(self) -> str:
        return f"{self.type} plugin {self.origin}: {self.reason}"


@dataclass(frozen=True)
class PluginInfo:
    """One usable plugin version: its specification and how to instantiate it."""

    kind: str  # connector | transform
    type: str  # builtin | standalone
    name: str
    version: str
    summary: str = field(default="", repr=False)
    description: str = field(default="", repr=False)
    author: str = field(default="", repr=False)
    source_params: Mapping[str, Parameter] = field(default_factory=dict, repr=False)
    destination_params: Mapping[str, Parameter] = field(default_factory=dict, repr=False)
    params: Mapping[str, Parameter] = field(default_factory=dict, repr=False)  # transforms
    has_source: bool = False
    has_destination: bool = False
    origin: str = ""
    # how to build instances: the classes of a builtin, the spec of a standalone
    impl: Any = field(default=None, compare=False, repr=False)

    def __hash__(self) -> int:
        return hash(self.ref)

    @property
    def ref(self) -> str:
        """Canonical reference, ``type:name@version``."""
        return f"{self.type}:{self.name}@{self.version}"

    @property
    def sides(self) -> tuple[str, ...]:
        if self.kind == TRANSFORM:
            return ("transform",)
        return tuple(s for s, ok in (("source", self.has_source), ("destination", self.has_destination)) if ok)

    def spec_for(self, side: str) -> Mapping[str, Parameter]:
        """Parameter spec of one side (``source``, ``destination`` or ``transform``)."""
        if side not in SIDES:
            raise ValueError(f"side must be one of {', '.join(SIDES)}, not {side!r}")
        if side not in self.sides:
            raise ConfigError(self.ref, None, "kind", f"{self.kind} {self.name!r} has no {side} side"
                              f" (it has: {', '.join(self.sides) or 'none'})")
        if side == "transform":
            if self.type != BUILTIN:
                return self.params
            from .engine import middleware  # Conduit's processor sdk.* settings

            return {**middleware.PROCESSOR_PARAMS, **self.params}
        own = self.source_params if side == "source" else self.destination_params
        if self.type != BUILTIN:  # a standalone plugin's spec lists the sdk.* settings its own SDK applies
            return own
        from .engine import middleware  # Conduit's sdk.* settings, which the engine applies around the plugin

        return {**(middleware.SOURCE_PARAMS if side == "source" else middleware.DESTINATION_PARAMS), **own}

    def validate(self, side: str, settings: Mapping[str, str], *, plugin_id: str | None = None) -> dict[str, Any]:
        """Check ``settings`` against the spec of ``side``; return typed values.

        Raises ConfigError naming the plugin (``plugin_id`` if given, else the ref),
        the parameter and the rule. Secret values are registered with the log
        redactor here, the first moment the runtime holds them on purpose.
        """
        spec = self.spec_for(side)
        REDACTOR.add(*secret_values(spec, settings))
        name = f"{plugin_id} ({self.ref})" if plugin_id else self.ref
        return validate_params(name, spec, settings)

    # -- factories ------------------------------------------------------------
    # New, unconfigured instances. ``host_options`` go to the standalone adapters
    # (cdcflow.standalone.host: ``options=HostOptions(...)``, ``store=...``); built-ins ignore them.
    def new_source(self, **host_options: Any) -> Source:
        self.spec_for("source")
        if self.type == BUILTIN:
            return self.impl.source()
        from .standalone.host import StandaloneSource

        return StandaloneSource(Path(self.origin), name=self.name, **host_options)

    def new_destination(self, **host_options: Any) -> Destination:
        self.spec_for("destination")
        if self.type == BUILTIN:
            return self.impl.destination()
        from .standalone.host import StandaloneDestination

        return StandaloneDestination(Path(self.origin), name=self.name, **host_options)

    def new_transform(self, **host_options: Any) -> Transform:
        self.spec_for("transform")
        if self.type == BUILTIN:
            return self.impl()
        from .standalone.host import StandaloneTransform

        return StandaloneTransform(Path(self.origin), name=self.name, **host_options)


# -- references ----------------------------------------------------------------------
@dataclass(frozen=True)
class PluginRef:
    """A parsed ``[type:]name[@version]``; ``version`` None means latest."""

    type: str
    name: str
    version: str | None

    @classmethod
    def parse(cls, ref: str) -> "PluginRef":
        text = ref.strip()
        ptype = ANY
        head, sep, rest = text.partition(":")
        if sep:
            if head not in (BUILTIN, STANDALONE, ANY):
                raise PluginNotFoundError(
                    f"invalid plugin reference {ref!r}: type must be builtin, standalone or any, not {head!r}")
            ptype, text = head, rest
        name, sep, version = text.partition("@")
        if not name or (sep and not version):
            raise PluginNotFoundError(f"invalid plugin reference {ref!r}: expected [type:]NAME[@VERSION]")
        return cls(ptype, name, None if version in ("", "latest") else version)


@dataclass(frozen=True)
class PythonPlugin:
    """One module registered with the pluggy ``PluginManager`` (an entry point or an extra)."""

    name: str  # pluggy's plugin name: the entry point's name
    origin: str  # the entry point's value (module)
    distribution: str  # "name version", empty for extra plugins


# -- the registry --------------------------------------------------------------------
class Registry:
    """What one load found. Cheap to query; build it with ``load_registry``."""

    def __init__(self) -> None:
        self._plugins: dict[tuple[str, str, str, str], PluginInfo] = {}
        self._duplicates: dict[tuple[str, str, str, str], list[str]] = {}
        self.errors: list[LoadFailure] = []
        self.python_plugins: list[PythonPlugin] = []  # what pluggy registered
        self.blocked: list[str] = []  # entry point names blocked in pluggy

    # -- building -------------------------------------------------------------
    def add(self, info: PluginInfo) -> None:
        """Add one plugin; a second one with the same kind, type, name and version is
        recorded as a load failure and makes every reference to that version fail."""
        key = (info.kind, info.type, info.name, info.version)
        first = self._plugins.get(key)
        if first is None:
            self._plugins[key] = info
            return
        origins = self._duplicates.setdefault(key, [first.origin])
        origins.append(info.origin)
        self.errors.append(LoadFailure(info.type, info.origin, str(self._duplicate_error(key))))

    def _duplicate_error(self, key: tuple[str, str, str, str]) -> DuplicatePluginError:
        kind, ptype, name, version = key
        origins = " and ".join(self._duplicates[key])
        return DuplicatePluginError(f"{ptype} {kind} {name}@{version} is provided twice: by {origins}")

    # -- queries --------------------------------------------------------------
    def plugins(self) -> list[PluginInfo]:
        return sorted(self._plugins.values(), key=lambda p: (p.kind, p.name, p.type, version_key(p.version)))

    def connectors(self) -> list[PluginInfo]:
        return [p for p in self.plugins() if p.kind == CONNECTOR]

    def transforms(self) -> list[PluginInfo]:
        return [p for p in self.plugins() if p.kind == TRANSFORM]

    def connector(self, ref: str) -> PluginInfo:
        return self.resolve(CONNECTOR, ref)

    def transform(self, ref: str) -> PluginInfo:
        return self.resolve(TRANSFORM, ref)

    def find(self, ref: str) -> PluginInfo:
        """A connector or transform (``plugins describe``); connectors win a name clash."""
        try:
            return self.connector(ref)
        except PluginNotFoundError as conn_err:
            try:
                return self.transform(ref)
            except PluginNotFoundError:
                raise conn_err from None

    def resolve(self, kind: str, ref: str) -> PluginInfo:
        want = PluginRef.parse(ref)
        same_name = [p for p in self._plugins.values() if p.kind == kind and p.name == want.name]
        types = [STANDALONE, BUILTIN] if want.type == ANY else [want.type]
        for ptype in types:
            candidates = [p for p in same_name if p.type == ptype]
            if want.version is not None:
                candidates = [p for p in candidates if _same_version(p.version, want.version)]
            if not candidates:
                continue
            best = max(candidates, key=lambda p: version_key(p.version))
            key = (best.kind, best.type, best.name, best.version)
            if key in self._duplicates:
                raise self._duplicate_error(key)
            return best
        raise PluginNotFoundError(self._not_found_message(kind, ref, want, same_name))

    def _not_found_message(self, kind: str, ref: str, want: PluginRef, same_name: list[PluginInfo]) -> str:
        msg = f"{kind} plugin {ref!r} not found"
        if same_name:
            have = ", ".join(p.ref for p in sorted(same_name, key=lambda p: (p.type, version_key(p.version))))
            return f"{msg}; available versions: {have}"
        failed = [e for e in self.errors if want.name in e.origin]
        if failed:  # most likely the reason (a missing extra, a broken install): say it first
            return f"{msg}: it may be the plugin that failed to load: " + "; ".join(str(e) for e in failed)
        names = sorted({p.name for p in self._plugins.values() if p.kind == kind})
        close = difflib.get_close_matches(want.name, names, n=3, cutoff=0.6)
        if close:
            msg += f"; did you mean {', '.join(close)}?"
        elif names:
            msg += f" (known {kind}s: {', '.join(names)})"
        return msg


# -- builtin (entry point) plugins -----------------------------------------------------
def _connector_info(plugin: object, origin: str) -> PluginInfo:
    if not isinstance(plugin, ConnectorPlugin):
        raise PluginLoadError(f"cdcflow_connectors returned {type(plugin).__name__}, not a ConnectorPlugin")
    if not plugin.name:
        raise PluginLoadError("connector plugin without a name")
    for side, cls, base in (("source", plugin.source, Source), ("destination", plugin.destination, Destination)):
        if cls is not None and not (isinstance(cls, type) and issubclass(cls, base)):
            raise PluginLoadError(f"{plugin.name}: {side} {cls!r} is not a subclass of cdcflow.sdk.{base.__name__}")
    if plugin.source is None and plugin.destination is None:
        raise PluginLoadError(f"{plugin.name}: neither a source nor a destination class")
    return PluginInfo(
        kind=CONNECTOR, type=BUILTIN, name=plugin.name, version=plugin.version, summary=plugin.summary,
        description=plugin.description, author=plugin.author,
        source_params=dict(plugin.source_params), destination_params=dict(plugin.destination_params),
        has_source=plugin.source is not None, has_destination=plugin.destination is not None,
        origin=origin, impl=plugin,
    )


def _transform_info(cls: object, origin: str) -> PluginInfo:
    if not (isinstance(cls, type) and issubclass(cls, Transform)):
        raise PluginLoadError(f"cdcflow_transforms returned {cls!r}, not a cdcflow.sdk.Transform subclass")
    if not cls.name:
        raise PluginLoadError(f"transform class {cls.__module__}.{cls.__qualname__} has no name")
    return PluginInfo(
        kind=TRANSFORM, type=BUILTIN, name=cls.name, version=cls.version, summary=cls.summary,
        description=cls.description, author=cls.author, params=dict(cls.parameters),
        origin=origin, impl=cls,
    )


def _describe_exc(e: BaseException) -> str:
    text = str(e)
    described = f"{type(e).__name__}: {text}" if text else type(e).__name__
    hint = extras.missing(e) if isinstance(e, ModuleNotFoundError) else None
    return f"{described} (install it: {hint})" if hint else described


def _dist_label(dist: Any) -> str:
    """``name version`` of an installed distribution (or pluggy's ``DistFacade``)."""
    meta = dist.metadata
    return f"{meta['Name']} {meta['Version']}"


def _group_entry_points() -> list[tuple[importlib.metadata.EntryPoint, Any]]:
    """The group's entry points with their distributions, in the order pluggy's
    ``load_setuptools_entrypoints`` visits them. Used only to explain what pluggy
    did: which entry point failed, which one a same-named one hid."""
    return [(ep, dist) for dist in importlib.metadata.distributions()
            for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP]


def _load_entry_points(pm: pluggy.PluginManager, reg: Registry, origins: dict[str, str]) -> None:
    """``pm.load_setuptools_entrypoints`` as pytest uses it, made to survive a
    broken plugin: pluggy stops at the first entry point that fails to import or
    register, so that one is recorded, blocked and the load resumed (pluggy skips
    what is already registered or blocked)."""
    while True:
        try:
            pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
            break
        except BaseException as e:  # noqa: BLE001 - an import may raise anything, even SystemExit
            if isinstance(e, KeyboardInterrupt):
                raise
            pending = next(((ep, dist) for ep, dist in _group_entry_points()
                            if pm.get_plugin(ep.name) is None and not pm.is_blocked(ep.name)), None)
            if pending is None:  # not an entry point's fault
                raise
            ep, dist = pending
            pm.set_blocked(ep.name)
            reg.errors.append(LoadFailure(BUILTIN, ep.value, f"entry point {ep.name!r} of {_dist_label(dist)} "
                                          f"failed to load: {_describe_exc(e)}"))
    loaded = {pm.get_name(plugin): dist for plugin, dist in pm.list_plugin_distinfo()}
    for ep, dist in _group_entry_points():
        first = loaded.get(ep.name)
        if first is None:
            continue
        if first.project_name == dist.metadata["Name"]:  # the same distribution (seen twice on sys.path)
            origins.setdefault(ep.name, ep.value)
        else:  # pluggy loads one entry point per name; another distribution's is not loaded
            reg.errors.append(LoadFailure(BUILTIN, ep.value, str(DuplicatePluginError(
                f"entry point {ep.name!r} of {_dist_label(dist)} is not loaded: {_dist_label(first)} "
                f"registered a plugin under that name first"))))


def _failed_impl(e: BaseException, impls: list[pluggy.HookImpl]) -> pluggy.HookImpl | None:
    """The implementation a hook call's exception came from: its frame is in the traceback."""
    codes = {getattr(impl.function, "__code__", None): impl for impl in impls}
    tb = e.__traceback__
    while tb is not None:
        impl = codes.get(tb.tb_frame.f_code)
        if impl is not None:
            return impl
        tb = tb.tb_next
    return None


def _call_hook(pm: pluggy.PluginManager, reg: Registry, hook: str, origins: dict[str, str],
               convert: Callable[[object, str], PluginInfo]) -> None:
    """Call ``pm.hook.<hook>()`` and add what each plugin returned.

    A plugin whose implementation raises (or returns None instead of a list) is
    recorded and left out through ``pm.subset_hook_caller``, and the call is made
    again, so one broken plugin never hides the others. pluggy returns results in
    the reverse order of ``get_hookimpls()``, which names each one's plugin.
    """
    failed: list[object] = []
    while True:
        caller = pm.subset_hook_caller(hook, failed) if failed else getattr(pm.hook, hook)
        impls = [i for i in reversed(caller.get_hookimpls()) if not (i.wrapper or i.hookwrapper)]
        try:
            results = caller()
        except Exception as e:  # noqa: BLE001 - a plugin's hook may raise anything
            impl = _failed_impl(e, impls)
            if impl is None:
                raise
            failed.append(impl.plugin)
            reg.errors.append(LoadFailure(BUILTIN, origins.get(impl.plugin_name, impl.plugin_name),
                                          f"{hook}() failed: {_describe_exc(e)}"))
            continue
        if len(results) == len(impls):
            break
        # pluggy drops None results, so they no longer line up: find who returned None
        returned_none = [impl for impl in impls
                         if pm.subset_hook_caller(hook, [i.plugin for i in impls if i is not impl] + failed)() == []]
        if not returned_none:  # a wrapper changed the results: they cannot be attributed
            reg.errors.append(LoadFailure(BUILTIN, hook, f"{hook}() results do not match its implementations"))
            return
        for impl in returned_none:
            failed.append(impl.plugin)
            reg.errors.append(LoadFailure(BUILTIN, origins.get(impl.plugin_name, impl.plugin_name),
                                          f"{hook}() returned None, not a list"))
    for impl, provided in zip(impls, results):
        origin = origins.get(impl.plugin_name, impl.plugin_name)
        for item in provided:
            try:
                reg.add(convert(item, origin))
            except Exception as e:  # noqa: BLE001
                reg.errors.append(LoadFailure(BUILTIN, origin, _describe_exc(e)))


def plugin_manager(extra_plugins: Iterable[tuple[str, object]] = (), blocked: Iterable[str] = (),
                   origins: dict[str, str] | None = None, reg: Registry | None = None) -> pluggy.PluginManager:
    """cdcflow's pluggy ``PluginManager``: the hookspecs, every entry point of the
    ``cdcflow`` group (built-ins included: cdcflow's own pyproject declares them)
    except ``blocked`` names, then ``extra_plugins``."""
    reg = reg if reg is not None else Registry()
    origins = origins if origins is not None else {}
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    for name in blocked:
        pm.set_blocked(name)
    _load_entry_points(pm, reg, origins)
    for origin, obj in extra_plugins:
        try:
            pm.register(obj, name=f"extra={origin}")
            origins[f"extra={origin}"] = origin
        except Exception as e:  # noqa: BLE001 - pluggy validation errors vary; record them
            reg.errors.append(LoadFailure(BUILTIN, origin, _describe_exc(e)))
    return pm


def blocked_from_env(blocked: Iterable[str] | None) -> list[str]:
    """The explicit names, else ``$CDCFLOW_BLOCK_PLUGINS`` (comma-separated entry point names)."""
    if blocked is not None:
        return list(blocked)
    return [n.strip() for n in os.environ.get(BLOCK_PLUGINS_ENV, "").split(",") if n.strip()]


def _load_python_plugins(reg: Registry, extra_plugins: Iterable[tuple[str, object]], blocked: list[str]) -> None:
    origins: dict[str, str] = {}  # pluggy plugin name -> origin shown to users
    pm = plugin_manager(extra_plugins, blocked, origins, reg)
    reg.python_plugins = [
        PythonPlugin(name, origins.get(name, name), _dist_label(dist) if dist is not None else "")
        for name, dist in ((n, _distinfo(pm, p)) for n, p in pm.list_name_plugin() if p is not None)]
    reg.blocked = sorted(n for n, p in pm.list_name_plugin() if p is None)
    _call_hook(pm, reg, "cdcflow_connectors", origins, _connector_info)
    _call_hook(pm, reg, "cdcflow_transforms", origins, _transform_info)


def _distinfo(pm: pluggy.PluginManager, plugin: object) -> Any:
    return next((d for p, d in pm.list_plugin_distinfo() if p is plugin), None)


# -- standalone plugins ----------------------------------------------------------------
_spec_cache: dict[tuple[str, int, int], Any] = {}
_spec_cache_lock = threading.Lock()


def _executables(plugins_dir: Path) -> list[Path]:
    out = []
    for entry in sorted(plugins_dir.iterdir()):
        if entry.name.startswith("."):
            continue
        try:
            st = entry.stat()
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and os.access(entry, os.X_OK):
            out.append(entry)
        else:
            log.debug("ignoring %s in plugins directory: not an executable file", entry)
    return out


def _specify_cached(path: Path, timeout: float) -> Any:
    st = path.stat()
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    with _spec_cache_lock:
        hit = _spec_cache.get(key)
    if hit is not None:
        return hit
    from .standalone.host import specify

    spec = specify(path, timeout=timeout)
    with _spec_cache_lock:
        _spec_cache[key] = spec
    return spec


def _standalone_info(spec: "PluginSpec", path: Path) -> PluginInfo:
    common = dict(
        type=STANDALONE, name=spec.name, version=spec.version, summary=spec.summary,
        description=spec.description, author=spec.author, origin=str(path), impl=spec,
    )
    if spec.kind == TRANSFORM:
        return PluginInfo(kind=TRANSFORM, params=dict(spec.params), **common)
    return PluginInfo(
        kind=CONNECTOR, source_params=dict(spec.source_params), destination_params=dict(spec.destination_params),
        has_source=spec.has_source, has_destination=spec.has_destination, **common,
    )


def _load_standalone_plugins(reg: Registry, plugins_dir: Path, timeout: float) -> None:
    if not plugins_dir.is_dir():
        reg.errors.append(LoadFailure(STANDALONE, str(plugins_dir), "plugins directory does not exist"))
        return
    paths = _executables(plugins_dir)
    if not paths:
        return

    def one(path: Path) -> PluginInfo | LoadFailure:
        try:
            spec = _specify_cached(path, timeout)
            if not getattr(spec, "name", ""):
                return LoadFailure(STANDALONE, str(path), "specification has no name")
            return _standalone_info(spec, path)
        except Exception as e:  # noqa: BLE001 - every failure becomes a listed load error
            return LoadFailure(STANDALONE, str(path), f"failed to specify: {_describe_exc(e)}")

    # Starting a plugin takes a while (interpreter start-up); ask them side by side.
    with ThreadPoolExecutor(max_workers=min(8, len(paths))) as pool:
        for result in pool.map(one, paths):
            if isinstance(result, LoadFailure):
                reg.errors.append(result)
            else:
                reg.add(result)


def plugins_dir_from_env(plugins_dir: str | Path | None) -> Path | None:
    """The explicit directory, else ``$CDCFLOW_PLUGINS_DIR``, else none."""
    if plugins_dir is not None and str(plugins_dir) != "":
        return Path(plugins_dir)
    env = os.environ.get(PLUGINS_DIR_ENV)
    return Path(env) if env else None


def load_registry(
    plugins_dir: str | Path | None = None,
    *,
    extra_plugins: Iterable[tuple[str, object]] = (),
    specify_timeout: float = 10.0,
    standalone: bool = True,
    blocked: Iterable[str] | None = None,
) -> Registry:
    """Find every plugin: entry points of group ``cdcflow`` and executables in
    ``plugins_dir`` (default ``$CDCFLOW_PLUGINS_DIR``; none when unset).

    ``extra_plugins`` are ``(origin, object with hookimpls)`` pairs registered as
    if they came from entry points (embedding, tests). Standalone specifications
    are cached per path, mtime and size for the life of the process.
    ``standalone=False`` loads the in-process plugins only (a process serving one
    plugin standalone must not start the executables of the plugins directory).
    ``blocked`` entry point names (default ``$CDCFLOW_BLOCK_PLUGINS``) are not
    loaded, as with pytest's ``-p no:NAME``.
    """
    reg = Registry()
    _load_python_plugins(reg, extra_plugins, blocked_from_env(blocked))
    directory = plugins_dir_from_env(plugins_dir) if standalone else None
    if directory is not None:
        _load_standalone_plugins(reg, directory, specify_timeout)
    for failure in reg.errors:
        log.debug("plugin load failure: %s", failure)
    return reg
