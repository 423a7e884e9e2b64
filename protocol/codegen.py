"""Generate the message codecs from ``schemas/*.json``.

    python -m protocol.codegen           write protocol/messages/ and protocol/coordinator_records/
    python -m protocol.codegen --check   exit 1 when the committed output is stale

One module per API (request and response together), one per coordinator record
(key and value together).  Versions are folded away at generation time: every
struct gets one straight-line decode and one encode function per distinct
version layout, and adjacent fixed-width fields share one precompiled
``struct.Struct``.  Schemas are validated first, so a bad schema fails here.
"""
from __future__ import annotations

import argparse
import json
import keyword
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEMAS = ROOT / "schemas"
MESSAGES = ROOT / "protocol" / "messages"
RECORDS = ROOT / "protocol" / "coordinator_records"
MAXV = 0x7FFF

FIXED = {  # type -> (struct code, size, name-letter)
    "bool": ("?", 1, "o"), "int8": ("b", 1, "b"), "int16": ("h", 2, "h"),
    "uint16": ("H", 2, "H"), "int32": ("i", 4, "i"), "uint32": ("I", 4, "I"),
    "int64": ("q", 8, "q"), "float64": ("d", 8, "d"), "uuid": ("16s", 16, "U"),
}
VARLEN = {"string", "bytes", "records"}
NULLABLE_OK = VARLEN | {"array", "struct"}


class SchemaError(Exception):
    pass


def snake(name: str) -> str:
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()
    return s + "_" if keyword.iskeyword(s) else s


class VRange:
    __slots__ = ("lo", "hi")

    def __init__(self, spec: str | None):
        spec = (spec or "none").strip()
        if spec == "none":
            self.lo, self.hi = 1, 0
        elif spec.endswith("+"):
            self.lo, self.hi = int(spec[:-1]), MAXV
        elif "-" in spec:
            lo, hi = spec.split("-")
            self.lo, self.hi = int(lo), int(hi)
        else:
            self.lo = self.hi = int(spec)

    def __contains__(self, v: int) -> bool:
        return self.lo <= v <= self.hi

    def empty(self) -> bool:
        return self.lo > self.hi

    def within(self, other: "VRange") -> bool:
        return self.empty() or (other.lo <= self.lo and self.hi <= other.hi)


class Field:
    def __init__(self, spec: dict, owner: str):
        self.name = spec["name"]
        self.attr = snake(self.name)
        t = spec["type"]
        self.is_array = t.startswith("[]")
        self.elem = t[2:] if self.is_array else t
        # a tagged-only field may omit "versions": it exists in its tagged versions (TransactionLogValue)
        self.versions = VRange(spec.get("versions", spec.get("taggedVersions")))
        self.nullable = VRange(spec.get("nullableVersions"))
        self.tagged = VRange(spec.get("taggedVersions"))
        self.tag = spec.get("tag")
        d = spec.get("default")
        self.default = d if d is None or isinstance(d, str) else json.dumps(d)
        if "default" in spec and d is None:
            self.default = "null"
        self.flex_override = VRange(spec["flexibleVersions"]) if "flexibleVersions" in spec else None
        self.struct: StructDef | None = None
        self.sub_fields = spec.get("fields")
        self.owner = owner
        if self.versions.empty():
            raise SchemaError(f"{owner}.{self.name}: no versions")
        if (self.tag is None) != self.tagged.empty():
            raise SchemaError(f"{owner}.{self.name}: tag and taggedVersions must come together")
        if not self.nullable.empty() and self.kind not in NULLABLE_OK:
            raise SchemaError(f"{owner}.{self.name}: type {t} cannot be nullable")

    @property
    def kind(self) -> str:
        if self.is_array:
            return "array"
        if self.elem in FIXED or self.elem in VARLEN:
            return self.elem
        return "struct"

    def present(self, v: int) -> bool:
        return v in self.versions

    def is_tagged(self, v: int) -> bool:
        return v in self.tagged

    def default_is_null(self) -> bool:
        return self.default == "null"


class StructDef:
    def __init__(self, name: str, fields: list[Field]):
        self.name = name
        self.fields = fields
        self.pyname = ""


class Message:
    def __init__(self, path: Path):
        spec = json.loads(path.read_text())
        self.spec = spec
        self.name = spec["name"]
        self.kind = spec["type"]
        self.api_key = spec.get("apiKey")
        valid = VRange(spec["validVersions"])
        self.min_version, self.max_version = valid.lo, valid.hi
        self.flexible = VRange(spec.get("flexibleVersions", "none"))
        self.structs: dict[str, StructDef] = {}
        common = {c["name"]: c for c in spec.get("commonStructs", [])}
        self._common_specs = common
        self.root = self._build(self.name, spec["fields"])
        for cname in common:
            if cname not in self.structs:
                self._build(cname, common[cname]["fields"])
        self._validate()

    def _build(self, name: str, field_specs: list[dict]) -> StructDef:
        if name in self.structs:
            raise SchemaError(f"{self.name}: struct {name} defined twice")
        sd = StructDef(name, [])
        self.structs[name] = sd
        for fs in field_specs:
            f = Field(fs, f"{self.name}.{name}")
            if f.kind in ("array", "struct") and f.elem not in FIXED and f.elem not in VARLEN:
                if f.sub_fields is not None:
                    f.struct = self._build(f.elem, f.sub_fields)
                elif f.elem in self.structs:
                    f.struct = self.structs[f.elem]
                elif f.elem in self._common_specs:
                    f.struct = self._build(f.elem, self._common_specs[f.elem]["fields"])
                else:
                    raise SchemaError(f"{self.name}: unknown type {f.elem}")
            sd.fields.append(f)
        return sd

    def _validate(self) -> None:
        for sd in self.structs.values():
            tags: set[int] = set()
            for f in sd.fields:
                if not f.tagged.empty():
                    if not f.tagged.within(self.flexible):
                        raise SchemaError(f"{f.owner}.{f.name}: tagged outside flexible versions")
                    if f.tag in tags:
                        raise SchemaError(f"{f.owner}.{f.name}: duplicate tag {f.tag}")
                    tags.add(f.tag)
                if not f.nullable.within(f.versions) and f.nullable.hi != MAXV:
                    raise SchemaError(f"{f.owner}.{f.name}: nullable outside versions")

    def versions(self) -> range:
        return range(self.min_version, self.max_version + 1)


# ---------------------------------------------------------------- emission
class Emitter:
    def __init__(self, module_name: str):
        self.module_name = module_name
        self.formats: dict[str, str] = {}
        self.funcs: list[str] = []
        self.classes: list[str] = []
        self.aliases: list[str] = []
        self.tables: list[str] = []

    def fmt(self, codes: list[tuple[str, str]]) -> str:
        fmt = ">" + "".join(c for c, _ in codes)
        name = "_F_" + "".join(n for _, n in codes)
        self.formats[name] = fmt
        return name


def default_expr(f: Field, msg: Message) -> str:
    d = f.default
    k = f.kind
    if k == "array":
        return "None" if f.default_is_null() else "[]"
    if k == "struct":
        return "None" if f.default_is_null() else f"{f.struct.pyname}()"
    if d is None:
        return {"bool": "False", "string": "''", "bytes": "b''", "records": "None",
                "uuid": "ZERO_UUID", "float64": "0.0"}.get(k, "0")
    if d == "null":
        return "None"
    if k == "bool":
        return "True" if d.lower() == "true" else "False"
    if k in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
        return str(int(d, 0))
    if k == "float64":
        return repr(float(d))
    if k == "string":
        return repr(d)
    if k == "uuid":
        return "ZERO_UUID"
    return "None"


def is_mutable_default(f: Field) -> bool:
    return f.kind in ("array", "struct") and not f.default_is_null()


def compact_for(f: Field, msg: Message, v: int) -> bool:
    if f.flex_override is not None:
        return v in f.flex_override
    return v in msg.flexible


def min_size(sd: StructDef, msg: Message, v: int) -> int:
    total = 1 if v in msg.flexible else 0
    for f in sd.fields:
        if not f.present(v) or f.is_tagged(v):
            continue
        k = f.kind
        c = compact_for(f, msg, v)
        if k in FIXED:
            total += FIXED[k][1]
        elif k == "string":
            total += 1 if c else 2
        elif k in ("bytes", "records", "array"):
            total += 1 if c else 4
        elif k == "struct":
            total += 1 if v in f.nullable else min_size(f.struct, msg, v)
    return total


def elem_min_size(f: Field, msg: Message, v: int) -> int:
    e = f.elem
    c = v in msg.flexible
    if e in FIXED:
        return FIXED[e][1]
    if e == "string":
        return 1 if c else 2
    if e in ("bytes", "records"):
        return 1 if c else 4
    return min_size(f.struct, msg, v)


def null_message(f: Field, element: bool = False) -> str:
    """Kafka's generated readers' words for a null where the schema allows none."""
    name = f.name[:1].lower() + f.name[1:]
    return f"non-nullable field {name}{' element' if element else ''} was serialized as null"


def dec_field(f: Field, msg: Message, v: int, names: dict, ind: str, target: str) -> list[str]:
    """Statements decoding field f at position p into ``target``."""
    k = f.kind
    c = compact_for(f, msg, v)
    out: list[str] = []
    if k in FIXED:
        _code, size, letter = FIXED[k]
        out.append(f"{ind}{target} = _F_1{letter}.unpack_from(m, p)[0]")
        out.append(f"{ind}p += {size}")
    elif k == "string":
        out.append(f"{ind}{target}, p = {'read_compact_string' if c else 'read_string'}(m, p)")
        if v not in f.nullable:
            out.append(f"{ind}if {target} is None: raise DecodeError({null_message(f)!r})")
    elif k == "bytes":
        out.append(f"{ind}{target}, p = {'read_compact_bytes' if c else 'read_bytes'}(m, p)")
        if v not in f.nullable:
            out.append(f"{ind}if {target} is None: raise DecodeError({null_message(f)!r})")
    elif k == "records":
        out.append(f"{ind}{target}, p = {'read_compact_records' if c else 'read_records'}(m, p)")
        if v not in f.nullable:
            out.append(f"{ind}if {target} is None: raise DecodeError({null_message(f)!r})")
    elif k == "struct":
        fn = names[(f.struct.name, v, "d")]
        if v in f.nullable:
            out.append(f"{ind}if m[p] & 0x80:")
            out.append(f"{ind}    {target} = None")
            out.append(f"{ind}    p += 1")
            out.append(f"{ind}else:")
            out.append(f"{ind}    {target}, p = {fn}(m, p + 1)")
        else:
            out.append(f"{ind}{target}, p = {fn}(m, p)")
    else:  # array
        out.append(f"{ind}n, p = {'read_compact_array_len' if c else 'read_array_len'}(m, p)")
        null_stmt = "None" if v in f.nullable else None
        out.append(f"{ind}if n < 0:")
        if null_stmt:
            out.append(f"{ind}    {target} = None")
        else:
            out.append(f"{ind}    raise DecodeError({null_message(f)!r})")
        out.append(f"{ind}else:")
        i2 = ind + "    "
        e = f.elem
        if e in FIXED and e != "uuid":
            code, size, _ = FIXED[e]
            out.append(f"{i2}{target}, p = read_fixed_array(m, p, n, {code!r}, {size})")
        else:
            ms = elem_min_size(f, msg, v)
            if ms:
                out.append(f"{i2}check_count(m, p, n, {ms})")
            out.append(f"{i2}a = []")
            out.append(f"{i2}for _ in range(n):")
            i3 = i2 + "    "
            if e == "uuid":
                out.append(f"{i3}a.append(bytes(m[p:p + 16]))")
                out.append(f"{i3}p += 16")
            elif e == "string":
                out.append(f"{i3}x, p = {'read_compact_string' if c else 'read_string'}(m, p)")
                out.append(f"{i3}if x is None: raise DecodeError({null_message(f, True)!r})")
                out.append(f"{i3}a.append(x)")
            elif e in ("bytes", "records"):
                out.append(f"{i3}x, p = {'read_compact_bytes' if c else 'read_bytes'}(m, p)")
                out.append(f"{i3}if x is None: raise DecodeError({null_message(f, True)!r})")
                out.append(f"{i3}a.append(x)")
            else:
                fn = names[(f.struct.name, v, "d")]
                out.append(f"{i3}x, p = {fn}(m, p)")
                out.append(f"{i3}a.append(x)")
            out.append(f"{i2}{target} = a")
    return out


def enc_field(f: Field, msg: Message, v: int, names: dict, ind: str, src: str, buf: str, sp: str) -> list[str]:
    k = f.kind
    c = compact_for(f, msg, v)
    out: list[str] = []
    if k in FIXED:
        out.append(f"{ind}{buf} += _F_1{FIXED[k][2]}.pack({src})")
    elif k == "string":
        out.append(f"{ind}{'write_compact_string' if c else 'write_string'}({buf}, {src})")
    elif k == "bytes":
        out.append(f"{ind}{'write_compact_bytes' if c else 'write_bytes'}({buf}, {src})")
    elif k == "records":
        nullable = v in f.nullable
        out.append(f"{ind}{'write_compact_records' if c else 'write_records'}({buf}, {src}, {sp}, {nullable})")
    elif k == "struct":
        fn = names[(f.struct.name, v, "e")]
        if v in f.nullable:
            out.append(f"{ind}x = {src}")
            out.append(f"{ind}if x is None:")
            out.append(f"{ind}    {buf}.append(0xFF)")
            out.append(f"{ind}else:")
            out.append(f"{ind}    {buf}.append(1)")
            out.append(f"{ind}    {fn}({buf}, x, {sp})")
        else:
            out.append(f"{ind}{fn}({buf}, {src}, {sp})")
    else:
        out.append(f"{ind}a = {src}")
        out.append(f"{ind}{'write_compact_array_len' if c else 'write_array_len'}({buf}, a)")
        e = f.elem
        if e in FIXED and e != "uuid":
            out.append(f"{ind}write_fixed_array({buf}, a, {FIXED[e][0]!r})")
            return out
        out.append(f"{ind}if a:")
        out.append(f"{ind}    for x in a:")
        i3 = ind + "        "
        if e == "uuid":
            out.append(f"{i3}{buf} += x")
        elif e == "string":
            out.append(f"{i3}{'write_compact_string' if c else 'write_string'}({buf}, x)")
        elif e in ("bytes", "records"):
            out.append(f"{i3}{'write_compact_bytes' if c else 'write_bytes'}({buf}, x)")
        else:
            fn = names[(f.struct.name, v, "e")]
            out.append(f"{i3}{fn}({buf}, x, {sp})")
    return out


def tag_condition(f: Field, msg: Message, src: str) -> str:
    k = f.kind
    if k in ("array", "bytes", "records"):
        return f"{src} is not None" if f.default_is_null() else f"{src}"
    if k == "struct":
        return f"{src} is not None" if f.default_is_null() else f"{src} != {f.struct.pyname}()"
    return f"{src} != {default_expr(f, msg)}"


def gen_struct_version(em: Emitter, msg: Message, sd: StructDef, v: int, names: dict,
                       bodies: dict) -> None:
    flexible = v in msg.flexible
    regular = [f for f in sd.fields if f.present(v) and not f.is_tagged(v)]
    tagged = sorted([f for f in sd.fields if f.present(v) and f.is_tagged(v)], key=lambda f: f.tag)
    absent = [f for f in sd.fields if not f.present(v)]

    # decode
    d = [f"    o = _new({sd.pyname})"]
    run: list[Field] = []

    def flush_run(lines: list[str]) -> None:
        if not run:
            return
        fname = em.fmt([(FIXED[f.kind][0], FIXED[f.kind][2]) for f in run])
        size = sum(FIXED[f.kind][1] for f in run)
        targets = ", ".join(f"o.{f.attr}" for f in run)
        lines.append(f"    {targets}, = {fname}.unpack_from(m, p)" if len(run) == 1
                     else f"    {targets} = {fname}.unpack_from(m, p)")
        lines.append(f"    p += {size}")
        run.clear()

    for f in regular:
        if f.kind in FIXED:
            run.append(f)
            continue
        flush_run(d)
        d += dec_field(f, msg, v, names, "    ", f"o.{f.attr}")
    flush_run(d)
    for f in absent + tagged:
        d.append(f"    o.{f.attr} = {default_expr(f, msg)}")
    if not flexible:
        d.append("    o._unknown_tagged_fields = None")
    elif not tagged:
        d.append("    o._unknown_tagged_fields, p = skip_tagged(m, p)")
    else:
        d += [
            "    u = None",
            "    if m[p] == 0:",
            "        p += 1",
            "    else:",
            "        n, p = read_uvarint(m, p)",
            "        for _ in range(n):",
            "            tag, p = read_uvarint(m, p)",
            "            size, p = read_uvarint(m, p)",
            "            end = p + size",
        ]
        for i, f in enumerate(tagged):
            d.append(f"            {'if' if i == 0 else 'elif'} tag == {f.tag}:")
            d += dec_field(f, msg, v, names, "                ", f"o.{f.attr}")
        d += [
            "            else:",
            "                if u is None:",
            "                    u = []",
            "                u.append((tag, bytes(m[p:end])))",
            "            p = end",
            "    o._unknown_tagged_fields = u",
        ]
    d.append("    return o, p")

    # encode
    e: list[str] = []
    for f in regular:
        if f.kind in FIXED:
            run.append(f)
            continue
        if run:
            fname = em.fmt([(FIXED[x.kind][0], FIXED[x.kind][2]) for x in run])
            e.append(f"    b += {fname}.pack({', '.join(f'o.{x.attr}' for x in run)})")
            run.clear()
        e += enc_field(f, msg, v, names, "    ", f"o.{f.attr}", "b", "sp")
    if run:
        fname = em.fmt([(FIXED[x.kind][0], FIXED[x.kind][2]) for x in run])
        e.append(f"    b += {fname}.pack({', '.join(f'o.{x.attr}' for x in run)})")
        run.clear()
    if flexible:
        if not tagged:
            e += ["    u = o._unknown_tagged_fields",
                  "    if u:",
                  "        write_tagged(b, u)",
                  "    else:",
                  "        b.append(0)"]
        else:
            e.append("    t = []")
            for f in tagged:
                e.append(f"    if {tag_condition(f, msg, 'o.' + f.attr)}:")
                e.append("        tb = bytearray()")
                e += enc_field(f, msg, v, names, "        ", f"o.{f.attr}", "tb", "None")
                e.append(f"        t.append(({f.tag}, tb))")
            e += ["    u = o._unknown_tagged_fields",
                  "    if u:",
                  "        t.extend(u)",
                  "    if t:",
                  "        write_tagged(b, t)",
                  "    else:",
                  "        b.append(0)"]
    if not e:
        e.append("    pass")

    for kind, lines, sig in (("d", d, "(m, p)"), ("e", e, "(b, o, sp)")):
        body = "\n".join(lines)
        key = (sd.name, kind, body)
        if key in bodies:
            names[(sd.name, v, kind)] = bodies[key]
            continue
        fn = f"_{kind}_{sd.pyname.lstrip('_')}_{v}"
        bodies[key] = fn
        names[(sd.name, v, kind)] = fn
        em.funcs.append(f"def {fn}{sig}:\n{body}\n")


def struct_order(msg: Message) -> list[StructDef]:
    """Structs children-first, so callee function names exist before callers."""
    order: list[StructDef] = []
    seen: set[str] = set()

    def visit(sd: StructDef) -> None:
        if sd.name in seen:
            return
        seen.add(sd.name)
        for f in sd.fields:
            if f.struct is not None:
                visit(f.struct)
        order.append(sd)

    for sd in msg.structs.values():
        visit(sd)
    return order


def gen_class(em: Emitter, msg: Message, sd: StructDef, top: bool) -> None:
    slots = [f.attr for f in sd.fields] + ["_unknown_tagged_fields"]
    params = []
    assigns = []
    for f in sd.fields:
        if is_mutable_default(f):
            params.append(f"{f.attr}=None")
            assigns.append(f"        self.{f.attr} = {default_expr(f, msg)} if {f.attr} is None else {f.attr}")
        else:
            params.append(f"{f.attr}={default_expr(f, msg)}")
            assigns.append(f"        self.{f.attr} = {f.attr}")
    params.append("_unknown_tagged_fields=None")
    assigns.append("        self._unknown_tagged_fields = _unknown_tagged_fields")
    qual = msg.name if top else f"{msg.name}.{sd.name}"
    lines = [f"class {sd.pyname}:"]
    lines.append(f"    __slots__ = ({', '.join(repr(s) for s in slots)},)")
    if top:
        lines.append(f"    API_KEY = {msg.api_key if msg.api_key is not None else -1}")
        lines.append(f"    MIN_VERSION = {msg.min_version}")
        lines.append(f"    MAX_VERSION = {msg.max_version}")
        fl = msg.flexible.lo if not msg.flexible.empty() else None
        lines.append(f"    FLEXIBLE_VERSION = {fl}")
    lines.append("")
    lines.append(f"    def __init__(self, {', '.join(params)}):")
    lines += assigns
    lines.append("")
    lines.append("    def __eq__(self, other):")
    lines.append("        return type(other) is type(self) and all(")
    lines.append("            getattr(self, s) == getattr(other, s) for s in self.__slots__)")
    lines.append("")
    lines.append("    __hash__ = None")
    lines.append("")
    lines.append("    def __repr__(self):")
    lines.append("        return _repr(self)")
    if top:
        p = msg.name
        lines += [
            "",
            "    @classmethod",
            "    def decode(cls, data, version):",
            "        m = data if isinstance(data, memoryview) else memoryview(data)",
            "        return cls.decode_from(m, 0, version)[0]",
            "",
            "    @classmethod",
            "    def decode_from(cls, m, p, version):",
            f"        if not {msg.min_version} <= version <= {msg.max_version}:",
            f"            raise UnsupportedVersion({p!r}, version)",
            f"        return _DEC_{p}[version - {msg.min_version}](m, p)",
            "",
            "    def encode(self, version):",
            "        b = bytearray()",
            "        self.encode_into(b, version, None)",
            "        return bytes(b)",
            "",
            "    def encode_into(self, b, version, sp=None):",
            f"        if not {msg.min_version} <= version <= {msg.max_version}:",
            f"            raise UnsupportedVersion({p!r}, version)",
            f"        _ENC_{p}[version - {msg.min_version}](b, self, sp)",
        ]
    em.classes.append("\n".join(lines) + "\n")
    if not top:
        em.aliases.append(f"{msg.name}.{sd.name} = {sd.pyname}")
        em.aliases.append(f"{sd.pyname}.__qualname__ = {qual!r}")


def gen_message(em: Emitter, msg: Message) -> None:
    for sd in msg.structs.values():
        sd.pyname = msg.name if sd is msg.root else f"_{msg.name}_{sd.name}"
    for sd in msg.structs.values():
        gen_class(em, msg, sd, sd is msg.root)
    names: dict = {}
    bodies: dict = {}
    for sd in struct_order(msg):
        for v in msg.versions():
            gen_struct_version(em, msg, sd, v, names, bodies)
    for kind, tab in (("d", "DEC"), ("e", "ENC")):
        fns = ", ".join(names[(msg.root.name, v, kind)] for v in msg.versions())
        em.tables.append(f"_{tab}_{msg.name} = ({fns},)")


HEADER = '''"""Generated by protocol/codegen.py from {sources}. Do not edit.

PYTEST_DONT_REWRITE: pytest loads this package as a plugin's and would rewrite every module of it;
generated modules hold no asserts, and re-parsing them met a CPython 3.11.7 AST error once."""
# fmt: off
# ruff: noqa
from struct import Struct

from protocol.primitives import (
    ZERO_UUID, DecodeError, check_count, read_array_len, read_bytes, read_compact_array_len,
    read_compact_bytes, read_compact_records, read_compact_string, read_fixed_array,
    read_records, read_string, read_uvarint, skip_tagged, write_array_len, write_bytes,
    write_compact_array_len, write_compact_bytes, write_compact_records, write_compact_string,
    write_fixed_array, write_records, write_string, write_tagged,
)
from protocol.errors import UnsupportedVersion
from protocol._repr import repr_message as _repr

_new = object.__new__
'''


def render_module(msgs: list[Message]) -> str:
    em = Emitter("")
    for code, _size, letter in FIXED.values():
        em.formats[f"_F_1{letter}"] = ">" + code
    for msg in msgs:
        gen_message(em, msg)
    out = [HEADER.format(sources=", ".join(f"schemas/{m.name}.json" for m in msgs))]
    for name in sorted(em.formats):
        out.append(f"{name} = Struct({em.formats[name]!r})")
    out.append("")
    out.append("")
    out.append("\n\n".join(em.classes))
    out.append("")
    out += em.aliases
    out.append("")
    out.append("")
    out.append("\n\n".join(em.funcs))
    out.append("")
    out += em.tables
    return "\n".join(out) + "\n"


def load_all() -> dict[str, Message]:
    msgs = {}
    for path in sorted(SCHEMAS.glob("*.json")):
        m = Message(path)
        msgs[m.name] = m
    return msgs


def module_name_for(base: str) -> str:
    return snake(base)


def build_outputs() -> dict[Path, str]:
    msgs = load_all()
    outputs: dict[Path, str] = {}
    apis: list[tuple[int, str, str, str]] = []
    records: list[tuple[int, str, str, str]] = []
    for name, msg in msgs.items():
        if msg.kind == "request":
            base = name[: -len("Request")]
            resp = msgs[base + "Response"]
            mod = module_name_for(base)
            outputs[MESSAGES / f"{mod}.py"] = render_module([msg, resp])
            apis.append((msg.api_key, base, mod, name))
        elif msg.kind == "coordinator-key":
            base = name[: -len("Key")]
            val = msgs[base + "Value"]
            mod = module_name_for(base)
            outputs[RECORDS / f"{mod}.py"] = render_module([msg, val])
            records.append((msg.api_key, base, mod, name))
        elif msg.kind in ("header", "data"):
            outputs[MESSAGES / f"{module_name_for(name)}.py"] = render_module([msg])
    outputs[MESSAGES / "__init__.py"] = '"""Generated message codecs: see protocol/codegen.py."""\n'
    outputs[RECORDS / "__init__.py"] = '"""Generated coordinator record codecs: see protocol/codegen.py."""\n'
    outputs[MESSAGES / "registry.py"] = render_registry(sorted(apis))
    outputs[RECORDS / "registry.py"] = render_record_registry(sorted(records))
    return outputs


def render_registry(apis) -> str:
    """API keys, and the request/response classes by key, imported on first use.

    Importing (and, without cached bytecode, compiling) all generated modules takes
    a large part of the broker's start-up, so ``REQUESTS`` / ``RESPONSES`` are
    mappings that import a message module the first time one of its classes is
    looked up. They behave as read-only dicts (``[]``, ``get``, ``in``, iteration,
    ``values``, ``items``); ``MODULES`` gives the module name for each key.
    """
    lines = ['"""Generated by protocol/codegen.py: API keys and message classes. Do not edit.',
             "",
             "REQUESTS / RESPONSES import a message module on first lookup of its API key.",
             '"""',
             "# fmt: off", "# ruff: noqa", "from enum import IntEnum", "from importlib import import_module",
             "from typing import Mapping", "", "from protocol.lazy_messages import LazyMapping", ""]
    lines += ["", "class ApiKey(IntEnum):"]
    for key, base, _mod, _ in apis:
        lines.append(f"    {snake(base).upper()} = {key}")
    lines += ["", "", "# api key -> (module, request class, response class)", "MODULES = {"]
    for key, base, mod, _ in apis:
        lines.append(f"    {key}: (\"protocol.messages.{mod}\", \"{base}Request\", \"{base}Response\"),")
    lines += ["}", "", "",
              "def _class(index: int):",
              "    def make(key):",
              "        entry = MODULES[key]",
              "        return getattr(import_module(entry[0]), entry[index])",
              "    return make",
              "",
              "",
              "REQUESTS: Mapping = LazyMapping(MODULES, _class(1))",
              "RESPONSES: Mapping = LazyMapping(MODULES, _class(2))"]
    return "\n".join(lines) + "\n"


SHARE_COORDINATOR_RECORDS = {"ShareSnapshot", "ShareUpdate"}
TRANSACTION_COORDINATOR_RECORDS = {"TransactionLog"}


def render_record_registry(records) -> str:
    """Record types per coordinator (the internal topics number their records separately), imported
    on first use: each ``*_RECORDS`` mapping imports a record's module the first time its type is
    looked up, and a class name read from the registry (``OffsetCommitKey``) is a
    ``protocol.lazy_messages.LazyClass``, so a coordinator that has written or replayed nothing of a
    kind has not imported (or, without cached bytecode, compiled) its codec."""
    owners = (("SHARE_COORDINATOR_RECORDS", SHARE_COORDINATOR_RECORDS),
              ("TRANSACTION_COORDINATOR_RECORDS", TRANSACTION_COORDINATOR_RECORDS))
    others = set().union(*(names for _title, names in owners))
    lines = ['"""Generated by protocol/codegen.py: coordinator record types. Do not edit.',
             "",
             "The *_RECORDS mappings (record type -> (KeyClass, ValueClass)) import a record module on first",
             "lookup of its type; a class name imported from here (``OffsetCommitKey``) is a",
             "protocol.lazy_messages.LazyClass that imports its module on first use.",
             '"""',
             "# fmt: off", "# ruff: noqa", "from importlib import import_module",
             "from typing import Mapping", "",
             "from protocol.lazy_messages import LazyClass, LazyMapping", "",
             "# record name -> module", "MODULES = {"]
    for _key, base, mod, _ in records:
        lines.append(f"    \"{base}\": \"protocol.coordinator_records.{mod}\",")
    lines += ["}", "", "# record name -> record type (the number is per coordinator)", "RECORD_TYPES = {"]
    for key, base, _mod, _ in records:
        lines.append(f"    \"{base}\": {key},")
    lines += ["}", "", "",
              "def _pair(names: dict):",
              "    def make(record_type):",
              "        name = names[record_type]",
              "        module = import_module(MODULES[name])",
              "        return getattr(module, name + \"Key\"), getattr(module, name + \"Value\")",
              "    return make",
              ""]
    for title, names in (*owners, ("GROUP_COORDINATOR_RECORDS", None)):
        lines += ["", f"_{title} = {{"]
        for key, base, _mod, _ in records:
            if (base in names) if names is not None else base not in others:
                lines.append(f"    {key}: \"{base}\",")
        lines += ["}", f"{title}: Mapping = LazyMapping(_{title}, _pair(_{title}))"]
    lines += ["", "",
              "def __getattr__(name: str) -> LazyClass:",
              "    base = name[:-3] if name.endswith(\"Key\") else name[:-5] if name.endswith(\"Value\") else None",
              "    if base not in MODULES:",
              "        raise AttributeError(name)",
              "    cls = globals()[name] = LazyClass(MODULES[base], name)",
              "    return cls"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m protocol.codegen", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if generated files are stale")
    args = ap.parse_args(argv)
    try:
        outputs = build_outputs()
    except SchemaError as e:
        print(f"schema error: {e}", file=sys.stderr)
        return 2
    stale = []
    for path, text in outputs.items():
        current = path.read_text() if path.exists() else None
        if current != text:
            stale.append(path)
            if not args.check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
    for d in (MESSAGES, RECORDS):
        for path in d.glob("*.py") if d.exists() else ():
            if path not in outputs:
                stale.append(path)
                if not args.check:
                    path.unlink()
    if args.check:
        for p in stale:
            print(f"stale: {p.relative_to(ROOT)}", file=sys.stderr)
        return 1 if stale else 0
    print(f"generated {len(outputs)} modules ({len(stale)} changed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
