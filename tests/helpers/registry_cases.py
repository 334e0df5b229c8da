"""Avro schemas and compatibility cases shared by the registry tests."""

import json


def record(*fields, name="row"):
    """A record schema text; each field is (name, type) or (name, type, default)."""
    out = []
    for f in fields:
        d = {"name": f[0], "type": f[1]}
        if len(f) == 3:
            d["default"] = f[2]
        out.append(d)
    return json.dumps({"type": "record", "name": name, "namespace": "default.shop", "fields": out})


ID = ("id", "long")
V1 = record(ID, ("name", "string"))
ADD_NOT_NULL_NO_DEFAULT = record(ID, ("name", "string"), ("qty", "int"))
ADD_NULLABLE_WITH_DEFAULT = record(ID, ("name", "string"), ("note", ["null", "string"], None))
DROP_NAME = record(ID)
NAME_TO_INT = record(ID, ("name", "int"))

# chains where the level's reach decides: the candidate passes against the latest version only
A_NO_DEFAULT = record(ID, ("a", "string"))
A_DEFAULT = record(ID, ("a", "string", ""))
WITHOUT_A = record(ID)
X_DEFAULT = record(ID, ("x", "int", 0))
X_NO_DEFAULT = record(ID, ("x", "int"))

# (level, history oldest first, candidate, accepted?)
CASES = [
    ("BACKWARD", [V1], ADD_NOT_NULL_NO_DEFAULT, False),
    ("BACKWARD", [V1], ADD_NULLABLE_WITH_DEFAULT, True),
    ("BACKWARD", [V1], DROP_NAME, True),
    ("BACKWARD", [V1], NAME_TO_INT, False),
    ("BACKWARD", [record(ID, ("n", "int"))], record(ID, ("n", "long")), True),  # int -> long promotion
    ("BACKWARD", [record(ID), X_DEFAULT], X_NO_DEFAULT, True),
    ("BACKWARD_TRANSITIVE", [record(ID), X_DEFAULT], X_NO_DEFAULT, False),
    ("BACKWARD_TRANSITIVE", [record(ID), X_DEFAULT], record(ID, ("x", "long", 0)), True),
    ("FORWARD", [V1], ADD_NOT_NULL_NO_DEFAULT, True),
    ("FORWARD", [V1], DROP_NAME, False),
    ("FORWARD", [record(ID, ("n", "int"))], record(ID, ("n", "long")), False),
    ("FORWARD", [A_NO_DEFAULT, A_DEFAULT], WITHOUT_A, True),
    ("FORWARD_TRANSITIVE", [A_NO_DEFAULT, A_DEFAULT], WITHOUT_A, False),
    ("FORWARD_TRANSITIVE", [A_NO_DEFAULT, A_DEFAULT], record(ID, ("a", "string", ""), ("b", "int")), True),
    ("FULL", [V1], ADD_NOT_NULL_NO_DEFAULT, False),
    ("FULL", [V1], ADD_NULLABLE_WITH_DEFAULT, True),
    ("FULL", [A_NO_DEFAULT, A_DEFAULT], WITHOUT_A, True),
    ("FULL_TRANSITIVE", [A_NO_DEFAULT, A_DEFAULT], WITHOUT_A, False),
    ("FULL_TRANSITIVE", [V1], ADD_NULLABLE_WITH_DEFAULT, True),
    ("NONE", [V1], NAME_TO_INT, True),
    ("NONE", [V1], ADD_NOT_NULL_NO_DEFAULT, True),
]


def case_id(case):
    level, history, candidate, ok = case
    return f"{level}-{CASES.index(case)}-{'ok' if ok else 'refused'}"
