"""Targets: what the hardware is, loaded from ``targets/<name>.yaml``.

A :class:`Target` carries the facts the compiler needs (kind, compiler and flags, vector
width, caches, cores, dtypes, preferred layout, launch limits, memory scopes beyond
``global``/``shared``/``local``, and the tensor intrinsics the hardware offers — see
``docs/targets.md``). Descriptors are validated strictly: an unknown key or a value of the
wrong type is a :class:`~toolchain.errors.TargetError` naming the file, the key and the
line.

>>> t = load_target("cuda-sm80")
>>> t.kind, t.max_threads_per_block, "wmma.accumulator" in t.memory_scopes
('cuda', 1024, True)
"""

from __future__ import annotations

import fnmatch
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
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
    #: shared memory a block may opt in to (``cudaFuncSetAttribute``), bytes
    max_shared_memory_per_block_optin: int | None = None
    warp_size: int | None = None
    #: streaming multiprocessors (GPU), registers per thread at most
    sm_count: int | None = None
    max_registers_per_thread: int | None = None
    #: threads an SM holds at most (GPU: the occupancy rule of the tiled kernels)
    max_threads_per_sm: int | None = None
    #: extra memory scopes -> capacity in bytes (0 = registers / not limited)
    memory_scopes: dict[str, int] = field(default_factory=dict)
    #: C compiler (None: the host's ``cc``/``$CC``) and extra flags for generated code
    compiler: str | None = None
    cflags: tuple[str, ...] = ()
    #: cores the schedules may use (parallel loops only when > 1)
    cores: int | None = None
    #: vector registers of the ISA (register tiling)
    vector_registers: int | None = None
    #: cache sizes in bytes: ``l1d``, ``l2``, ``l3``
    caches: dict[str, int] = field(default_factory=dict)
    #: element types the target computes in
    dtypes: tuple[str, ...] = ()
    #: preferred activation layout for the graph layout pass (nchw, nhwc, nchw<b>c)
    layout: str | None = None
    #: CPU feature flags (as /proc/cpuinfo spells them) code for this target needs
    cpu_flags: tuple[str, ...] = ()
    #: tensor intrinsics: name -> validated spec (see toolchain.intrinsics)
    intrinsics: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: C text placed once before kernels that use the intrinsics (helper functions/macros)
    c_helpers: str = ""
    #: headers ``c_helpers`` needs (None: those of the target's intrinsics)
    c_helpers_headers: tuple[str, ...] | None = None
    #: C helper functions in a definition of their own, placed only before the kernels that
    #: call them (``c_helpers`` also comes with every intrinsic of the target); headers as
    #: ``c_helpers``
    on_call_helpers: str = ""
    #: what the target *is*, most specific first (``[x86, cpu]``, ``[cortex_m, arm, cpu]``):
    #: the keys of the schedule strategy table (:mod:`toolchain.schedules.registry`); the
    #: name is never one (a renamed ``extends:`` variant gets the same kernels)
    keys: tuple[str, ...] = ()
    #: what the LLVM backend compiles for: ``triple``, ``cpu``, ``features`` (a list of
    #: ``+feature``/``-feature``), ``fast_math`` (LLVM fast-math flags allowed) and
    #: ``loop_unroll`` (``all`` or ``scheduled``), ``opt_level`` (3 or 2); see
    #: :mod:`toolchain.codegen.llvm_target`
    llvm: dict[str, Any] = field(default_factory=dict)
    #: the LLVM backend's versions of the ``c_helpers`` functions: C name -> ``{returns,
    #: params, body}`` (LLVM IR; :mod:`toolchain.intrinsics` renders the definition)
    llvm_helpers: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: accelerator targets (kind ``vta``, see ``docs/vta.md``): the GEMM core shape
    #: (``batch``, ``block_in``, ``block_out``), on-chip buffer bytes (``input``, ``weight``,
    #: ``accumulator``, ``uop``), command/token queue depths, the DRAM model
    #: (``bus_width_bits``, ``bytes_per_cycle``, ``latency_cycles``) and the ALU ``ops``
    gemm: dict[str, int] = field(default_factory=dict)
    buffers: dict[str, int] = field(default_factory=dict)
    queues: dict[str, int] = field(default_factory=dict)
    dram: dict[str, int] = field(default_factory=dict)
    alu: dict[str, Any] = field(default_factory=dict)
    #: the shipped target this descriptor starts from (``extends:``), if any
    extends: str | None = None
    source: str = ""

    @property
    def is_accelerator(self) -> bool:
        """Whether the descriptor declares a GEMM core (an accelerator the compiler emits
        instruction streams for, not C).

        >>> load_target("vta").is_accelerator, load_target("c-generic").is_accelerator
        (True, False)
        """
        return bool(self.gemm)

    def has_intrinsic(self, name: str) -> bool:
        """Whether the descriptor declares the tensor intrinsic ``name`` (a capability
        the schedules test instead of the target's name).

        >>> load_target("cortex-m7").has_intrinsic("dot_q15q7_4x4")
        True
        """
        return name in self.intrinsics

    def intrinsic(self, name: str) -> str:
        """The registered name (``"<target>.<name>"``) :meth:`Schedule.tensorize
        <toolchain.tir.schedule.Schedule.tensorize>` takes for intrinsic ``name``,
        registering the target's intrinsics first.

        >>> load_target("x86_64-avx512").intrinsic("dot_i16_16x2")
        'x86_64-avx512.dot_i16_16x2'
        """
        from toolchain.intrinsics import load_intrinsics

        if name not in self.intrinsics:
            raise TargetError(f"target {self.name!r} ({self.source}) declares no intrinsic "
                              f"{name!r}; it declares: {', '.join(self.intrinsics) or 'none'}")
        load_intrinsics(self)
        return f"{self.name}.{name}"


# key -> (python type(s), human type name, required)
_SCHEMA: dict[str, tuple[tuple[type, ...], str, bool]] = {
    "name": ((str,), "a string", True),
    "kind": ((str,), "a string", True),
    "description": ((str,), "a string", False),
    "arch": ((str,), "a string", False),
    "vector_width_bits": ((int,), "an integer", False),
    "max_threads_per_block": ((int,), "an integer", False),
    "max_shared_memory_per_block": ((int,), "an integer", False),
    "max_shared_memory_per_block_optin": ((int,), "an integer (bytes)", False),
    "warp_size": ((int,), "an integer", False),
    "sm_count": ((int,), "an integer", False),
    "max_registers_per_thread": ((int,), "an integer", False),
    "max_threads_per_sm": ((int,), "an integer", False),
    "memory_scopes": ((dict,), "a mapping of scope name to size in bytes", False),
    "compiler": ((str,), "a string", False),
    "cflags": ((list,), "a list of strings", False),
    "cores": ((int,), "an integer", False),
    "vector_registers": ((int,), "an integer", False),
    "caches": ((dict,), "a mapping of l1d/l2/l3 to sizes in bytes", False),
    "dtypes": ((list,), "a list of dtype names", False),
    "layout": ((str,), "a string (nchw, nhwc, nchwc or nchw<b>c)", False),
    "cpu_flags": ((list,), "a list of strings", False),
    "keys": ((list,), "a list of strategy keys, most specific first (e.g. [x86, cpu])", False),
    "intrinsics": ((dict,), "a mapping of intrinsic name to its description", False),
    "c_helpers": ((str,), "C text (helper functions the intrinsics call)", False),
    "c_helpers_headers": ((list,), "a list of header names c_helpers needs", False),
    "on_call_helpers": ((str,), "C text (helper functions placed only before the kernels "
                                "that call them)", False),
    "llvm": ((dict,), "a mapping with keys triple, cpu, features, fast_math, loop_unroll, "
                       "opt_level", False),
    "llvm_helpers": ((dict,), "a mapping of c_helpers function name to its LLVM IR "
                              "(returns, params, body)", False),
    "gemm": ((dict,), "a mapping with keys batch, block_in, block_out", False),
    "buffers": ((dict,), "a mapping with keys input, weight, accumulator, uop (bytes)", False),
    "queues": ((dict,), "a mapping with keys cmd_queue_depth, token_queue_depth", False),
    "dram": ((dict,), "a mapping with keys bus_width_bits, bytes_per_cycle, latency_cycles",
             False),
    "alu": ((dict,), "a mapping with key ops (a list of ALU op names)", False),
    "extends": ((str,), "the name of a shipped target whose keys this one starts from", False),
    "rename_functions": ((dict,), "a mapping of C function-name prefix to its replacement in "
                                  "the intrinsics taken from the extended target", False),
    "drop_intrinsics": ((list,), "a list of names (shell patterns) of the extended target's "
                                 "intrinsics this one does not have", False),
}

_CACHE_KEYS = ("l1d", "l2", "l3")
#: the accelerator keys (kind ``vta``): key -> sub-key -> Python type; all sub-keys required
ACCELERATOR_SCHEMA: dict[str, dict[str, type]] = {
    "gemm": {"batch": int, "block_in": int, "block_out": int},
    "buffers": {"input": int, "weight": int, "accumulator": int, "uop": int},
    "queues": {"cmd_queue_depth": int, "token_queue_depth": int},
    "dram": {"bus_width_bits": int, "bytes_per_cycle": int, "latency_cycles": int},
    "alu": {"ops": list},
}
#: memory scope of each on-chip buffer of an accelerator target (``buffers`` key -> scope);
#: ``vta.out`` (the int8 mirror of the accumulator) has a quarter of its bytes
ACCELERATOR_SCOPES = {"input": "vta.inp", "weight": "vta.wgt", "accumulator": "vta.acc",
                      "uop": "vta.uop"}
#: instructions an accelerator intrinsic may name
ACCELERATOR_INSTRUCTIONS = ("GEMM", "ALU.MIN", "ALU.MAX", "ALU.ADD", "ALU.SHR", "ALU.MUL",
                            "LOAD", "STORE")
#: keys of one tensor intrinsic -> (types, human type name, required)
_INTRIN_SCHEMA: dict[str, tuple[tuple[type, ...], str, bool]] = {
    "behaviour": ((str,), "a string like 'C[i, j] += A[i, k] * B[k, j]'", True),
    "extents": ((dict,), "a mapping of loop variable to extent", True),
    "dtypes": ((dict,), "a mapping of operand name to dtype", True),
    "scopes": ((dict,), "a mapping of operand name to memory scope", False),
    "function": ((str,), "a C identifier", True),
    "impl": ((str,), "a C function body template (jinja2)", True),
    "instruction": ((str,), "the accelerator instruction that implements it (GEMM, ALU.<op>, "
                            "LOAD, STORE)", False),
    "llvm_impl": ((str,), "an LLVM IR function body template (jinja2) for the LLVM backend",
                  False),
    "headers": ((list,), "a list of header names", False),
    "cflags": ((list,), "a list of strings", False),
    "cpu_flags": ((list,), "a list of strings", False),
    "description": ((str,), "a string", False),
    "lanes": ((int,), "the number of threads that execute one call together (32: a warp-"
                      "collective GPU operation)", False),
    "qualifier": ((str,), "what precedes the C definition (default 'static inline'; "
                          "a macro from c_helpers for CUDA device functions)", False),
    "types": ((dict,), "a mapping of operand name to the C type of its pointer parameter "
                       "(default: the C type of its dtype)", False),
    "arch_features": ((bool,), "true where the body needs the architecture-specific "
                               "feature set (CUDA sm_90a: wgmma)", False),
    "in_flight": ((int,), "the commit groups a call leaves running (wgmma.wait_group N): its "
                          "products read their operands until retired by a later call or a "
                          "drain (the function called with null operands)", False),
    "swizzle": ((int,), "the shared operand tiles' swizzle the body reads (128: wgmma's "
                        "128-byte swizzle, layout type 1); absent: none", False),
}


def _scalar(node: yaml.Node, path: str, key: str) -> Any:
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_object(node, deep=True)
    except yaml.YAMLError as e:
        raise TargetError(f"{path}:{node.start_mark.line + 1}: key {key!r}: {e}") from None


def _str_list(val: list, path: str, line: int, key: str) -> list[str]:
    for x in val:
        if not isinstance(x, str):
            raise TargetError(f"{path}:{line}: key {key!r} must be a list of strings, got "
                              f"{type(x).__name__} {x!r} in it")
    return list(val)


def _check_dtypes(val: tuple[str, ...], path: str, line: int) -> None:
    from toolchain.graph.ir import DTYPES

    for d in val:
        if d not in DTYPES:
            raise TargetError(f"{path}:{line}: key 'dtypes': {d!r} is not a dtype Kiln knows "
                              f"({', '.join(sorted(DTYPES))})")


def _check_caches(node: yaml.Node, path: str) -> None:
    for k, v in node.value:
        line = k.start_mark.line + 1
        if k.value not in _CACHE_KEYS:
            raise TargetError(f"{path}:{line}: unknown key 'caches.{k.value}'; known keys: "
                              f"{', '.join(_CACHE_KEYS)}")
        val = _scalar(v, path, f"caches.{k.value}")
        if not isinstance(val, int) or isinstance(val, bool) or val <= 0:
            raise TargetError(f"{path}:{line}: key 'caches.{k.value}' must be a positive "
                              f"size in bytes (integer), got {val!r}")


def _check_nested(node: yaml.Node, val: Any, path: str, key: str) -> dict[str, Any]:
    """One accelerator mapping (``gemm:``, ``buffers:`` ...): known sub-keys, each once,
    of the right type (integers >= 0, ``alu.ops`` a list of names)."""
    schema = ACCELERATOR_SCHEMA[key]
    line = node.start_mark.line + 1
    if not isinstance(node, yaml.MappingNode):
        raise TargetError(f"{path}:{line}: '{key}' must be a mapping with keys "
                          f"{', '.join(sorted(schema))}")
    out: dict[str, Any] = {}
    for knode, vnode in node.value:
        sub, kl = knode.value, knode.start_mark.line + 1
        full = f"{key}.{sub}"
        if sub not in schema:
            raise TargetError(f"{path}:{kl}: unknown key '{full}'; allowed here: "
                              f"{', '.join(sorted(schema))}")
        if sub in out:
            raise TargetError(f"{path}:{kl}: key '{full}' appears twice")
        v = _scalar(vnode, path, full)
        typ = schema[sub]
        if not isinstance(v, typ) or (typ is int and isinstance(v, bool)):
            raise TargetError(f"{path}:{kl}: '{full}' must be {typ.__name__}, got "
                              f"{type(v).__name__} {v!r}")
        if isinstance(v, list):
            v = tuple(_str_list(v, path, kl, full))
        out[sub] = v
    return out


def _check_accelerator(values: dict[str, Any], path: str) -> None:
    """Kind ``vta`` needs every accelerator key (after ``extends:``); other kinds none. Its
    intrinsics are accelerator instructions, declared by behaviour."""
    present = [k for k in ACCELERATOR_SCHEMA if values.get(k)]
    if values["kind"] != "vta":
        if present:
            raise TargetError(f"{path}: key {present[0]!r} describes an accelerator; it "
                              f"applies to targets of kind 'vta', not {values['kind']!r}")
        return
    missing = [f"{k}.{s}" for k, sub in ACCELERATOR_SCHEMA.items() for s in sub
               if s not in values.get(k, {})]
    if missing:
        raise TargetError(f"{path}: missing key(s) {', '.join(missing)} (an accelerator "
                          "target describes its GEMM core, buffers, queues, DRAM and ALU)")
    from toolchain.vta.config import ALU_OP_NAMES

    for op in values["alu"]["ops"]:
        if op not in ALU_OP_NAMES:
            raise TargetError(f"{path}: 'alu.ops' has unknown op '{op}'; the ISA defines "
                              f"{', '.join(ALU_OP_NAMES)}")
    for name, spec in values.get("intrinsics", {}).items():
        where = f"{spec.get('source', path)}:{spec.get('line', '?')}: intrinsic {name!r}"
        ins = spec.get("instruction")
        if ins is None:
            raise TargetError(f"{where}: an accelerator intrinsic needs 'instruction' (one of "
                              f"{', '.join(ACCELERATOR_INSTRUCTIONS)})")
        if ins not in ACCELERATOR_INSTRUCTIONS:
            raise TargetError(f"{where}: instruction {ins!r} is not one of "
                              f"{', '.join(ACCELERATOR_INSTRUCTIONS)}")
        if ins.startswith("ALU.") and ins[4:] not in values["alu"]["ops"]:
            inherited = values.get("extends") and spec.get("source", path) != path
            raise TargetError(f"{where}: instruction {ins!r} but 'alu.ops' lists only "
                              f"{', '.join(values['alu']['ops'])}"
                              + (f" (in {path}; a variant without {ins[4:]} drops the "
                                 f"intrinsics that use it: drop_intrinsics: [{name}])"
                                 if inherited else ""))
    _check_gemm_extents(values, path)
    buf = values["buffers"]  # the scopes follow the sizes (also of an extends: variant)
    scopes = {scope: buf[k] for k, scope in ACCELERATOR_SCOPES.items()}
    scopes["vta.out"] = buf["accumulator"] // 4
    values["memory_scopes"] = {**values.get("memory_scopes", {}), **scopes}


#: an accelerator intrinsic's loop variables that name a GEMM core size (targets/vta.yaml)
GEMM_EXTENT_KEYS = {"b": "batch", "o": "block_out", "k": "block_in"}


def _rebase_extents(spec: dict[str, Any], gemm: dict[str, int]) -> dict[str, Any]:
    """An inherited accelerator intrinsic with its ``b``/``o``/``k`` extents set to the
    variant's GEMM core (a variant that changes ``gemm:`` need not copy every intrinsic).

    >>> spec = {"instruction": "ALU.SHR", "extents": {"b": 1, "o": 16}}
    >>> _rebase_extents(spec, {"batch": 2, "block_in": 8, "block_out": 8})["extents"]
    {'b': 2, 'o': 8}
    """
    if "instruction" not in spec or "extents" not in spec:
        return spec
    ext = {v: gemm.get(GEMM_EXTENT_KEYS[v], n) if v in GEMM_EXTENT_KEYS else n
           for v, n in spec["extents"].items()}
    return {**spec, "extents": ext}


def _check_gemm_extents(values: dict[str, Any], path: str) -> None:
    """Every accelerator intrinsic's ``b``, ``o`` and ``k`` extents are the GEMM core's
    BATCH, BLOCK_OUT and BLOCK_IN: a tile of another size would never match a loop of the
    compiler's schedules, and every layer would silently stay on the host."""
    gemm = values["gemm"]
    for name, spec in values.get("intrinsics", {}).items():
        bad = {v: n for v, n in dict(spec.get("extents", {})).items()
               if v in GEMM_EXTENT_KEYS and n != gemm[GEMM_EXTENT_KEYS[v]]}
        if bad:
            where = f"{spec.get('source', path)}:{spec.get('line', '?')}: intrinsic {name!r}"
            want = ", ".join(f"{v}: {gemm[GEMM_EXTENT_KEYS[v]]}" for v in bad)
            have = ", ".join(f"{v}: {n}" for v, n in bad.items())
            sizes = ", ".join(f"{GEMM_EXTENT_KEYS[v]} {gemm[GEMM_EXTENT_KEYS[v]]}"
                              for v in bad)
            raise TargetError(f"{where}: extents {{{have}}} disagree with the GEMM core "
                              f"(gemm: {sizes}); write {{{want}}} (b = batch, o = "
                              "block_out, k = block_in)")


def _check_layout(val: str, path: str, line: int) -> None:
    import re

    if not re.fullmatch(r"nchw|nhwc|nchwc|nchw[1-9][0-9]*c", val.strip().lower()):
        raise TargetError(f"{path}:{line}: key 'layout' = {val!r} is not one of nchw, nhwc, "
                          "nchwc, nchw<b>c (e.g. nchw16c)")


def _check_intrinsics(node: yaml.Node, val: dict, path: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for knode, vnode in node.value:
        name, line = knode.value, knode.start_mark.line + 1
        if not isinstance(vnode, yaml.MappingNode):
            raise TargetError(f"{path}:{line}: intrinsic {name!r} must be a mapping with keys "
                              f"{', '.join(_INTRIN_SCHEMA)}")
        spec: dict[str, Any] = {"line": line}
        for ik, iv in vnode.value:
            key, kl = ik.value, ik.start_mark.line + 1
            where = f"intrinsics.{name}.{key}"
            if key not in _INTRIN_SCHEMA:
                raise TargetError(f"{path}:{kl}: unknown key {where!r}; known keys: "
                                  f"{', '.join(_INTRIN_SCHEMA)}")
            types, tname, _ = _INTRIN_SCHEMA[key]
            v = _scalar(iv, path, where)
            if not isinstance(v, types):
                raise TargetError(f"{path}:{kl}: key {where!r} must be {tname}, got "
                                  f"{type(v).__name__} {v!r}")
            if isinstance(v, list):
                v = tuple(_str_list(v, path, kl, where))
            spec[key] = v
        for key, (_, tname, required) in _INTRIN_SCHEMA.items():
            if key in ("function", "impl") and "instruction" in spec:
                if key in spec:
                    raise TargetError(f"{path}:{line}: intrinsic {name!r} is implemented by "
                                      f"the instruction {spec['instruction']!r}; drop key "
                                      f"{key!r} (C implementations are for C targets)")
                continue
            if required and key not in spec:
                raise TargetError(f"{path}:{line}: intrinsic {name!r} is missing key {key!r} "
                                  f"({tname})")
        out[name] = spec
    return out


#: keys of ``llvm:`` -> (type, human type name)
_LLVM_SCHEMA: dict[str, tuple[type, str]] = {
    "triple": (str, "an LLVM target triple (thumbv7em-unknown-none-eabihf)"),
    "cpu": (str, "an LLVM CPU name (cortex-m4, x86-64-v3)"),
    "features": (list, "a list of LLVM features (+avx2, -avx512f)"),
    "fast_math": (list, "a list of LLVM fast-math flags (contract, reassoc, nnan, ...)"),
    "loop_unroll": (str, "'all' (LLVM's unrollers on every loop) or 'scheduled' (only the "
                         "loops the schedule unrolled)"),
    "opt_level": (int, "the level of LLVM's optimisation pipeline, 3 (O3) or 2 (O2)"),
}


def _check_llvm(val: dict, path: str, line: int) -> dict[str, Any]:
    from toolchain.codegen.llvm_target import FAST_MATH_FLAGS, LOOP_UNROLL, OPT_LEVELS

    out: dict[str, Any] = {}
    for k, v in val.items():
        if k not in _LLVM_SCHEMA:
            raise TargetError(f"{path}:{line}: unknown key 'llvm.{k}'; known keys: "
                              f"{', '.join(_LLVM_SCHEMA)}")
        typ, tname = _LLVM_SCHEMA[k]
        if not isinstance(v, typ):
            raise TargetError(f"{path}:{line}: key 'llvm.{k}' must be {tname}, got {v!r}")
        if isinstance(v, list):
            v = tuple(_str_list(v, path, line, f"llvm.{k}"))
        if k == "fast_math":
            bad = [f for f in v if f not in FAST_MATH_FLAGS]
            if bad:
                raise TargetError(f"{path}:{line}: key 'llvm.fast_math': {bad} are not LLVM "
                                  f"fast-math flags ({', '.join(FAST_MATH_FLAGS)})")
        if k == "opt_level" and (isinstance(v, bool) or v not in OPT_LEVELS):
            raise TargetError(f"{path}:{line}: key 'llvm.opt_level' must be one of "
                              f"{', '.join(map(str, OPT_LEVELS))}, got {v!r}")
        if k == "loop_unroll" and v not in LOOP_UNROLL:
            raise TargetError(f"{path}:{line}: key 'llvm.loop_unroll' must be one of "
                              f"{', '.join(LOOP_UNROLL)}, got {v!r}")
        out[k] = v
    return out


#: keys of one ``llvm_helpers`` entry -> (type, human type name)
_LLVM_HELPER_SCHEMA: dict[str, tuple[type, str]] = {
    "returns": (str, "an LLVM type (i32)"),
    "params": (list, "a list of LLVM parameters ('i32 %acc')"),
    "body": (str, "LLVM IR instructions ending in ret"),
}


def _check_llvm_helpers(node: yaml.Node, path: str) -> dict[str, dict[str, Any]]:
    """``llvm_helpers``: C function name -> ``{returns, params, body}``, all keys required."""
    out: dict[str, dict[str, Any]] = {}
    for knode, vnode in node.value:
        name, line = str(knode.value), knode.start_mark.line + 1
        where = f"llvm_helpers.{name}"
        if not name.isidentifier():
            raise TargetError(f"{path}:{line}: key {where!r}: {name!r} is not a C identifier")
        val = _scalar(vnode, path, where)
        if not isinstance(val, dict):
            raise TargetError(f"{path}:{line}: key {where!r} must be a mapping with keys "
                              f"{', '.join(_LLVM_HELPER_SCHEMA)}")
        for k, v in val.items():
            if k not in _LLVM_HELPER_SCHEMA:
                raise TargetError(f"{path}:{line}: unknown key '{where}.{k}'; known keys: "
                                  f"{', '.join(_LLVM_HELPER_SCHEMA)}")
            typ, tname = _LLVM_HELPER_SCHEMA[k]
            if not isinstance(v, typ):
                raise TargetError(f"{path}:{line}: key '{where}.{k}' must be {tname}, got "
                                  f"{type(v).__name__} {v!r}")
        missing = [k for k in _LLVM_HELPER_SCHEMA if k not in val]
        if missing:
            raise TargetError(f"{path}:{line}: key {where!r} is missing {', '.join(missing)}")
        out[name] = {"returns": val["returns"],
                     "params": tuple(_str_list(val["params"], path, line, f"{where}.params")),
                     "body": val["body"], "line": line}
    return out


def host_cpu_flags() -> frozenset[str]:
    """The CPU feature flags of this machine (``/proc/cpuinfo``; empty when unreadable).

    >>> isinstance(host_cpu_flags(), frozenset)
    True
    """
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


#: the ``compiler`` values that mean this host's own C compiler (anything else is a cross
#: compiler: the code runs on a board, with no operating system's threads)
HOST_COMPILERS = (None, "cc", "gcc", "clang")


#: C library -> the flags that give ``arm-none-eabi-gcc`` its headers and start-up (a board's
#: ``libc``, toolchain.boards; the default ``CFLAGS`` of a bare-metal bundle's Makefile)
LIBC_FLAGS: dict[str, tuple[str, ...]] = {"picolibc": ("--specs=picolibc.specs",)}
#: the C library of a board that names none, and of a bare-metal bundle built with no board
DEFAULT_LIBC = "picolibc"


def bare_metal(compiler: str | None) -> bool:
    """Whether code built by ``compiler`` (a target's ``compiler`` key) runs with no
    operating system: a cross compiler other than a Linux one (``aarch64-linux-gnu-gcc``
    builds programs that run under Linux or qemu-user). A bare-metal bundle's demo
    ``main`` (stdio, a clock, files) does not link there: its Makefile builds the library.

    >>> bare_metal("arm-none-eabi-gcc"), bare_metal("aarch64-linux-gnu-gcc"), bare_metal(None)
    (True, False, False)
    """
    if compiler in HOST_COMPILERS:
        return False
    return not str(compiler).removesuffix("-gcc").endswith("-linux-gnu")


def runs_here(target: Target) -> bool:
    """Whether code for ``target`` runs on this machine (its ``cpu_flags`` are present and
    its compiler is the host's).

    >>> runs_here(load_target("c-generic"))
    True
    """
    if target.kind != "c" or target.compiler not in HOST_COMPILERS:
        return False
    return set(target.cpu_flags) <= host_cpu_flags()


def host_target() -> Target:
    """The widest shipped CPU descriptor this machine runs, with all its cores.

    >>> host_target().kind
    'c'
    """
    import os
    from dataclasses import replace

    for name in ("x86_64-avx512", "x86_64-avx2", "c-generic"):
        t = load_target(name)
        if runs_here(t):
            return replace(t, cores=os.cpu_count() or 1)
    return load_target("c-generic")


@functools.lru_cache(maxsize=64)
def _checked_values(text: str, path: str) -> dict[str, Any]:
    """The validated value of every key a descriptor's text sets, before ``extends:`` is
    applied: remembered per text and path (every compile resolves its target, and
    constructing and checking the shipped descriptors' values took 7 ms of each). The
    inherited part is applied again on each parse, so an edited base is read again."""
    try:
        root = _compose(text)
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
        elif key in ("cflags", "dtypes", "cpu_flags", "keys", "c_helpers_headers"):
            val = tuple(_str_list(val, path, line, key))
            if key == "dtypes":
                _check_dtypes(val, path, line)
        elif key == "caches":
            _check_caches(vnode, path)
        elif key == "layout":
            _check_layout(val, path, line)
        elif key == "intrinsics":
            val = _check_intrinsics(vnode, val, path)
        elif key == "llvm":
            val = _check_llvm(val, path, line)
        elif key == "llvm_helpers":
            val = _check_llvm_helpers(vnode, path)
        elif key in ACCELERATOR_SCHEMA:
            val = _check_nested(vnode, val, path, key)
        values[key] = val
    return values


def parse_target(text: str, path: str = "<string>") -> Target:
    """Parse and validate a target descriptor from YAML text."""
    values = dict(_checked_values(text, path))  # the cached dict is never changed
    renames = values.pop("rename_functions", None)
    drops = values.pop("drop_intrinsics", None)
    if "extends" in values:
        values = _inherit(values, renames or {}, path, drops or ())
    else:
        for key, given in (("rename_functions", renames), ("drop_intrinsics", drops)):
            if given is not None:
                raise TargetError(f"{path}: key {key!r} applies to the intrinsics of an "
                                  "extended target: add 'extends: <target>'")
    for key, (_, tname, required) in _SCHEMA.items():
        if required and key not in values and key not in ("extends", "rename_functions",
                                                          "drop_intrinsics"):
            raise TargetError(f"{path}: missing required key {key!r} ({tname})")
    if values["kind"] not in KINDS:
        raise TargetError(f"{path}: kind {values['kind']!r} is not one of {', '.join(KINDS)}")
    _check_accelerator(values, path)
    return Target(**values, source=path)


#: descriptors being parsed for an ``extends:`` (a cycle is an error, not a recursion)
_EXTENDING: set[str] = set()


def _inherit(values: dict[str, Any], renames: dict[str, str], path: str,
             drops: Sequence[str] = ()) -> dict[str, Any]:
    """``values`` on top of the target named by ``values["extends"]``: every key the
    descriptor does not set comes from that target (except its name and description);
    intrinsics are merged by name, the inherited ones with their C function names renamed
    by ``renames`` (prefix -> prefix), so two descriptors' functions never collide, and
    those matching a pattern of ``drops`` left out (the schedules then take the path that
    needs no such intrinsic: a capability the variant does not have).

    >>> t = parse_target("{name: m, kind: c, extends: cortex-m4, "
    ...                  "rename_functions: {kiln_m4_: kiln_mx_}, "
    ...                  "drop_intrinsics: ['dot_q15q15_*']}")
    >>> t.cflags == load_target("cortex-m4").cflags, t.intrinsics["dot_q15q7_4x4"]["function"]
    (True, 'kiln_mx_dot_q15q7_4x4')
    >>> wide = "dot_q15q15_2x2x16"
    >>> t.has_intrinsic(wide), load_target("cortex-m4").has_intrinsic(wide)
    (False, True)
    """
    base_name = values["extends"]
    for old, new in renames.items():
        if not (isinstance(old, str) and isinstance(new, str) and new.isidentifier()):
            raise TargetError(f"{path}: rename_functions entry {old!r}: {new!r} must map a "
                              "function-name prefix to a C identifier prefix")
    if base_name in _EXTENDING or base_name == values.get("name"):
        raise TargetError(f"{path}: 'extends: {base_name}' makes a cycle of targets extending "
                          "each other")
    _EXTENDING.add(base_name)
    try:
        base = load_target(base_name)
    except TargetError as e:
        raise TargetError(f"{path}: key 'extends': {e}") from None
    finally:
        _EXTENDING.discard(base_name)
    merged = {f.name: getattr(base, f.name) for f in fields(Target)
              if f.name not in ("name", "description", "source", "extends")}
    for pattern in drops:
        if not isinstance(pattern, str):
            raise TargetError(f"{path}: drop_intrinsics entry {pattern!r} must be an "
                              "intrinsic name or a shell pattern (a string)")
        if not any(fnmatch.fnmatchcase(n, pattern) for n in base.intrinsics):
            raise TargetError(f"{path}: drop_intrinsics entry {pattern!r} matches no intrinsic "
                              f"of {base_name!r}; it declares: {', '.join(base.intrinsics)}")
    intrinsics: dict[str, dict[str, Any]] = {}
    for name, spec in base.intrinsics.items():
        if any(fnmatch.fnmatchcase(name, p) for p in drops):
            continue
        fn = spec.get("function")
        if fn is None:  # an accelerator instruction: nothing to rename
            intrinsics[name] = {"source": spec.get("source", base.source), **spec}
            continue
        for old, new in renames.items():
            if fn.startswith(old):
                fn = new + fn[len(old):]
                break
        intrinsics[name] = {"source": spec.get("source", base.source), **spec, "function": fn}
    for key in ACCELERATOR_SCHEMA:  # a variant may change single sizes (buffers.input)
        if key in values:
            values[key] = {**merged.get(key, {}), **values[key]}
    if "gemm" in values:  # inherited accelerator intrinsics follow the variant's GEMM core
        intrinsics = {name: _rebase_extents(spec, values["gemm"])
                      for name, spec in intrinsics.items()}
    intrinsics.update(values.get("intrinsics", {}))
    merged.update(values)
    merged["intrinsics"] = intrinsics
    return merged


def resolve_target(target: str | Path | Target | None) -> Target:
    """The one place a target is resolved: a :class:`Target` as it is, None as
    ``c-generic``, ``"host"``/``"native"`` as :func:`host_target`, otherwise a shipped name
    or a YAML path (:func:`load_target`). Entry points (``compile``, ``build``,
    ``compile_op``, the CLI) call it once and hand the Target down.

    >>> t = resolve_target("x86_64-avx2"); resolve_target(t) is t
    True
    >>> resolve_target(None).name
    'c-generic'
    """
    if isinstance(target, Target):
        return target
    if target is None:
        return load_target("c-generic")
    if not isinstance(target, (str, Path)):
        raise TargetError(f"target {target!r}: expected a target name, a YAML file path or a "
                          f"Target, not {type(target).__name__}")
    if str(target) in ("host", "native"):
        return host_target()
    return load_target(target)


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


@functools.lru_cache(maxsize=64)
def _compose(text: str) -> yaml.Node:
    """The YAML node tree of a descriptor's text, remembered by the text (nothing here
    changes a node): every compile resolves its target, and composing the shipped
    descriptors' YAML took 40 ms of each. An edited file has another text."""
    return yaml.compose(text)

