"""Go text/template (Conduit's conditions and templated settings) on the one expression core.

Expected values follow Go's text/template and fmt documentation (pkg.go.dev/text/template,
pkg.go.dev/fmt), sprig's function docs (masterminds.github.io/sprig) and Conduit's condition code
(github.com/ConduitIO/conduit pkg/processor/processor_condition.go: the rendered text is read with
strconv.ParseBool). Conduit's record as templates see it: conduit-commons opencdc/record.go, data.go,
position.go, operation.go.
"""

from __future__ import annotations

import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdcflow.convert.jsonform import dumps_record
from cdcflow.expr import MAX_TEXT, Condition, ExpressionError, Template
from cdcflow.gotemplate import is_go_template
from cdcflow.record import Operation, Record


def rec(**kw) -> Record:
    base = dict(
        position=b"pos-1",
        operation=Operation.UPDATE,
        metadata={"opencdc.collection": "shop.users", "table": "postgres", "foo": "bar"},
        key={"id": 7},
        before=None,
        after={"name": "Ann", "age": 31, "tags": ["a", "b"], "addr": {"city": "Oslo"}, "score": 2.5,
               "big": 1234567.0, "nothing": None, "n": "12"},
    )
    base.update(kw)
    return Record(**base)


def render(text: str, record: Record | None = None) -> str:
    return Template.compile(text).render(record or rec())


@pytest.mark.parametrize(
    "text, expected",
    [
        # text, actions, trim markers, comments
        ("plain text", "plain text"),
        ("{{ .Payload.After.name }}", "Ann"),
        ("a  {{- .Payload.After.name -}}  b", "aAnnb"),
        ("a\n  {{- /* a comment */ -}}\n  b", "ab"),
        ("x{{/* c */}}y", "xy"),
        ("{{`raw {{ }}`}}", "raw {{ }}"),
        # field chains, index, variables
        ("{{ .Metadata.table }}", "postgres"),
        ('{{ index .Metadata "opencdc.collection" }}', "shop.users"),
        ('{{ index .Metadata "missing" }}', ""),  # index of map[string]string gives the zero value
        ("{{ .Metadata.missing }}", "<no value>"),  # a field of a map: Go's invalid value
        ("{{ .Payload.After.missing.deeper }}", "<no value>"),
        ("{{ .Payload.After.nothing }}", "<nil>"),
        ("{{ .Payload.After.addr.city }}", "Oslo"),
        ('{{ index .Payload.After "tags" 1 }}', "b"),
        ("{{ $n := .Payload.After.name }}{{ $n }}-{{ $n }}", "Ann-Ann"),
        ("{{ $n := 1 }}{{ $n = 2 }}{{ $n }}", "2"),
        ("{{ $.Metadata.foo }}", "bar"),
        # how values print (fmt's %v)
        ("{{ .Payload.After.age }}", "31"),
        ("{{ .Payload.After.score }}", "2.5"),
        ("{{ .Payload.After.big }}", "1.234567e+06"),
        ("{{ .Payload.After.tags }}", "[a b]"),
        ("{{ .Payload.After.addr }}", "map[city:Oslo]"),
        ("{{ .Key }}", "map[id:7]"),
        ("{{ .Payload.Before }}", "<nil>"),
        ("{{ .Operation }}", "update"),
        ("{{ .Position }}", "pos-1"),
        ("{{ .Payload.After.age }} {{ true }} {{ 1.5 }} {{ 0x10 }} {{ 'a' }}", "31 true 1.5 16 97"),  # a char is a number
        # pipelines
        ("{{ .Payload.After.name | upper }}", "ANN"),
        ('{{ .Payload.After.missing | default "none" }}', "none"),
        ('{{ .Payload.After.name | default "none" }}', "Ann"),
        ('{{ .Payload.After.name | printf "%s!" | lower }}', "ann!"),
        ('{{ "a,b,c" | splitList "," | join "-" }}', "a-b-c"),
        ("{{ (len .Payload.After.tags) }}", "2"),
        # control structures
        ('{{ if eq .Metadata.foo "bar" }}yes{{ else }}no{{ end }}', "yes"),
        ('{{ if eq .Metadata.foo "x" }}1{{ else if eq .Metadata.foo "bar" }}2{{ else }}3{{ end }}', "2"),
        ("{{ if .Payload.After.missing }}set{{ else }}unset{{ end }}", "unset"),
        ("{{ if .Payload.After.tags }}has tags{{ end }}", "has tags"),
        ("{{ with .Payload.After.addr }}{{ .city }}{{ end }}", "Oslo"),
        ("{{ with .Payload.After.missing }}{{ . }}{{ else }}none{{ end }}", "none"),
        ("{{ range .Payload.After.tags }}<{{ . }}>{{ end }}", "<a><b>"),
        ("{{ range $i, $t := .Payload.After.tags }}{{ $i }}={{ $t }};{{ end }}", "0=a;1=b;"),
        ("{{ range $k, $v := .Payload.After.addr }}{{ $k }}:{{ $v }}{{ end }}", "city:Oslo"),
        ("{{ range .Payload.After.missing }}x{{ else }}empty{{ end }}", "empty"),
        ("{{ range .Payload.After.tags }}{{ $.Metadata.foo }}{{ end }}", "barbar"),
        # comparison and logic
        ("{{ eq .Payload.After.age 31 }}", "true"),
        ("{{ eq .Payload.After.age 31.0 }}", "true"),  # cdcflow keeps integers; Conduit's JSON numbers are float64
        ('{{ eq .Metadata.foo "x" "bar" }}', "true"),
        ('{{ ne .Metadata.foo "bar" }}', "false"),
        ("{{ lt .Payload.After.age 40 }} {{ ge .Payload.After.score 2.5 }}", "true true"),
        ('{{ and .Payload.After.name "second" }}', "second"),
        ('{{ or .Payload.After.missing "fallback" }}', "fallback"),
        ("{{ not .Payload.After.missing }}", "true"),
        ('{{ and false (index .Payload.After.nothing "x") }}', "false"),  # and stops at the first false
        # printf verbs
        ('{{ printf "%s|%d|%v|%q" .Payload.After.name .Payload.After.age .Payload.After.tags .Metadata.foo }}',
         'Ann|31|[a b]|"bar"'),
        ('{{ printf "%5s|%-5s|%05d|%.2f|%x|%t|%T|%%" "ab" "ab" 42 3.14159 255 true 1.5 }}',
         "   ab|ab   |00042|3.14|ff|true|float64|%"),
        ('{{ printf "%d" "x" }}', "%!d(string=x)"),
        ('{{ printf "%s %s" "x" }}', "x %!s(MISSING)"),
        ('{{ printf "%s" "x" "y" }}', "x%!(EXTRA string=y)"),
        ('{{ printf "%s" .Payload.After.missing }}', "%!s(<nil>)"),
        ('{{ print "a" 1 2 "b" }}', "a1 2b"),
        ('{{ println "a" 1 }}', "a 1\n"),
        # sprig
        ('{{ title "hello world" }} {{ trim "  x  " }} {{ trimPrefix "shop." "shop.users" }}', "Hello World x users"),
        ('{{ replace "a" "b" "banana" }} {{ contains "an" "banana" }} {{ hasPrefix "ba" "banana" }}', "bbnbnb true true"),
        ('{{ substr 1 3 "hello" }} {{ trunc 3 "hello" }} {{ repeat 3 "ab" }} {{ nospace "a b c" }}', "el hel ababab abc"),
        ('{{ quote "a" 1 }} {{ squote "a" }} {{ cat "a" 1 .Payload.After.missing "b" }}', "\"a\" \"1\" 'a' a 1 b"),
        ('{{ b64enc "hi" }} {{ b64dec "aGk=" }}', "aGk= hi"),
        ('{{ atoi .Payload.After.n }} {{ int "7" }} {{ float64 "1.5" }} {{ add 1 2 3 }} {{ mod 7 3 }}', "12 7 1.5 6 1"),
        ("{{ mod -7 2 }} {{ div -7 2 }} {{ sub 1 5 }}", "-1 -3 -4"),  # Go's integer division truncates toward zero
        ('{{ toJson .Payload.After.addr }} {{ toJson "<&>" }}', '{"city":"Oslo"} "\\u003c\\u0026\\u003e"'),
        ('{{ (fromJson "{\\"a\\": 1}").a }}', "1"),
        ('{{ toJson (dict "n" 1 "s" "x") }} {{ get (dict "k" "v") "k" }}', '{"n":1,"s":"x"} v'),
        ('{{ list 1 "a" }} {{ coalesce .Payload.After.missing "" "third" }}', "[1 a] third"),
        ('{{ empty .Payload.After.missing }} {{ empty .Payload.After.name }}', "true false"),
        ('{{ regexMatch "^A.n$" .Payload.After.name }} {{ regexReplaceAll "a(x*)b" "-ab-axxb-" "${1}W" }}', "true -W-xxW-"),
        ('{{ typeIs "opencdc.StructuredData" .Payload.After }}', "true"),
        ('{{ date "2006-01-02" 0 }} {{ unixEpoch 86400 }}', "1970-01-01 86400"),
        ("{{ html \"<a href='x'>\" }} {{ urlquery \"a b&c\" }}", "&lt;a href=&#39;x&#39;&gt; a+b%26c"),
        # the record's methods Conduit users call
        ('{{ eq .Operation.String "update" }} {{ printf "%s %d" .Operation .Operation }}', "true update 2"),
    ],
)
def test_render(text, expected):
    assert render(text) == expected


def test_raw_data_prints_as_go_prints_a_byte_slice():
    """opencdc.RawData has no String method: ``{{ .Payload.After }}`` prints its bytes; ``printf "%s"``
    (Conduit's webhook example) prints the text."""
    r = rec(after=b"hi")
    assert render("{{ .Payload.After }}", r) == "[104 105]"
    assert render('{{ printf "%s" .Payload.After }}', r) == "hi"
    assert render('{{ typeIs "opencdc.RawData" .Payload.After }}', r) == "true"


def test_to_json_of_the_record_is_its_json_form():
    r = rec()
    assert render("{{ toJson . }}", r) == dumps_record(r).decode()


@pytest.mark.parametrize(
    "text, record, fragment",
    [
        # Go fails these for the record (Conduit sends it to the DLQ)
        ("{{ .Payload.Before.name }}", rec(), "nil pointer evaluating opencdc.Data.name"),
        ("{{ .Payload.After.name }}", rec(after=b"raw"), "can't evaluate field name in type opencdc.RawData"),
        ("{{ upper .Payload.After.missing }}", rec(), "invalid value; expected string"),
        ("{{ upper .Payload.After.age }}", rec(), "wrong type for value; expected string; got int"),
        ('{{ eq .Operation "update" }}', rec(), "incompatible types for comparison"),  # Operation is an int in Go
        ('{{ lt .Payload.After.name 3 }}', rec(), "incompatible types for comparison"),
        ("{{ index .Payload.After.tags 5 }}", rec(), "index out of range: 5"),
        ("{{ len .Payload.Before }}", rec(), "len of nil pointer"),
        ("{{ range .Payload.After.name }}x{{ end }}", rec(), "range can't iterate over Ann"),
        ("{{ div 1 0 }}", rec(), "integer divide by zero"),
    ],
)
def test_execution_errors_fail_the_record(text, record, fragment):
    t = Template.compile(text)
    with pytest.raises(ExpressionError) as e:
        t.render(record)
    assert fragment in str(e.value) and text in str(e.value)


@pytest.mark.parametrize(
    "text, fragment, column",
    [
        ("{{ .Payload.After.name | }}", "missing value for command", None),
        ("{{ nope .Payload.After }}", 'function "nope" not defined', 4),
        ("{{ Payload.After.name | upper }}", "the record's Payload is written .Payload in a Go template", 4),
        ("{{ upper Metadata }}", "function \"Metadata\" not defined (the record's Metadata is written .Metadata)", 10),
        ("ab {{ if .Payload.After }}x", "has no {{end}}", 7),
        ("{{ .Payload.After.name", "unclosed action", 1),
        ("{{ end }}", "unexpected {{end}}", 4),
        ('{{ .Key "abc }}', "unterminated quoted string", 9),
        ("{{ .Nope }}", "can't evaluate field Nope in type opencdc.Record", 4),
        ("{{ .Payload.Middle }}", "can't evaluate field Middle in type opencdc.Change", 4),
        ("{{ $x }}", "undefined variable '$x'", 4),
        ("{{ upper }}", "wrong number of args for upper: want 1 got 0", 4),
        ("{{ .Payload.After.name 1 }}", "can't give argument to non-function", 4),
        ("{{ nil }}", "nil is not a command", 4),
        ("{{ template \"x\" }}", "not supported", 4),
        ("{{ .Metadata[\"x\"] }}", "unrecognized character in action", 13),
        ("{{/* open", "unclosed comment", 3),
    ],
)
def test_compile_errors_name_the_column(text, fragment, column):
    with pytest.raises(ExpressionError) as e:
        Template.compile(text)
    assert fragment in str(e.value)
    if column is not None:
        assert e.value.column == column


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{{ eq .Metadata.foo "bar" }}', True),
        ('{{ eq .Metadata.foo "baz" }}', False),
        ('{{ eq .Metadata.missing "bar" }}', False),
        ('{{ eq .Metadata.foo "bar" | not }}', False),  # conduit-site record-routing docs
        ('{{ eq .Metadata.opencdc.version "v1" }}', False),  # Conduit's provisioning test data
        ("{{ true }}", True),
        ("{{true}}", True),
        ('{{ hasPrefix "shop." (index .Metadata "opencdc.collection") }}', True),
        ("{{ gt .Payload.After.age 30 }}", True),
        # the rendered text is read with strconv.ParseBool
        ('{{ printf "T" }}', True),
        ("{{ 1 }}", True),
        ('{{ if eq .Metadata.foo "bar" }}FALSE{{ else }}true{{ end }}', False),
        ("{{ .Payload.After.name | eq \"Ann\" }}", True),
    ],
)
def test_condition(text, expected):
    c = Condition.compile(text)
    assert c.evaluate(rec()) is expected
    assert c.evaluate_many([rec(), rec()]) == [expected, expected]


def test_condition_output_that_is_not_a_bool_fails_as_in_conduit():
    c = Condition.compile('{{ printf "hi" }}')  # Conduit's processor_condition_test.go case
    with pytest.raises(ExpressionError, match='strconv.ParseBool: parsing "hi": invalid syntax'):
        c.evaluate(rec())
    assert Condition.compile("{{ .Metadata.missing }}").evaluate_many([rec()])[0].reason.endswith(
        'parsing "<no value>": invalid syntax')


def test_condition_batch_reports_each_failing_record():
    c = Condition.compile('{{ eq .Payload.After.name "Ann" }}')
    out = c.evaluate_many([rec(), rec(after=None), rec(after={"name": "Bob"}), rec(after=b"raw")])
    assert out[0] is True and out[2] is False
    assert isinstance(out[1], ExpressionError) and "nil pointer evaluating opencdc.Data.name" in out[1].reason
    assert isinstance(out[3], ExpressionError) and "opencdc.RawData" in out[3].reason


def test_template_batch_equals_one_by_one():
    t = Template.compile('{{ .Payload.After.name }}-{{ if gt .Payload.After.age 30 }}old{{ end }}')
    records = [rec(after={"name": f"n{i}", "age": i * 10}) for i in range(6)]
    expr = t._parts[0]
    assert expr.evaluate_many(records) == [t.render(r) for r in records] == [
        "n0-", "n1-", "n2-", "n3-", "n4-old", "n5-old"]


@pytest.mark.parametrize(
    "text, fragment",
    [
        ('{{ printf "%999999999d" 1 }}', "MAX_TEXT"),
        ('{{ repeat 200000 "ab" }}', "would be 400,000 long"),
        ("{{ range 100000000 }}x{{ end }}", "would be 100,000,000 long"),
        ('{{ $s := repeat 90000 "a" }}{{ $s }}{{ $s }}', "would be 180,000 long"),
    ],
)
def test_limits_hold_for_go_templates(text, fragment):
    with pytest.raises(ExpressionError) as e:
        Template.compile(text).render(rec())
    assert fragment in str(e.value)


@pytest.mark.parametrize(
    "text, go",
    [
        ("{{ .Payload.After.name }}", True),
        ("{{.Metadata.foo}}", True),
        ("{{ $x := 1 }}", True),
        ("{{ if true }}x{{ end }}", True),
        ("{{- 1 -}}", True),
        ("{{ upper .Payload.After.name }}", True),
        ('{{ eq .Metadata.table "postgres" }}', True),
        ("{{ toJson . }}", True),
        ("{{ now }}", True),
        ("{{ (len .Payload.After.tags) }}", True),
        # cdcflow's older syntax: record names without a dot, Python calls
        ("{{ Payload.After.name }}", False),
        ("{{ upper(Payload.After.name) }}", False),
        ('{{ Metadata.table == "postgres" }}', False),
        ("no placeholders", False),
        ('{{ "{{" }} literal', False),
    ],
)
def test_which_syntax(text, go):
    assert is_go_template(text) is go


def test_old_syntax_templates_keep_working():
    assert render("{{ upper(Payload.After.name) }} {{ Payload.After.age + 1 }}") == "ANN 32"


def test_go_literal_template_is_a_constant():
    t = Template.compile("a {{- /* nothing */ -}} b")
    assert t.is_literal and t.constant == "ab"


def test_large_literal_refused_at_compile_time():
    with pytest.raises(ExpressionError, match="MAX_TEXT"):
        Template.compile('{{ printf "%s" "' + "x" * (MAX_TEXT + 1) + '" }}')


def test_field_set_renders_a_batch_and_fails_only_the_failing_record():
    from helpers.transforms import make

    from cdcflow.sdk import Failed

    t = make("field.set", field=".Metadata.greeting", value="hi {{ .Payload.After.name | upper }}")
    good, null, raw, other = rec(), rec(after=None), rec(after=b"raw"), rec(after={"name": "bob"})
    out = t.process([good, null, raw, other])
    assert out[0] is good and good.metadata["greeting"] == "hi ANN"
    assert out[3] is other and other.metadata["greeting"] == "hi BOB"
    assert isinstance(out[1], Failed) and "nil pointer evaluating opencdc.Data.name" in out[1].message
    assert isinstance(out[2], Failed) and "opencdc.RawData" in out[2].message


def test_error_message_template_for_a_batch():
    from helpers.transforms import make

    from cdcflow.sdk import Failed

    out = make("error", message="bad {{ .Key.id }}").process([rec(), rec(key={"id": 8}), rec(key=None)])
    assert out[:2] == [Failed("bad 7"), Failed("bad 8")]
    assert out[2].message.startswith("error processor: message template failed:") and "nil pointer" in out[2].message


_ATOMS = ["{{", "}}", "{{- ", " -}}", " ", ".", ".Payload", ".After", ".Metadata", ".foo", "$", "$x", ":=", "=", "|",
          "(", ")", '"s"', "`r`", "'c'", "1", "-2", "1.5", "if", "else", "end", "range", "with", "eq", "not", "and",
          "or", "index", "printf", '"%d"', "nil", "true", ",", "/*", "*/", "upper", "len", "x", "\n"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_ATOMS), min_size=1, max_size=14))
def test_any_text_compiles_or_fails_with_an_expression_error(atoms):
    """Whatever a setting holds, compiling and evaluating raise nothing but ExpressionError."""
    text = "{{" + "".join(atoms)
    r = rec()
    warnings.simplefilter("ignore", SyntaxWarning)  # the older syntax's parser warns about "1.5if"
    for compile_, run in ((Template.compile, "render"), (Condition.compile, "evaluate")):
        try:
            compiled = compile_(text)
        except ExpressionError:
            continue
        try:
            getattr(compiled, run)(r)
        except ExpressionError:
            pass
