"""TiDB text parses the same on every supported Python (.ci/pythons runs these on 3.10-3.13).

Python 3.10's ``datetime.fromisoformat`` takes only 0, 3 or 6 fraction digits (3.11 takes
any), and TiDB writes as many as the column's fsp (0-6); its ``binascii.a2b_base64`` has no
``strict_mode``. Without ``tidb.datetime_from_text`` / ``tidb.b64decode_strict`` these fail on 3.10."""

from __future__ import annotations

import datetime as dt

import pytest

from cdcflow.connectors.ticdc import tidb

CASES = [("2020-01-02 03:04:05", 0)] + [
    ("2020-01-02 03:04:05." + "123456"[:n], int("123456"[:n].ljust(6, "0"))) for n in range(1, 7)]


@pytest.mark.parametrize(("text", "micro"), CASES, ids=[f"fsp{n}" for n in range(7)])
def test_every_fsp_parses_to_the_same_value(text, micro):
    want = dt.datetime(2020, 1, 2, 3, 4, 5, micro)
    assert tidb.parse_datetime(text) == want
    expr = tidb.inline_parse_expr("DATETIME", "v", "None")
    assert eval(expr, dict(tidb.INLINE_NAMES), {"v": text}) == want  # the generated decoders' form


@pytest.mark.parametrize("bad", ["2020-01-02 03:04:05.", "2020-01-02 03:04:05.1234567", "2020-01-02T03:04:05"])
def test_other_shapes_are_still_rejected(bad):
    with pytest.raises(ValueError):
        tidb.parse_datetime(bad)


@pytest.mark.parametrize(("text", "value"), [("", b""), ("YQ==", b"a"), ("YWI=", b"ab"), ("YWJj", b"abc"),
                                             ("AP8A/w==", b"\x00\xff\x00\xff")])
def test_strict_base64_decodes_valid_text(text, value):
    assert tidb.b64decode_strict(text) == value


@pytest.mark.parametrize("bad", ["YQ", "YQ=", "=YQ=", "YQ==YQ==", "Y Q==", "YQ==\n", "YW*j"])
def test_strict_base64_rejects_what_strict_mode_rejects(bad):
    with pytest.raises(ValueError):  # binascii.Error
        tidb.b64decode_strict(bad)


@pytest.mark.parametrize("reads_nul", [True, False], ids=["csv-reads-nul", "python310-csv"])
def test_csv_text_with_nul_decodes_column_wise_on_every_python(monkeypatch, reads_nul):
    """3.10's csv module refuses NUL ("line contains NUL"); the column-wise reader carries NULs past
    it, so a LONGTEXT holding NUL reads the same (and in the same form) as on 3.11+."""
    import sys

    from cdcflow.connectors.ticdc import csv as tcsv
    from cdcflow.connectors.ticdc.csv import decode as tcsv_decode
    from cdcflow.connectors.ticdc.tidb import Column, TableSchema

    if reads_nul and sys.version_info < (3, 11):
        pytest.skip("this Python's csv module does not read NUL")
    monkeypatch.setattr(tcsv_decode, "_kernel", None)
    monkeypatch.setattr(tcsv_decode, "_CSV_READS_NUL", reads_nul)
    table = TableSchema("db", "t", (Column("id", "BIGINT", primary_key=True, nullable=False), Column("c", "LONGTEXT")))
    rows = [(1, "a\x00b"), (2, "\x00"), (3, "\ue000 stand-in lookalike \x00")]
    text = "".join(f'"I","t","db",{i},"{v}"\n' for i, v in rows).encode()
    got = tcsv.CsvDecoder(table, tcsv.CsvOptions()).decode_columns(text)
    assert isinstance(got, tcsv.CsvColumns)  # not handed to the row-wise reader
    assert got.columns == [[1, 2, 3], [v for _, v in rows]]
