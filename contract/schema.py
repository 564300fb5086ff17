"""The machine form of the trace contract: ``traces/schema.json``, generated from the
Structs of ``revivify.contract.events`` (a test compares the committed file with it).

Regenerate with ``python -m revivify.contract.schema traces/schema.json`` (or
``python -m revivify.checker.walks traces``, which also rewrites the trace corpora).
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from typing import Any, Final

import msgspec

from revivify.contract.events import (
    ARGS_TYPES,
    ENVELOPE_FIELDS,
    NODE_EVENTS,
    SCHEMA_VERSION,
    SUPPORTED_VERSIONS,
    TABLET_EVENTS,
    DurableState,
)

_ENVELOPE_DOCS: Final[dict[str, tuple[str, dict[str, Any]]]] = {
    "v": ("schema version", {}),
    "node": ("node UUID (a wiped server gets a new one)", {"type": "string"}),
    "inc": ("process incarnation, 1, 2, ...", {"type": "integer", "minimum": 1}),
    "seq": ("per-incarnation sequence number, 0, 1, 2, ... without gaps",
            {"type": "integer", "minimum": 0}),
    "lamport": ("Lamport clock, strictly increasing within a file",
                {"type": "integer", "minimum": 1}),
    "wall_ns": ("wall time, integer nanoseconds since the epoch", {"type": "integer"}),
    "tablet": ("tablet id; null for server events", {"type": ["string", "null"]}),
    "event": ("the spec action (spec/actions.py ACTIONS) or a server event", {}),
    "args": ("", {"type": "object"}),
    "state": ("abstract durable state after the step; null for server events", {}),
}


def contract_schema() -> dict[str, Any]:
    """traces/schema.json: JSON Schema 2020-12 for one line, generated from the Structs
    (``python -m revivify.checker.walks traces`` rewrites it; a test compares)."""
    types: list[type[Any]] = [DurableState, *dict.fromkeys(ARGS_TYPES.values())]
    _, defs = msgspec.json.schema_components(types, ref_template="#/$defs/{name}")
    _own_descriptions(defs)
    # A FAILED startup states its reason; no other case has one (decode_args checks it).
    startup = defs["StartupArgs"]
    startup["properties"]["reason"] = {"anyOf": [{"type": "string", "minLength": 1},
                                                 {"type": "null"}]}
    startup["if"] = {"properties": {"case": {"const": "FAILED"}}}
    startup["then"] = {"required": ["case", "reason"],
                       "properties": {"reason": {"type": "string"}}}
    startup["else"] = {"properties": {"reason": {"type": "null"}}}
    # A version-3 batch: prev_term and terms together, each run [term >= 1, count >= 1]
    # (decode_args checks the rest: the counts cover the batch, terms never decrease).
    append = defs["AppendArgs"]["properties"]
    append["prev_term"] = {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}],
                           "default": None}
    append["terms"] = {"anyOf": [{"type": "array", "minItems": 1, "items": {
        "type": "array", "minItems": 2, "maxItems": 2, "items": False,
        "prefixItems": [{"type": "integer", "minimum": 1},
                        {"type": "integer", "minimum": 1}]}}, {"type": "null"}],
        "default": None}
    defs["AppendArgs"]["dependentRequired"] = {"prev_term": ["terms"],
                                               "terms": ["prev_term"]}
    props: dict[str, Any] = {}
    for name, _ in ENVELOPE_FIELDS:
        doc, shape = _ENVELOPE_DOCS[name]
        prop = dict(shape)
        if name == "v":
            prop["enum"] = list(SUPPORTED_VERSIONS)
        elif name == "event":
            prop["enum"] = [*TABLET_EVENTS, *NODE_EVENTS]
        if doc:
            prop["description"] = doc
        props[name] = prop
    rules = []
    for event, args_type in ARGS_TYPES.items():
        tablet = event not in NODE_EVENTS
        rules.append({
            "if": {"properties": {"event": {"const": event}}},
            "then": {"properties": {
                "args": {"$ref": f"#/$defs/{args_type.__name__}"},
                "state": {"$ref": "#/$defs/DurableState"} if tablet else {"type": "null"},
                "tablet": {"type": "string" if tablet else "null"},
            }},
        })
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://revivify.dev/traces/schema/v{SCHEMA_VERSION}.json",
        "title": "revivify trace event (one JSON Lines line)",
        "description": f"Schema version {SCHEMA_VERSION} (version-2 and version-3 lines "
                       "are read too). "
                       "One file per process incarnation: "
                       "<node-uuid>.<incarnation:04d>.jsonl. See traces/README.md.",
        "type": "object",
        "required": [name for name, _ in ENVELOPE_FIELDS],
        "additionalProperties": False,
        "properties": props,
        "allOf": rules,
        "$defs": defs,
    }


def _own_descriptions(node: Any) -> None:
    """Every ``description`` in the form the project chooses, not the library's: msgspec
    copies a Struct's docstring into its schema, and how it does so changed between releases
    (0.23 dedents the continuation lines, earlier ones kept them indented). The committed
    schema.json is compared byte for byte, so it must not depend on that choice:
    ``inspect.cleandoc`` of each (idempotent, so either form gives the same text)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "description" and isinstance(value, str):
                node[key] = inspect.cleandoc(value)
            else:
                _own_descriptions(value)
    elif isinstance(node, list):
        for item in node:
            _own_descriptions(item)


def write_contract_schema(path: str) -> None:
    with open(path, "w") as f:
        json.dump(contract_schema(), f, indent=2)
        f.write("\n")


def main(argv: list[str] | None = None) -> int:
    """python -m revivify.contract.schema [PATH]: write the schema (default
    traces/schema.json)."""
    parser = argparse.ArgumentParser(
        prog="python -m revivify.contract.schema",
        description="Write the trace contract's JSON Schema, generated from the typed event "
                    "records.")
    parser.add_argument("path", nargs="?", default="traces/schema.json",
                        help="where to write it (default: traces/schema.json)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    write_contract_schema(args.path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
