"""Board descriptors: ``boards/<name>.yaml`` loaded into validated :class:`Board` objects.

A board says which core and FPU it has, which target descriptor the code is generated for,
where its flash and RAM are and how large, the start-up code and C library of its firmware,
the QEMU machine that runs the same core, and how to flash it.  Validation is strict, like
:mod:`toolchain.target`: an unknown key or a value of the wrong type is a
:class:`~toolchain.errors.TargetError` naming the file, the key and the line.

>>> b = load_board("nucleo-l4r5zi")
>>> b.core, b.flash.size, b.ram.size, b.qemu.machine
('cortex-m4', 2097152, 655360, 'mps2-an386')
>>> b.cpu_flags
('-mcpu=cortex-m4', '-mthumb', '-mfpu=fpv4-sp-d16', '-mfloat-abi=hard')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from toolchain.errors import TargetError
from toolchain.target import DEFAULT_LIBC, LIBC_FLAGS

#: folder of the shipped board descriptors (and their start-up code)
BOARDS_DIR = Path(__file__).resolve().parent.parent.parent / "boards"

CORES = ("cortex-m0plus", "cortex-m3", "cortex-m4", "cortex-m7", "cortex-m33", "cortex-m55")
FLOAT_ABIS = ("hard", "softfp", "soft")
LIBCS = tuple(LIBC_FLAGS)
PROBES = ("pyocd", "openocd")


@dataclass(frozen=True)
class Region:
    """A memory region: where it starts and how many bytes it has."""

    origin: int
    size: int


@dataclass(frozen=True)
class QemuMachine:
    """The QEMU machine that runs the board's core (and where its memories are)."""

    machine: str
    cpu: str
    flash_origin: int
    ram_origin: int
    #: a CMSDK APB timer (32-bit down counter) the firmware reads, and its clock
    timer_base: int | None = None
    timer_hz: int | None = None


@dataclass(frozen=True)
class Board:
    """A board descriptor (see ``boards/*.yaml`` and docs/embedded.md)."""

    name: str
    core: str
    fpu: str
    float_abi: str
    target: str
    flash: Region
    ram: Region
    qemu: QemuMachine
    description: str = ""
    clock_hz: int | None = None
    stack_bytes: int = 8192
    libc: str = DEFAULT_LIBC
    startup: str = "startup/cortex_m_startup.c"
    #: activation layout to compile for, overriding the target's (None: the target's)
    layout: str | None = None
    #: probe name -> its options (``target``/``pack`` for pyocd, ``config``/``transport``
    #: for openocd)
    flash_recipe: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: preprocessor macros of the firmware build (``-DNAME=VALUE``): the placement macros
    #: ``KILN_WEIGHTS_SECTION``, ``KILN_ARENA_SECTION``... (``runtime_c/kiln_runtime.h``)
    defines: dict[str, str] = field(default_factory=dict)
    source: str = ""

    @property
    def cpu_flags(self) -> tuple[str, ...]:
        """The gcc flags that select the core, FPU and float ABI."""
        flags = [f"-mcpu={self.core}", "-mthumb"]
        if self.fpu != "none":
            flags.append(f"-mfpu={self.fpu}")
        flags.append(f"-mfloat-abi={self.float_abi}")
        return tuple(flags)

    def compile_target(self) -> Any:
        """The :class:`~toolchain.target.Target` to generate code for (the board's layout,
        if it sets one, replaces the target's)."""
        from dataclasses import replace

        from toolchain.target import load_target

        t = load_target(self.target)
        return replace(t, layout=self.layout) if self.layout else t

    @property
    def startup_path(self) -> Path:
        """The start-up source file (absolute)."""
        return BOARDS_DIR / self.startup

    @property
    def is_emulator(self) -> bool:
        """Whether the board is a QEMU machine itself (nothing to flash)."""
        return not self.flash_recipe


_INT, _STR = ((int,), "an integer"), ((str,), "a string")
_REGION = {"origin": (*_INT, True), "size": (*_INT, True)}
_QEMU = {"machine": (*_STR, True), "cpu": (*_STR, True), "flash_origin": (*_INT, True),
         "ram_origin": (*_INT, True), "timer_base": (*_INT, False), "timer_hz": (*_INT, False)}
_PYOCD = {"target": (*_STR, True), "pack": (*_STR, False)}
_OPENOCD = {"config": ((list,), "a list of openocd config files", True),
            "transport": (*_STR, False)}
# key -> (types, human type name, required, nested schema or None)
_SCHEMA: dict[str, tuple[tuple[type, ...], str, bool, dict | None]] = {
    "name": (*_STR, True, None),
    "description": (*_STR, False, None),
    "core": (*_STR, True, None),
    "fpu": (*_STR, True, None),
    "float_abi": (*_STR, True, None),
    "target": (*_STR, True, None),
    "clock_hz": (*_INT, False, None),
    "flash": ((dict,), "a mapping with origin and size", True, _REGION),
    "ram": ((dict,), "a mapping with origin and size", True, _REGION),
    "stack_bytes": (*_INT, False, None),
    "libc": (*_STR, False, None),
    "startup": (*_STR, False, None),
    "layout": ((str,), "a layout (nchw, nhwc, nchw<b>c)", False, None),
    "qemu": ((dict,), "a mapping (machine, cpu, flash_origin, ram_origin, ...)", True, _QEMU),
    "flash_recipe": ((dict,), "a mapping of probe (pyocd, openocd) to its options", False,
                     None),
    "defines": ((dict,), "a mapping of C macro name to value", False, None),
}


def _value(node: yaml.Node, path: str, key: str) -> Any:
    try:
        return yaml.SafeLoader("").construct_object(node, deep=True)
    except yaml.YAMLError as e:
        raise TargetError(f"{path}:{node.start_mark.line + 1}: key {key!r}: {e}") from None


def _typed(val: Any, types: tuple[type, ...], tname: str, path: str, line: int,
           key: str) -> Any:
    if not isinstance(val, types) or isinstance(val, bool):
        raise TargetError(f"{path}:{line}: key {key!r} must be {tname}, got "
                          f"{type(val).__name__} {val!r}")
    if isinstance(val, int) and val < 0:
        raise TargetError(f"{path}:{line}: key {key!r} must not be negative, got {val}")
    if isinstance(val, list) and not all(isinstance(x, str) for x in val):
        raise TargetError(f"{path}:{line}: key {key!r} must be a list of strings, got {val!r}")
    return val


def _mapping(node: yaml.Node, schema: dict, path: str, prefix: str) -> dict[str, Any]:
    """Validate a nested mapping node against ``schema`` (key -> (types, name, required))."""
    line = node.start_mark.line + 1
    if not isinstance(node, yaml.MappingNode):
        raise TargetError(f"{path}:{line}: key {prefix!r} must be a mapping with keys "
                          f"{', '.join(schema)}")
    out: dict[str, Any] = {}
    for k, v in node.value:
        key, kl = f"{prefix}.{k.value}", k.start_mark.line + 1
        if k.value not in schema:
            raise TargetError(f"{path}:{kl}: unknown key {key!r}; known keys: "
                              f"{', '.join(f'{prefix}.{s}' for s in schema)}")
        types, tname, _ = schema[k.value][:3]
        out[k.value] = _typed(_value(v, path, key), types, tname, path, kl, key)
    for k, (_, tname, required) in schema.items():
        if required and k not in out:
            raise TargetError(f"{path}:{line}: key {prefix!r} is missing {k!r} ({tname})")
    return out


def _recipe(node: yaml.Node, path: str) -> dict[str, dict[str, Any]]:
    line = node.start_mark.line + 1
    if not isinstance(node, yaml.MappingNode):
        raise TargetError(f"{path}:{line}: key 'flash_recipe' must be a mapping of probe "
                          f"({', '.join(PROBES)}) to its options")
    out = {}
    for k, v in node.value:
        if k.value not in PROBES:
            raise TargetError(f"{path}:{k.start_mark.line + 1}: unknown probe "
                              f"'flash_recipe.{k.value}'; known probes: {', '.join(PROBES)}")
        schema = _PYOCD if k.value == "pyocd" else _OPENOCD
        out[k.value] = _mapping(v, schema, path, f"flash_recipe.{k.value}")
    return out


def _defines(val: Any, path: str, line: int) -> dict[str, str]:
    """``defines:``: C macro names to values (strings or integers, given to the compiler
    as ``-DNAME=VALUE``; no spaces or quotes, which would not survive make)."""
    import re

    if not isinstance(val, dict):
        raise TargetError(f"{path}:{line}: key 'defines' must be a mapping of C macro name "
                          f"to value, got {type(val).__name__}")
    out = {}
    for name, v in val.items():
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise TargetError(f"{path}:{line}: defines: {name!r} is not a C macro name")
        if isinstance(v, bool) or not isinstance(v, (str, int)) or \
                re.search(r"[\s'\"\\$`]", str(v)):
            raise TargetError(f"{path}:{line}: defines.{name} must be a string or an integer "
                              f"without spaces, quotes, $ or backslashes, got {v!r}")
        out[name] = str(v)
    return out


def _choice(val: str, choices: tuple[str, ...], path: str, line: int, key: str) -> None:
    if val not in choices:
        raise TargetError(f"{path}:{line}: key {key!r} = {val!r} is not one of "
                          f"{', '.join(choices)}")


def parse_board(text: str, path: str = "<string>") -> Board:
    """Parse and validate a board descriptor from YAML text.

    >>> parse_board("name: x\\nram: 3\\n", "b.yaml")
    Traceback (most recent call last):
    ...
    toolchain.errors.TargetError: b.yaml:2: key 'ram' must be a mapping with keys origin, size
    """
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as e:
        raise TargetError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(root, yaml.MappingNode):
        raise TargetError(f"{path}: a board descriptor must be a mapping of keys to values")
    values: dict[str, Any] = {}
    lines: dict[str, int] = {}
    for knode, vnode in root.value:
        key, line = knode.value, knode.start_mark.line + 1
        if key not in _SCHEMA:
            raise TargetError(f"{path}:{line}: unknown key {key!r}; known keys: "
                              f"{', '.join(_SCHEMA)}")
        if key in lines:
            raise TargetError(f"{path}:{line}: key {key!r} is given twice (first on line "
                              f"{lines[key]})")
        types, tname, _, nested = _SCHEMA[key]
        lines[key] = line
        if key == "flash_recipe":
            values[key] = _recipe(vnode, path)
        elif key == "defines":
            values[key] = _defines(_value(vnode, path, key), path, line)
        elif nested is not None:
            values[key] = _mapping(vnode, nested, path, key)
        else:
            values[key] = _typed(_value(vnode, path, key), types, tname, path, line, key)
    for key, (_, tname, required, _) in _SCHEMA.items():
        if required and key not in values:
            raise TargetError(f"{path}: missing required key {key!r} ({tname})")
    _choice(values["core"], CORES, path, lines["core"], "core")
    _choice(values["float_abi"], FLOAT_ABIS, path, lines["float_abi"], "float_abi")
    if "libc" in values:
        _choice(values["libc"], LIBCS, path, lines["libc"], "libc")
    for key in ("flash", "ram"):
        if values[key]["size"] <= 0:
            raise TargetError(f"{path}:{lines[key]}: key '{key}.size' must be positive")
    values["flash"], values["ram"] = Region(**values["flash"]), Region(**values["ram"])
    values["qemu"] = QemuMachine(**values["qemu"])
    board = Board(**values, source=path)
    if not board.startup_path.is_file():
        raise TargetError(f"{path}:{lines.get('startup', 1)}: start-up file {board.startup} "
                          f"does not exist under {BOARDS_DIR}")
    return board


def board_names() -> list[str]:
    """Names of the shipped boards."""
    return sorted(p.stem for p in BOARDS_DIR.glob("*.yaml"))


def board_of_bundle(meta: dict[str, Any]) -> Board:
    """The board a bundle was compiled for (its own descriptor file when not shipped)."""
    entry = meta["board"]
    return load_board(entry.get("descriptor") or entry["name"])


def load_board(name_or_path: str | Path) -> Board:
    """Load ``boards/<name>.yaml`` (or a YAML file path) into a :class:`Board`."""
    p = Path(name_or_path)
    if p.suffix not in (".yaml", ".yml"):
        p = BOARDS_DIR / f"{name_or_path}.yaml"
    if not p.is_file():
        raise TargetError(f"unknown board {str(name_or_path)!r} (no file {p}); known boards: "
                          f"{', '.join(board_names())}")
    return parse_board(p.read_text(), str(p))
