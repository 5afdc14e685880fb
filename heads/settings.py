"""Which settings a stage's output depends on, said once on the floor every package imports (heads imports nothing
of ours): a field's metadata marks it, and every stage hash and the run-directory reuse read the marks through
`output_settings` (distill's, eval's and train's configs alike)."""

from __future__ import annotations

from dataclasses import MISSING, fields, is_dataclass
from typing import Any, get_type_hints

# Field metadata of settings that don't change any stage's output (where and how work runs, what
# is logged); every stage hash and the run-directory reuse leave them out (`output_settings`).
NO_EFFECT = {"affects_output": False}
# Field metadata of a setting added after runs were made, whose default keeps the behaviour from before it existed:
# left out of every hash while at that default, so upgrading drafthub doesn't redo finished stages (set, it counts).
# Never change such a field's default: runs made at the old default would then be reused under the new one.
ADDED = {"hashed_unless_default": True}


def output_settings(schema: Any, values: dict) -> dict:
    """`values` (a config as a dict) without the fields `schema` marks NO_EFFECT, nor those it marks ADDED
    that hold their default, recursively."""
    hints = get_type_hints(schema)
    out = dict(values)
    for f in fields(schema):
        at_default = f.name in out and f.default is not MISSING and out[f.name] == f.default
        if f.metadata.get("affects_output", True) is False or (f.metadata.get("hashed_unless_default") and at_default):
            out.pop(f.name, None)
        elif is_dataclass(hints.get(f.name)) and isinstance(out.get(f.name), dict):
            out[f.name] = output_settings(hints[f.name], out[f.name])
    return out
