"""A small JSON Schema (2020-12) validator for the keywords traces/schema.json uses.

The project has no JSON Schema library among its dependencies; this covers exactly what
``checker.traces.contract_schema`` generates (``KEYWORDS``) and refuses a schema that uses
anything else, so the test that validates the writer's output against schema.json cannot
silently skip a rule."""

from __future__ import annotations

from typing import Any

KEYWORDS = frozenset({
    "$defs", "$id", "$ref", "$schema", "additionalProperties", "allOf", "anyOf", "const",
    "default", "dependentRequired", "description", "else", "enum", "if", "items",
    "maxItems", "minItems", "minLength", "minimum", "prefixItems", "properties",
    "required", "then", "title", "type",
})

_TYPES: dict[str, Any] = {
    "object": dict, "array": list, "string": str, "null": type(None), "boolean": bool,
}


def _is_type(value: Any, name: str) -> bool:
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, _TYPES[name])


class Validator:
    def __init__(self, schema: dict[str, Any]) -> None:
        self.root = schema
        unknown = self._keywords(schema) - KEYWORDS
        if unknown:
            raise ValueError(f"schema uses keywords this validator lacks: {sorted(unknown)}")

    def _keywords(self, s: Any) -> set[str]:
        out: set[str] = set()
        if isinstance(s, dict):
            for k, v in s.items():
                out.add(k)
                if k in ("properties", "$defs", "dependentRequired"):
                    for sub in v.values():
                        out |= self._keywords(sub)
                elif k not in ("const", "enum", "default"):
                    out |= self._keywords(v)
        elif isinstance(s, list):
            for v in s:
                out |= self._keywords(v)
        return out

    def errors(self, value: Any, schema: Any = None, path: str = "$") -> list[str]:
        """Every way ``value`` breaks ``schema`` (the root schema by default)."""
        s = self.root if schema is None else schema
        if s is True:
            return []
        if s is False:
            return [f"{path}: not allowed"]
        out: list[str] = []
        if "$ref" in s:
            ref = s["$ref"]
            assert ref.startswith("#/$defs/"), ref
            out += self.errors(value, self.root["$defs"][ref[len("#/$defs/"):]], path)
        if "type" in s:
            types = s["type"] if isinstance(s["type"], list) else [s["type"]]
            if not any(_is_type(value, t) for t in types):
                return [*out, f"{path}: {value!r} is not of type {types}"]
        if "const" in s and value != s["const"]:
            out.append(f"{path}: {value!r} is not {s['const']!r}")
        if "enum" in s and value not in s["enum"]:
            out.append(f"{path}: {value!r} not in {s['enum']}")
        if "minimum" in s and _is_type(value, "number") and value < s["minimum"]:
            out.append(f"{path}: {value} < {s['minimum']}")
        if "minLength" in s and isinstance(value, str) and len(value) < s["minLength"]:
            out.append(f"{path}: shorter than {s['minLength']}")
        if isinstance(value, dict):
            props = s.get("properties", {})
            for name in s.get("required", ()):
                if name not in value:
                    out.append(f"{path}: missing {name!r}")
            for name, sub in value.items():
                if name in props:
                    out += self.errors(sub, props[name], f"{path}.{name}")
                elif s.get("additionalProperties", True) is False:
                    out.append(f"{path}: unexpected {name!r}")
            for name, needs in s.get("dependentRequired", {}).items():
                if name in value:
                    out += [f"{path}: {name!r} needs {n!r}" for n in needs if n not in value]
        if isinstance(value, list):
            if "minItems" in s and len(value) < s["minItems"]:
                out.append(f"{path}: fewer than {s['minItems']} items")
            if "maxItems" in s and len(value) > s["maxItems"]:
                out.append(f"{path}: more than {s['maxItems']} items")
            prefix = s.get("prefixItems", [])
            for n, item in enumerate(value):
                sub = prefix[n] if n < len(prefix) else s.get("items", True)
                out += self.errors(item, sub, f"{path}[{n}]")
        if "anyOf" in s and not any(not self.errors(value, sub, path) for sub in s["anyOf"]):
            out.append(f"{path}: matches none of anyOf")
        for sub in s.get("allOf", ()):
            out += self.errors(value, sub, path)
        if "if" in s:
            branch = s.get("then") if not self.errors(value, s["if"], path) else s.get("else")
            if branch is not None:
                out += self.errors(value, branch, path)
        return out
