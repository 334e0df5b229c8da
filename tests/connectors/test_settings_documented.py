"""Every setting a TiCDC connector accepts is named in its doc (issue 14).

The declared parameters (``ConnectorPlugin.source_params`` / ``destination_params``, what
``cdcflow plugins describe`` shows and what validation accepts) are compared with the setting
names written in backticks in the connector's doc, so a setting added without documentation
fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cdcflow.connectors import builtin, builtin_kafka

DOCS = Path(__file__).resolve().parents[2] / "docs"


def documented_names(doc: Path) -> set[str]:
    """Every backticked word of the doc (setting names are written as `name`)."""
    return set(re.findall(r"`([^`\s]+)`", doc.read_text()))


@pytest.mark.parametrize(("plugin", "doc"), [(builtin_kafka.KAFKA, "connector-kafka.md"),
                                             (builtin.STORAGE, "connector-storage.md")],
                         ids=["kafka", "storage"])
def test_every_declared_setting_is_documented(plugin, doc):
    names = documented_names(DOCS / doc)
    for side, params in (("source", plugin.source_params), ("destination", plugin.destination_params)):
        missing = sorted(set(params or {}) - names)
        assert not missing, f"docs/{doc} does not document {side} setting(s) {missing}"


def test_a_setting_missing_from_the_doc_is_found(tmp_path):
    """The check itself: a doc without one of the names does not document it."""
    doc = tmp_path / "d.md"
    doc.write_text("| `uri` | both |\nand `kafka.*` properties\n")
    assert {"uri", "kafka.*"} <= documented_names(doc)
    assert "protocol" not in documented_names(doc)
