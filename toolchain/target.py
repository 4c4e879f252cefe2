"""Targets: what the hardware is, loaded from ``targets/<name>.yaml``.

A :class:`Target` carries the facts the compiler needs (kind, launch limits, memory scopes
beyond ``global``/``shared``/``local``). Descriptors are validated strictly: an unknown key
or a value of the wrong type is a :class:`~toolchain.errors.TargetError` naming the file,
the key and the line.

>>> t = load_target("cuda-sm80")
>>> t.kind, t.max_threads_per_block, "wmma.accumulator" in t.memory_scopes
('cuda', 1024, True)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from toolchain.errors import TargetError

#: Folder of the shipped target descriptors.
TARGETS_DIR = Path(__file__).resolve().parent.parent / "targets"

#: Kinds of target Kiln generates code for.
KINDS = ("c", "llvm", "cuda", "vta")


@dataclass(frozen=True)
class Target:
    """A target descriptor (see ``targets/*.yaml``)."""

    name: str
    kind: str
    description: str = ""
    arch: str | None = None
    vector_width_bits: int | None = None
    max_threads_per_block: int | None = None
    max_shared_memory_per_block: int | None = None
    warp_size: int | None = None
    #: extra memory scopes -> capacity in bytes (0 = registers / not limited)
    memory_scopes: dict[str, int] = field(default_factory=dict)
    source: str = ""


# key -> (python type(s), human type name, required)
_SCHEMA: dict[str, tuple[tuple[type, ...], str, bool]] = {
    "name": ((str,), "a string", True),
    "kind": ((str,), "a string", True),
    "description": ((str,), "a string", False),
    "arch": ((str,), "a string", False),
    "vector_width_bits": ((int,), "an integer", False),
    "max_threads_per_block": ((int,), "an integer", False),
    "max_shared_memory_per_block": ((int,), "an integer", False),
    "warp_size": ((int,), "an integer", False),
    "memory_scopes": ((dict,), "a mapping of scope name to size in bytes", False),
}


def _scalar(node: yaml.Node, path: str, key: str) -> Any:
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_object(node, deep=True)
    except yaml.YAMLError as e:
        raise TargetError(f"{path}:{node.start_mark.line + 1}: key {key!r}: {e}") from None


def parse_target(text: str, path: str = "<string>") -> Target:
    """Parse and validate a target descriptor from YAML text."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as e:
        raise TargetError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(root, yaml.MappingNode):
        raise TargetError(f"{path}: a target descriptor must be a mapping of keys to values")
    values: dict[str, Any] = {}
    for knode, vnode in root.value:
        key, line = knode.value, knode.start_mark.line + 1
        if key not in _SCHEMA:
            raise TargetError(f"{path}:{line}: unknown key {key!r}; known keys: "
                              f"{', '.join(_SCHEMA)}")
        types, tname, _ = _SCHEMA[key]
        val = _scalar(vnode, path, key)
        if not isinstance(val, types) or isinstance(val, bool):
            raise TargetError(f"{path}:{line}: key {key!r} must be {tname}, got "
                              f"{type(val).__name__} {val!r}")
        if key == "memory_scopes":
            for sk, sv in val.items():
                if not isinstance(sk, str) or not isinstance(sv, int) or isinstance(sv, bool):
                    raise TargetError(f"{path}:{line}: memory_scopes entry {sk!r}: {sv!r} "
                                      "must map a scope name to a size in bytes (integer)")
        elif isinstance(val, int) and val <= 0:
            raise TargetError(f"{path}:{line}: key {key!r} must be positive, got {val}")
        values[key] = val
    for key, (_, tname, required) in _SCHEMA.items():
        if required and key not in values:
            raise TargetError(f"{path}: missing required key {key!r} ({tname})")
    if values["kind"] not in KINDS:
        raise TargetError(f"{path}: kind {values['kind']!r} is not one of {', '.join(KINDS)}")
    return Target(**values, source=path)


def load_target(name_or_path: str | Path) -> Target:
    """Load ``targets/<name>.yaml`` (or a YAML file path) into a :class:`Target`."""
    p = Path(name_or_path)
    if p.suffix not in (".yaml", ".yml"):
        p = TARGETS_DIR / f"{name_or_path}.yaml"
    if not p.is_file():
        known = sorted(x.stem for x in TARGETS_DIR.glob("*.yaml"))
        raise TargetError(f"unknown target {str(name_or_path)!r} (no file {p}); known "
                          f"targets: {', '.join(known)}")
    return parse_target(p.read_text(), str(p))
