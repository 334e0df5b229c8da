"""cdc.route, cdc.filter, cdc.mask and cdc.dedup, ending with route + dedup on a
replayed TiCDC stream built with the TiCDC codecs' own ``to_record``."""

from __future__ import annotations

import hashlib
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from helpers.transforms import chain, configure_only, make

from cdcflow.connectors.ticdc.events import DELETE, INSERT, UPDATE, DDLEvent, ResolvedEvent, RowChange, to_record
from cdcflow.errors import ConfigError
from cdcflow.record import Operation, Record
from cdcflow.sdk import FILTERED, Failed
from cdcflow.connectors.ticdc.tidb import Column, TableSchema


def row(collection: str, after: dict | None = None, **md: str) -> Record:
    return Record(metadata={"opencdc.collection": collection, **md}, after=after if after is not None else {"id": 1})


# -- cdc.route -------------------------------------------------------------------------


def test_route_merges_shards_and_keeps_others():
    t = make("cdc.route", routes="shop_*.orders_*:shop.orders, legacy.*:archive.{table}")
    recs = [row("shop_1.orders_07"), row("shop_22.orders_1"), row("legacy.users"), row("shop.users"), Record()]
    t.process(recs)
    assert [r.metadata.get("opencdc.collection") for r in recs] == [
        "shop.orders", "shop.orders", "archive.users", "shop.users", None]


def test_route_regex_groups_first_match_wins_and_ddl():
    t = make("cdc.route", regex="true", routes="tenant_(\\d+)\\.(?P<t>\\w+):t\\1.\\g<t>\nshop_.*:never")
    ddl = Record(metadata={"opencdc.collection": "tenant_7.orders", "cdcflow.control": "ddl"})
    resolved = Record(metadata={"cdcflow.control": "resolved"})
    recs = [row("tenant_42.users"), ddl, resolved]
    t.process(recs)
    assert recs[0].metadata["opencdc.collection"] == "t42.users"
    assert ddl.metadata["opencdc.collection"] == "t7.orders"
    assert resolved.metadata == {"cdcflow.control": "resolved"}


@pytest.mark.parametrize(
    "settings, fragment",
    [
        ({"routes": "shop_*"}, "not pattern:target"),
        ({"routes": "a:"}, "not pattern:target"),
        ({"routes": "(unclosed:x", "regex": "true"}, "invalid pattern"),
        ({"routes": "a(b):\\2", "regex": "true"}, "group '2'"),
        ({}, "value is required"),
    ],
)
def test_route_bad_settings(settings, fragment):
    with pytest.raises(ConfigError, match=fragment) as e:
        configure_only("cdc.route", **settings)
    assert e.value.parameter == "routes"


# -- cdc.filter ------------------------------------------------------------------------


def test_filter_tables_include_and_exclude():
    t = make("cdc.filter", **{"tables.include": "shop.*,crm.customers", "tables.exclude": "shop.tmp_*"})
    recs = [row("shop.orders"), row("shop.tmp_x"), row("crm.customers"), row("crm.leads"), Record(after={"a": 1})]
    out = t.process(recs)
    assert [o is FILTERED for o in out] == [False, True, False, True, False]


def test_filter_tables_applies_to_table_ddl_not_resolved_or_schema_ddl():
    t = make("cdc.filter", **{"tables.exclude": "audit.*"})
    table_ddl = Record(metadata={"cdcflow.control": "ddl", "opencdc.collection": "audit.log", "ticdc.table": "log"})
    schema_ddl = Record(metadata={"cdcflow.control": "ddl", "opencdc.collection": "audit", "ticdc.table": ""})
    resolved = Record(metadata={"cdcflow.control": "resolved"})
    assert t.process([table_ddl, schema_ddl, resolved]) == [FILTERED, schema_ddl, resolved]


def test_filter_columns_exclude_and_include():
    ex = make("cdc.filter", **{"columns.exclude": "password, shop.users.ssn"})
    a = Record(metadata={"opencdc.collection": "shop.users"}, key={"id": 1, "password": "k"},
               before={"id": 1, "password": "x", "ssn": "1"}, after={"id": 1, "password": "y", "ssn": "2", "n": 3})
    b = row("crm.people", {"id": 2, "ssn": "keep", "password": "drop"})
    ex.process([a, b])
    assert a.before == {"id": 1} and a.after == {"id": 1, "n": 3} and a.key == {"id": 1, "password": "k"}
    assert b.after == {"id": 2, "ssn": "keep"}
    inc = make("cdc.filter", **{"columns.include": "id,*.users.name", "regex": "false"})
    c, d = row("shop.users", {"id": 1, "name": "n", "x": 1}), row("shop.orders", {"id": 1, "name": "n"})
    inc.process([c, d, row("shop.users", {"id": 3, "y": 2})])
    assert c.after == {"id": 1, "name": "n"} and d.after == {"id": 1}


def test_filter_bad_settings():
    with pytest.raises(ConfigError, match="at least one"):
        configure_only("cdc.filter")
    with pytest.raises(ConfigError, match="not both"):
        configure_only("cdc.filter", **{"columns.include": "a", "columns.exclude": "b"})
    with pytest.raises(ConfigError, match="invalid pattern") as e:
        configure_only("cdc.filter", **{"tables.include": "(", "regex": "true"})
    assert e.value.parameter == "tables.include"


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(st.sampled_from(["id", "email", "name", "ssn", "x"]), st.integers(), min_size=1))
def test_filter_include_and_exclude_are_complements(after):
    inc = make("cdc.filter", **{"columns.include": "id,name"})
    exc = make("cdc.filter", **{"columns.exclude": "email,ssn,x"})
    a, b = row("db.t", dict(after)), row("db.t", dict(after))
    inc.process([a])
    exc.process([b])
    assert a.after == b.after == {k: v for k, v in after.items() if k in ("id", "name")}


# -- cdc.mask --------------------------------------------------------------------------


def test_mask_and_hash():
    m = make("cdc.mask", columns="card,email", **{"mask.keepLast": "4"})
    r = Record(metadata={"opencdc.collection": "shop.users"}, key={"email": "a@b.c"},
               before={"card": "4111111111111111", "email": None}, after={"card": 4111111111111111, "email": "a@b.c"})
    m.process([r])
    assert r.before == {"card": "************1111", "email": None}
    assert r.after == {"card": "************1111", "email": "*@b.c"} and r.key == {"email": "a@b.c"}
    h = make("cdc.mask", columns="shop.users.email", method="hash", includeKey="true", **{"hash.salt": "pepper"})
    r1, r2 = (Record(metadata={"opencdc.collection": "shop.users"}, key={"email": "a@b.c"}, after={"email": "a@b.c"})
              for _ in range(2))
    other = Record(metadata={"opencdc.collection": "crm.users"}, after={"email": "a@b.c"})
    h.process([r1, r2, other])
    expected = hashlib.sha256(b"peppera@b.c").hexdigest()
    assert r1.after["email"] == r1.key["email"] == r2.after["email"] == expected
    assert other.after == {"email": "a@b.c"}


def test_mask_leaves_control_records_and_rejects_bad_settings():
    m = make("cdc.mask", columns="query")
    ddl = Record(metadata={"cdcflow.control": "ddl", "opencdc.collection": "db.t"}, after={"query": "ALTER ..."})
    m.process([ddl])
    assert ddl.after == {"query": "ALTER ..."}
    with pytest.raises(ConfigError, match="exactly one character"):
        configure_only("cdc.mask", columns="a", **{"mask.char": "##"})
    with pytest.raises(ConfigError, match="must be one of"):
        configure_only("cdc.mask", columns="a", method="encrypt")


_mask_rows = st.one_of(st.none(), st.binary(max_size=2), st.dictionaries(
    st.sampled_from(["email", "phone", "users.phone", "x"]), st.one_of(st.none(), st.integers(0, 99), st.text(max_size=3)),
    max_size=4))


@settings(max_examples=100, deadline=None)
@given(batch=st.lists(st.tuples(st.sampled_from(["shop.users", "shop", "shop.orders", ""]), _mask_rows, _mask_rows),
                      max_size=8))
def test_mask_plain_names_equal_the_same_names_as_regular_expressions(batch):
    """Plain names look their columns up per table, without the row's keys; regular
    expressions scan the row's columns. Both must mask exactly the same values."""
    def records():
        return [Record(metadata={"opencdc.collection": c} if c else {}, before=_copy(b), after=_copy(a))
                for c, b, a in batch]

    plain = make("cdc.mask", columns="email,shop.users.phone", **{"mask.keepLast": "1"})
    regex = make("cdc.mask", columns="email,shop\\.users\\.phone", regex="true", **{"mask.keepLast": "1"})
    got, want = records(), records()
    plain.process(got)
    regex.process(want)
    assert got == want


def _copy(v):
    return dict(v) if isinstance(v, dict) else v


def test_mask_salt_is_secret():
    from helpers.transforms import registry

    from cdcflow.params import REDACTOR

    registry().transform("cdc.mask").validate("transform", {"columns": "a", "hash.salt": "s3cr3t-salt"})
    assert REDACTOR.redact("salt is s3cr3t-salt") == "salt is ***"


# -- cdc.dedup -------------------------------------------------------------------------


def drow(table: str, ts: int, key: int, op=Operation.CREATE, **md: str) -> Record:
    schema, name = table.split(".")
    return Record(operation=op, metadata={"opencdc.collection": table, "ticdc.schema": schema, "ticdc.table": name,
                                          "ticdc.commit-ts": str(ts), **md}, key={"id": key}, after={"id": key})


def test_dedup_rules():
    t = make("cdc.dedup")
    a1, a2, b1 = drow("db.a", 10, 1), drow("db.a", 10, 2), drow("db.b", 5, 1)
    replay = [drow("db.a", 9, 7), drow("db.a", 10, 1), drow("db.a", 10, 3)]
    later = drow("db.a", 11, 1)
    delete_same_ts = drow("db.a", 11, 1, Operation.DELETE)
    out = t.process([a1, a2, b1] + replay + [later, delete_same_ts, drow("db.a", 11, 1)])
    assert out[:3] == [a1, a2, b1]
    assert out[3:6] == [FILTERED, FILTERED, replay[2]]
    assert out[6:] == [later, delete_same_ts, FILTERED]
    assert t.dropped == 3


def test_dedup_scope_separates_streams_and_passes_other_records():
    t = make("cdc.dedup", scope="part")
    p0, p1 = drow("db.a", 10, 1, part="0"), drow("db.a", 5, 1, part="1")
    no_ts = Record(metadata={"opencdc.collection": "db.a"})
    resolved = Record(metadata={"cdcflow.control": "resolved", "ticdc.commit-ts": "1"})
    bad = drow("db.a", 1, 1)
    bad.metadata["ticdc.commit-ts"] = "x"
    out = t.process([p0, p1, no_ts, resolved, bad])
    assert out[:4] == [p0, p1, no_ts, resolved]
    assert isinstance(out[4], Failed) and "ticdc.commit-ts" in out[4].message


# -- route + dedup on a replayed TiCDC stream ------------------------------------------


def _orders(schema: str, table: str) -> TableSchema:
    return TableSchema(schema, table, (
        Column("id", "bigint", primary_key=True, handle_key=True, nullable=False),
        Column("amount", "int"),
    ))


def _ticdc_stream(seed: int) -> tuple[list[Record], dict]:
    """Three shards; each commit-ts holds several rows; TiCDC replays from an earlier ts twice.

    Returns the delivered records and, per (shard, id), the final expected row.
    """
    rnd = random.Random(seed)
    shards = [_orders("shop_1", "orders_1"), _orders("shop_2", "orders_7"), _orders("shop_3", "orders_2")]
    events, ts = [], 400_000_000_000_000_000
    state: dict = {}
    for step in range(60):
        ts += rnd.randint(1, 5) << 18
        table = rnd.choice(shards)
        for _ in range(rnd.randint(1, 3)):  # one transaction, several rows
            ident = rnd.randint(1, 8)
            k = (table.schema, ident)
            if k in state and rnd.random() < 0.3:
                events.append(RowChange(table, DELETE, ts, {"id": ident, "amount": state.pop(k)["amount"]}))
            elif k in state:
                new = {"id": ident, "amount": step}
                events.append(RowChange(table, UPDATE, ts, new, dict(state[k])))
                state[k] = new
            else:
                state[k] = {"id": ident, "amount": step}
                events.append(RowChange(table, INSERT, ts, dict(state[k])))
        if step % 20 == 10:
            events.append(ResolvedEvent(ts))
            events.append(DDLEvent(table.schema, table.table, "ALTER TABLE x ADD c INT", ts + 1))
    delivered = list(events)
    for restart in (len(events) // 3, 2 * len(events) // 3):  # replay from a checkpoint a few events back
        back = rnd.randint(3, 12)
        delivered[restart:restart] = events[restart - back:restart]
    records = [to_record(e, f"pos-{i}".encode()) for i, e in enumerate(delivered)]
    return records, state


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_route_and_dedup_give_each_row_once_under_its_new_name(seed):
    records, final = _ticdc_stream(seed)
    c = chain(
        ("merge", "cdc.route", None, {"routes": "shop_*.orders_*:shop.orders"}),
        ("dedup", "cdc.dedup", None, {"scope": ""}),
    )
    out = c.process(records)
    assert not out.nacks
    rows = [r for r in out.records if r.control is None]
    assert {r.collection for r in rows} == {"shop.orders"}
    # exactly once: no (source table, key, op, commit-ts) twice
    seen = [(r.metadata["ticdc.schema"], r.key["id"], r.operation, r.metadata["ticdc.commit-ts"]) for r in rows]
    assert len(seen) == len(set(seen))
    # and nothing lost: replaying the survivors in order gives the source's final state
    applied: dict = {}
    for r in rows:
        k = (r.metadata["ticdc.schema"], r.key["id"])
        if r.operation is Operation.DELETE:
            applied.pop(k)
        else:
            applied[k] = r.after
    assert applied == final
    assert out.filtered == len(records) - len(out.records) > 0
    # control records pass: DDLs are routed, resolved events untouched
    ddls = [r for r in out.records if r.control == "ddl"]
    assert ddls and {r.collection for r in ddls} == {"shop.orders"}
