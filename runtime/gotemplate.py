"""Go ``text/template`` (Conduit's conditions and templated settings) on cdcflow's one expression core.

The text is lexed and parsed as Go's ``text/template`` does (text and ``{{ }}`` actions, ``{{-``/``-}}``
trim markers, comments, pipelines, field chains, variables, ``if``/``else if``/``with``/``range``), and
the parse tree is translated into the node vocabulary of ``cdcflow.expr._Compiler``, which turns it
into the same kind of generated function as cdcflow's own expressions: a template costs a few calls
per record, a batch is one call (``Expression.evaluate_many``). What values look like, how they print
and compare, and the functions (Go's built-ins and sprig's subset) live in ``cdcflow.gofuncs``.

``is_go_template`` decides which syntax a setting is written in (docs/expressions.md, "Which syntax").
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any, Union

from . import gofuncs
from .expr import (MAX_TEXT, Assign, Bound, ExpressionError, Function, Local, MapGet, RecordAttr)
from .gofuncs import FUNCTIONS, MISSING, TEXT_FUNCTIONS

_SPACE = " \t\r\n"
_RECORD_FIELDS = frozenset({"Position", "Operation", "Metadata", "Key", "Payload"})
_KEYWORDS = frozenset({"if", "else", "end", "range", "with", "define", "template", "block", "break", "continue"})

# -- lexing ---------------------------------------------------------------------------------------


@dataclass
class Tok:
    kind: str  # text field var ident string number bool nil dot pipe lparen rparen declare assign comma
    value: Any
    pos: int  # offset in the template text


_NUMBER = re.compile(r"[+-]?(?:0[xX][0-9a-fA-F_]+|0[bB][01_]+|0[oO][0-7_]+|(?:\d[\d_]*)?\.?\d[\d_]*(?:[eE][+-]?\d+)?)")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_GO_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\", '"': '"', "'": "'"}


class _Lexer:
    def __init__(self, text: str):
        self.text = text

    def error(self, pos: int, message: str) -> ExpressionError:
        return ExpressionError(self.text, message, column=pos + 1)

    def items(self) -> list[tuple[str, Any, int]]:
        """``("text", str, pos)`` and ``("action", [Tok], pos)`` items, trim markers applied."""
        text = self.text
        out: list[tuple[str, Any, int]] = []
        pos = 0
        trim_next = False
        while True:
            start = text.find("{{", pos)
            chunk = text[pos:] if start < 0 else text[pos:start]
            left_trim = start >= 0 and text.startswith("{{-", start) and start + 3 < len(text) and text[start + 3] in _SPACE
            if trim_next:
                chunk = chunk.lstrip(_SPACE)
            if left_trim:
                chunk = chunk.rstrip(_SPACE)
            if chunk:
                out.append(("text", chunk, pos))
            if start < 0:
                return out
            i = start + (4 if left_trim else 2)
            toks, pos, trim_next = self.action(i, start)
            if toks is not None:
                out.append(("action", toks, start))

    def action(self, i: int, start: int) -> tuple[list[Tok] | None, int, bool]:
        text = self.text
        n = len(text)
        j = i
        while j < n and text[j] in _SPACE:
            j += 1
        if text.startswith("/*", j):  # a comment: {{/* ... */}}, trim markers allowed around it
            end = text.find("*/", j + 2)
            if end < 0:
                raise self.error(j, "unclosed comment")
            k = end + 2
            trim = False
            if text.startswith(" -}}", k):
                k, trim = k + 4, True
            elif text.startswith("}}", k):
                k += 2
            else:
                raise self.error(k, "comment ends before closing delimiter")
            return None, k, trim
        toks: list[Tok] = []
        depth = 0
        while True:
            if i >= n:
                raise self.error(start, "unclosed action")
            ch = text[i]
            if ch in _SPACE:
                k = i
                while k < n and text[k] in _SPACE:
                    k += 1
                if text.startswith("-}}", k):
                    if depth:
                        raise self.error(k, "unclosed left paren")
                    return toks, k + 3, True
                if toks and toks[-1].kind != "space":
                    toks.append(Tok("space", None, i))  # separates operands: ".a .b" is not ".a.b"
                i = k
                continue
            if text.startswith("}}", i):
                if depth:
                    raise self.error(i, "unclosed left paren")
                return toks, i + 2, False
            if ch == "|":
                toks.append(Tok("pipe", None, i))
                i += 1
            elif ch == "(":
                depth += 1
                toks.append(Tok("lparen", None, i))
                i += 1
            elif ch == ")":
                depth -= 1
                if depth < 0:
                    raise self.error(i, "unexpected right paren")
                toks.append(Tok("rparen", None, i))
                i += 1
            elif ch == ",":
                toks.append(Tok("comma", None, i))
                i += 1
            elif text.startswith(":=", i):
                toks.append(Tok("declare", None, i))
                i += 2
            elif ch == "=":
                toks.append(Tok("assign", None, i))
                i += 1
            elif ch == '"':
                value, i2 = self.string(i)
                toks.append(Tok("string", value, i))
                i = i2
            elif ch == "`":
                end = text.find("`", i + 1)
                if end < 0:
                    raise self.error(i, "unterminated raw quoted string")
                toks.append(Tok("string", text[i + 1:end], i))
                i = end + 1
            elif ch == "'":
                value, i2 = self.string(i, quote="'")
                if len(value) != 1:
                    raise self.error(i, "malformed character constant")
                toks.append(Tok("number", ord(value), i))
                i = i2
            elif ch == "." and i + 1 < n and (text[i + 1].isalpha() or text[i + 1] == "_"):
                m = _WORD.match(text, i + 1)
                toks.append(Tok("field", m.group(), i))  # type: ignore[union-attr]
                i = m.end()  # type: ignore[union-attr]
            elif ch == "$":
                m = _WORD.match(text, i + 1)
                name = "$" + (m.group() if m else "")
                toks.append(Tok("var", name, i))
                i = m.end() if m else i + 1
            elif ch.isdigit() or (ch in "+-." and i + 1 < n and text[i + 1].isdigit()):
                m = _NUMBER.match(text, i)
                if not m or not m.group():
                    raise self.error(i, "bad number syntax")
                toks.append(Tok("number", _number(m.group(), self, i), i))
                i = m.end()
            elif ch == ".":
                toks.append(Tok("dot", None, i))
                i += 1
            elif ch.isalpha() or ch == "_":
                m = _WORD.match(text, i)
                word = m.group()  # type: ignore[union-attr]
                if word in ("true", "false"):
                    toks.append(Tok("bool", word == "true", i))
                elif word == "nil":
                    toks.append(Tok("nil", None, i))
                else:
                    toks.append(Tok("ident", word, i))
                i = m.end()  # type: ignore[union-attr]
            else:
                raise self.error(i, f"unrecognized character in action: {ch!r}")

    def string(self, i: int, quote: str = '"') -> tuple[str, int]:
        text = self.text
        out = []
        j = i + 1
        while j < len(text):
            ch = text[j]
            if ch == quote:
                return "".join(out), j + 1
            if ch == "\n":
                break
            if ch == "\\" and j + 1 < len(text):
                nxt = text[j + 1]
                if nxt in _GO_ESCAPES:
                    out.append(_GO_ESCAPES[nxt])
                    j += 2
                    continue
                width = {"x": 2, "u": 4, "U": 8}.get(nxt)
                if width and re.fullmatch(r"[0-9a-fA-F]+", text[j + 2:j + 2 + width] or "-"):
                    out.append(chr(int(text[j + 2:j + 2 + width], 16)))
                    j += 2 + width
                    continue
                raise self.error(j, "unknown escape sequence in string")
            out.append(ch)
            j += 1
        raise self.error(i, "unterminated quoted string")


def _number(text: str, lexer: _Lexer, pos: int) -> int | float:
    clean = text.replace("_", "")
    try:
        if re.fullmatch(r"[+-]?(0[xXbBoO][0-9a-fA-F]+|\d+)", clean):
            return int(clean, 0) if clean.lstrip("+-")[:2].lower() in ("0x", "0b", "0o") else int(clean)
        return float(clean)
    except ValueError:
        raise lexer.error(pos, f"bad number syntax: {text!r}") from None


# -- parse tree ------------------------------------------------------------------------------------


@dataclass
class Cmd:
    args: list[Any]  # operands: Tok (literal, dot, var, field, ident) or Chain or Pipe
    pos: int


@dataclass
class Pipe:
    decl: list[str]
    assign: bool  # "=" instead of ":="
    cmds: list[Cmd]
    pos: int


@dataclass
class Chain:
    """An operand followed by ``.Field`` accesses: ``$x.a``, ``(pipeline).a``."""

    base: Any
    fields: list[str]
    pos: int


@dataclass
class Action:
    pipe: Pipe


@dataclass
class Block:
    kind: str  # if with range
    pipe: Pipe
    body: list[Any]
    orelse: list[Any] = field(default_factory=list)


Node = Union[str, Action, Block]


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.items = _Lexer(text).items()
        self.i = 0

    def error(self, pos: int, message: str) -> ExpressionError:
        return ExpressionError(self.text, message, column=pos + 1)

    def parse(self) -> list[Node]:
        body, end = self.list()
        if end is not None:
            raise self.error(end[1], f"unexpected {{{{{end[0]}}}}}")
        return body

    def list(self) -> tuple[list[Node], tuple[str, int, list[Tok]] | None]:
        """Nodes up to ``{{end}}``/``{{else ...}}`` (returned with its position and remaining tokens)."""
        out: list[Node] = []
        while self.i < len(self.items):
            kind, value, pos = self.items[self.i]
            self.i += 1
            if kind == "text":
                out.append(value)
                continue
            toks = list(value)
            while toks and toks[0].kind == "space":
                toks.pop(0)
            if not toks:
                raise self.error(pos, "missing value for command")
            head = toks[0]
            if head.kind == "ident" and head.value in _KEYWORDS:
                word = head.value
                rest = toks[1:]
                if word in ("end", "else"):
                    return out, (word, head.pos, rest)
                if word in ("if", "with", "range"):
                    out.append(self.block(word, rest, head.pos))
                    continue
                raise self.error(head.pos, f"{{{{{word}}}}} is not supported in cdcflow's Go templates")
            out.append(Action(self.pipeline(toks, pos, allow_decl=True)))
        return out, None

    def block(self, word: str, toks: list[Tok], pos: int) -> Block:
        pipe = self.pipeline(toks, pos, allow_decl=True, range_decl=word == "range")
        body, end = self.list()
        if end is None:
            raise self.error(pos, f"unexpected EOF: {{{{{word}}}}} has no {{{{end}}}}")
        blk = Block(word, pipe, body)
        if end[0] == "else":
            rest = [t for t in end[2] if t.kind != "space"]
            if rest and rest[0].kind == "ident" and rest[0].value in ("if", "with"):
                # {{else if ...}} / {{else with ...}}: a nested block sharing this block's {{end}}
                inner = self.block(rest[0].value, end[2][[t.kind for t in end[2]].index("ident") + 1:], end[1])
                blk.orelse = [inner]
                return blk
            if rest:
                raise self.error(end[1], "unexpected tokens after {{else}}")
            blk.orelse, end2 = self.list()
            if end2 is None or end2[0] != "end":
                raise self.error(end[1], f"expected {{{{end}}}} after {{{{else}}}} of {{{{{word}}}}}")
            end = end2
        if [t for t in end[2] if t.kind != "space"]:
            raise self.error(end[1], "unexpected tokens after {{end}}")
        return blk

    def pipeline(self, toks: list[Tok], pos: int, allow_decl: bool = False, range_decl: bool = False) -> Pipe:
        toks = list(toks)
        while toks and toks[0].kind == "space":
            toks.pop(0)
        decl: list[str] = []
        assign = False
        # $x := ..., $x = ..., range $i, $e := ...
        kinds = [t.kind for t in toks if t.kind != "space"]
        solid = [t for t in toks if t.kind != "space"]
        if allow_decl and solid and solid[0].kind == "var":
            if len(kinds) > 1 and kinds[1] in ("declare", "assign"):
                decl, assign = [solid[0].value], kinds[1] == "assign"
                toks = toks[toks.index(solid[1]) + 1:]
            elif range_decl and len(kinds) > 3 and kinds[1] == "comma" and kinds[2] == "var" and kinds[3] == "declare":
                decl = [solid[0].value, solid[2].value]
                toks = toks[toks.index(solid[3]) + 1:]
        cmds: list[Cmd] = []
        stream = toks
        idx = 0
        cmd_args: list[Any] = []
        cmd_pos = stream[0].pos if stream else pos
        while idx < len(stream):
            t = stream[idx]
            if t.kind == "space":
                idx += 1
                continue
            if t.kind == "pipe":
                if not cmd_args:
                    raise self.error(t.pos, "missing command before '|'")
                cmds.append(Cmd(cmd_args, cmd_pos))
                cmd_args = []
                idx += 1
                cmd_pos = stream[idx].pos if idx < len(stream) else t.pos
                continue
            operand, idx = self.operand(stream, idx)
            cmd_args.append(operand)
        if not cmd_args:
            raise self.error(pos, "missing value for command")
        cmds.append(Cmd(cmd_args, cmd_pos))
        return Pipe(decl, assign, cmds, pos)

    def operand(self, stream: list[Tok], idx: int) -> tuple[Any, int]:
        t = stream[idx]
        if t.kind == "lparen":
            depth, j = 1, idx + 1
            while j < len(stream) and depth:
                depth += {"lparen": 1, "rparen": -1}.get(stream[j].kind, 0)
                j += 1
            inner = stream[idx + 1:j - 1]
            base: Any = self.pipeline(inner, t.pos)
            idx = j
        elif t.kind in ("rparen", "comma", "declare", "assign"):
            raise self.error(t.pos, f"unexpected {_show(t)} in command")
        else:
            base = t
            idx += 1
        fields: list[str] = []
        if t.kind == "field":
            fields.append(t.value)
            base = Tok("dot", None, t.pos)
        while idx < len(stream) and stream[idx].kind == "field":
            if not isinstance(base, (Pipe, Tok)) or (isinstance(base, Tok) and base.kind not in ("dot", "var")):
                if isinstance(base, Tok) and base.kind == "ident" and base.value in _RECORD_FIELDS:
                    raise self.error(base.pos, f"the record's {base.value} is written .{base.value} in a Go template")
                raise self.error(stream[idx].pos, f"unexpected {stream[idx].value} in operand")
            fields.append(stream[idx].value)
            idx += 1
        if idx < len(stream) and stream[idx].kind == "dot" and fields:
            raise self.error(stream[idx].pos, "unexpected . after term")
        if fields:
            return Chain(base, fields, t.pos), idx
        return base, idx


def _show(t: Tok) -> str:
    return {"rparen": "')'", "comma": "','", "declare": "':='", "assign": "'='"}.get(t.kind, t.kind)


# -- translation into the compiler's nodes -----------------------------------------------------------

# static kinds of a value, so the record's own parts are read directly
_RECORD, _CHANGE, _DATA, _META, _OP, _ANY = "record", "change", "data", "metadata", "operation", "any"


@dataclass
class _Value:
    node: ast.expr
    kind: str = _ANY
    is_bool: bool = False
    pos: int = 0
    is_text: bool = False  # always a str: printed as it is


def _call(fn: Any, *args: ast.expr) -> ast.expr:
    return ast.Call(Bound(fn), list(args), [])


class _Translator:
    def __init__(self, text: str):
        self.text = text
        self.scopes: list[dict[str, str]] = [{"$": "r"}]
        self.count = 0
        self.range_locals: list[set[str]] = []

    def error(self, pos: int, message: str) -> ExpressionError:
        return ExpressionError(self.text, message, column=pos + 1)

    def temp(self, prefix: str = "_g") -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    # variables
    def lookup(self, name: str, pos: int) -> str:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        raise self.error(pos, f"undefined variable {name!r}")

    def declare(self, name: str) -> str:
        local = self.temp("_v")
        self.scopes[-1][name] = local
        if self.range_locals:
            self.range_locals[-1].add(local)
        return local

    # text
    def nodes(self, nodes: list[Node], dot: _Value) -> ast.expr:
        parts: list[ast.expr] = []
        for n in nodes:
            part = self.node(n, dot)
            if parts and _is_text(part) and _is_text(parts[-1]):
                parts[-1] = ast.Constant(parts[-1].value + part.value)  # type: ignore[attr-defined]
            else:
                parts.append(part)
        if not parts:
            return ast.Constant("")
        if len(parts) == 1:
            return parts[0]
        return _call(gofuncs.concat, ast.List(parts, ast.Load()))

    def node(self, n: Node, dot: _Value) -> ast.expr:
        if isinstance(n, str):
            return ast.Constant(n)
        if isinstance(n, Action):
            value = self.pipe(n.pipe, dot)
            if n.pipe.decl:
                return _call(gofuncs.discard, value.node)
            return self.printed(value)
        return self.block(n, dot)

    def printed(self, value: _Value) -> ast.expr:
        if value.is_text or _is_text(value.node):
            return value.node
        t = self.temp()
        test = ast.Compare(ast.Call(Bound(type), [Assign(t, value.node)], []), [ast.Is()], [Bound(str)])
        return ast.IfExp(test, Local(t), _call(gofuncs.text_of, Local(t)))

    def truth(self, value: _Value) -> ast.expr:
        return value.node if value.is_bool else _call(gofuncs.truth, value.node)

    def block(self, b: Block, dot: _Value) -> ast.expr:
        self.scopes.append({})
        try:
            if b.kind == "if":
                test = self.truth(self.pipe(b.pipe, dot))
                body = self.nodes(b.body, dot)
                self.scopes.append({})
                orelse = self.nodes(b.orelse, dot)
                self.scopes.pop()
                return ast.IfExp(test, body, orelse)
            if b.kind == "with":
                value = self.pipe(b.pipe, dot)
                t = self.temp()
                test = _call(gofuncs.truth, Assign(t, value.node))
                body = self.nodes(b.body, _Value(Local(t), value.kind, value.is_bool))
                self.scopes.append({})
                orelse = self.nodes(b.orelse, dot)
                self.scopes.pop()
                return ast.IfExp(test, body, orelse)
            return self.range(b, dot)
        finally:
            self.scopes.pop()

    def range(self, b: Block, dot: _Value) -> ast.expr:
        pipe = Pipe([], False, b.pipe.cmds, b.pipe.pos)
        items = self.temp()
        source = Assign(items, _call(gofuncs.range_items, self.pipe(pipe, dot).node))
        key, elem = self.temp("_k"), self.temp("_e")
        if len(b.pipe.decl) == 2:
            self.scopes[-1][b.pipe.decl[0]] = key
            self.scopes[-1][b.pipe.decl[1]] = elem
        elif b.pipe.decl:
            self.scopes[-1][b.pipe.decl[0]] = elem
        self.range_locals.append({key, elem})
        body = self.nodes(b.body, _Value(Local(elem)))
        self.range_locals.pop()
        loop = _call(gofuncs.range_text, Local(items), Function([key, elem], body))
        self.scopes.append({})
        orelse = self.nodes(b.orelse, dot)
        self.scopes.pop()
        return ast.IfExp(source, loop, orelse)

    # pipelines
    def pipe(self, p: Pipe, dot: _Value) -> _Value:
        value: _Value | None = None
        for cmd in p.cmds:
            value = self.command(cmd, dot, value)
        assert value is not None
        if p.decl:
            name = p.decl[0]
            if p.assign:
                local = self.lookup(name, p.pos)
                if self.range_locals and local not in self.range_locals[-1]:
                    raise self.error(p.pos, f"assigning {name} (declared outside this range) inside range is not supported")
            else:
                local = self.declare(name)
            return _Value(Assign(local, value.node), value.kind, value.is_bool, p.pos)
        return value

    def command(self, cmd: Cmd, dot: _Value, final: _Value | None) -> _Value:
        first = cmd.args[0]
        if isinstance(first, Tok) and first.kind == "ident":
            return self.function(first, cmd.args[1:], dot, final)
        if len(cmd.args) > 1 or final is not None:
            what = _describe(first)
            raise self.error(cmd.pos, f"can't give argument to non-function {what}")
        if isinstance(first, Tok) and first.kind == "nil":
            raise self.error(first.pos, "nil is not a command")
        return self.operand(first, dot)

    def operand(self, arg: Any, dot: _Value) -> _Value:
        if isinstance(arg, Pipe):
            self.scopes.append({})
            try:
                return self.pipe(arg, dot)
            finally:
                self.scopes.pop()
        if isinstance(arg, Chain):
            if isinstance(arg.base, Tok) and arg.base.kind == "dot":
                base = dot
            else:
                base = self.operand(arg.base, dot)
            return self.fields(base, arg.fields, arg.pos)
        t: Tok = arg
        if t.kind == "string":
            if len(t.value) > MAX_TEXT:
                raise self.error(t.pos, f"a literal is limited to {MAX_TEXT:,} characters (MAX_TEXT)")
            return _Value(ast.Constant(t.value), pos=t.pos)
        if t.kind == "number":
            return _Value(ast.Constant(t.value), pos=t.pos)
        if t.kind == "bool":
            return _Value(ast.Constant(t.value), is_bool=True, pos=t.pos)
        if t.kind == "nil":
            return _Value(ast.Constant(None), pos=t.pos)
        if t.kind == "dot":
            if dot.kind == _RECORD:
                return _Value(Local("r"), _RECORD, pos=t.pos)
            return _Value(dot.node, dot.kind, dot.is_bool, t.pos)
        if t.kind == "var":
            local = self.lookup(t.value, t.pos)
            return _Value(Local(local), _RECORD if local == "r" else _ANY, pos=t.pos)
        if t.kind == "ident":  # a function as an argument: called with no arguments
            return self.function(t, [], dot, None)
        raise self.error(t.pos, f"unexpected {t.kind} in operand")

    def fields(self, base: _Value, names: list[str], pos: int) -> _Value:
        node, kind = base.node, base.kind
        for name in names:
            if kind == _RECORD:
                if name == "Payload":
                    node, kind = None, _CHANGE  # type: ignore[assignment]
                elif name == "Metadata":
                    node, kind = RecordAttr("metadata"), _META
                elif name == "Key":
                    node, kind = RecordAttr("key"), _DATA
                elif name == "Operation":
                    node, kind = RecordAttr("operation"), _OP
                elif name == "Position":
                    node, kind = _call(gofuncs.Position, RecordAttr("position")), _ANY
                else:
                    raise self.error(pos, f"can't evaluate field {name} in type opencdc.Record")
                continue  # a value of kind _RECORD is always the record being evaluated
            if kind == _CHANGE:
                if name not in ("Before", "After"):
                    raise self.error(pos, f"can't evaluate field {name} in type opencdc.Change")
                node, kind = RecordAttr(name.lower()), _DATA
                continue
            if kind == _OP and name == "String":
                node, kind = _call(gofuncs.sprint, node), _ANY
                continue
            fallback = gofuncs.data_field if kind == _DATA else gofuncs.field
            node, kind = MapGet(node, ast.Constant(name), Bound(MISSING), Bound(fallback)), _ANY
        if kind == _CHANGE:
            node = _call(gofuncs.Change, RecordAttr("before"), RecordAttr("after"))
        return _Value(node, kind, pos=pos)

    def function(self, ident: Tok, arg_nodes: list[Any], dot: _Value, final: _Value | None) -> _Value:
        name = ident.value
        spec = FUNCTIONS.get(name)
        if spec is None:
            hint = f" (the record's {name} is written .{name})" if name in _RECORD_FIELDS else ""
            raise self.error(ident.pos, f'function "{name}" not defined{hint}')
        args = [self.operand(a, dot) for a in arg_nodes]
        if final is not None:
            args.append(final)
        n = len(args)
        if n < spec.min_args or (spec.max_args is not None and n > spec.max_args):
            want = spec.min_args if spec.max_args == spec.min_args else f"at least {spec.min_args}"
            raise self.error(ident.pos, f"wrong number of args for {name}: want {want} got {n}")
        if name in ("and", "or"):
            return self.and_or(name, args)
        if name == "eq" and n == 2 and isinstance(args[1].node, ast.Constant) and type(args[1].node.value) is str:
            if args[0].is_text:  # text against text: Go's eq is ==
                return _Value(ast.Compare(args[0].node, [ast.Eq()], [args[1].node]), is_bool=True)
            # the common condition: a type test and == inline, Go's rules only when it is not text
            t = self.temp()
            test = ast.Compare(ast.Call(Bound(type), [Assign(t, args[0].node)], []), [ast.Is()], [Bound(str)])
            same = ast.Compare(Local(t), [ast.Eq()], [args[1].node])
            return _Value(ast.IfExp(test, same, _call(gofuncs.eq, Local(t), args[1].node)), is_bool=True)
        if name == "not" and args[0].is_bool:
            return _Value(ast.UnaryOp(ast.Not(), args[0].node), is_bool=True)
        if name == "index" and n == 2 and args[0].kind == _META and _is_text(args[1].node):  # missing: "", inline
            return _Value(MapGet(args[0].node, args[1].node, ast.Constant(""), Bound(gofuncs.metadata_index)), is_text=True)
        if name == "toJson" and args[0].kind == _RECORD:
            return _Value(_call(gofuncs.to_json, Local("r")))
        return _Value(_call(spec.fn, *[a.node for a in args]), is_bool=spec.returns_bool, is_text=name in TEXT_FUNCTIONS)

    def and_or(self, name: str, args: list[_Value]) -> _Value:
        """Go 1.18+: ``and``/``or`` stop at the first argument that decides, and give that argument."""
        result = args[-1]
        for a in reversed(args[:-1]):
            t = self.temp()
            test = self.truth(_Value(Assign(t, a.node), is_bool=a.is_bool))
            if name == "and":
                node = ast.IfExp(test, result.node, Local(t))
            else:
                node = ast.IfExp(test, Local(t), result.node)
            result = _Value(node, is_bool=a.is_bool and result.is_bool)
        return result


def _is_text(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is str


def _describe(arg: Any) -> str:
    if isinstance(arg, Chain):
        return "." + ".".join(arg.fields)
    if isinstance(arg, Tok):
        return {"dot": ".", "string": repr(arg.value)}.get(arg.kind, str(arg.value))
    return "(pipeline)"


# -- entry points ----------------------------------------------------------------------------------


def parse(text: str) -> list[Node]:
    """The parse tree of ``text``; an ``ExpressionError`` with the column when it is not a valid template."""
    return _Parser(text).parse()


def translate(text: str) -> tuple[ast.expr, ast.expr | None]:
    """(the template's text as a compiler tree, its bool value when the template is one bool action)."""
    tree = parse(text)
    tr = _Translator(text)
    root = _Value(Local("r"), _RECORD)
    if len(tree) == 1 and isinstance(tree[0], Action) and not tree[0].pipe.decl:
        value = tr.pipe(tree[0].pipe, root)
        boolean = value.node if value.is_bool else None
        return tr.printed(value), boolean
    return tr.nodes(tree, root), None


_TRIM = re.compile(r"\{\{-[ \t\r\n]|[ \t\r\n]-\}\}")
_HEAD = re.compile(r"[ \t\r\n(]*(?P<head>[.$`]|/\*|[A-Za-z_][A-Za-z0-9_]*)(?P<gap>[ \t\r\n]*)(?P<next>.?)", re.S)
_PIPED_FUNCTION = re.compile(r"\|[ \t\r\n]*(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:[ \t\r\n]|$)")
#: words that may start an expression of cdcflow's older syntax (Python's)
_PYTHON_WORDS = frozenset({"not", "lambda", "None", "True", "False"})


def is_go_template(text: str) -> bool:
    """Whether a templated setting is Go ``text/template`` (Conduit's) rather than cdcflow's older
    ``{{ expression }}`` syntax. It is Go when an action uses a ``{{-``/``-}}`` trim marker, a comment
    or a raw string, starts with ``.``, ``$`` or a Go keyword (``if``, ``range``, ``end``...), pipes
    into a Go function (``| upper``), or starts with a word followed by a space and an operand
    (``upper .x``, ``printf "%s" ...``) or by nothing (``{{ now }}``): cdcflow's calls are ``f(x)``."""
    if _TRIM.search(text):
        return True
    start = text.find("{{")
    while start >= 0:
        end = text.find("}}", start + 2)
        inner = text[start + 2:] if end < 0 else text[start + 2:end]
        start = text.find("{{", start + 2)
        if "`" in inner:
            return True
        for m in _PIPED_FUNCTION.finditer(inner):
            if m.group("name") in FUNCTIONS:
                return True
        m = _HEAD.match(inner)
        if not m:
            continue
        head, gap, nxt = m.group("head"), m.group("gap"), m.group("next")
        if head in (".", "$", "/*") or head in _KEYWORDS or head == "nil":
            return True
        if head in _PYTHON_WORDS:
            if gap and nxt in (".", "$"):
                return True
            continue
        if not gap and nxt == "":
            if head in FUNCTIONS:  # {{ now }}
                return True
        elif gap and (nxt == "" or nxt == ")" or nxt in ".$\"'(" or nxt.isalnum() or nxt == "_"):
            if head in FUNCTIONS or (nxt and nxt in ".$\"'"):
                return True
    return False
