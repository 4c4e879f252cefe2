"""The LLVM bodies of the shipped targets' tensor intrinsics (``llvm_impl``) and C helpers
(``llvm_helpers``): each renders, LLVM verifies it, and the code for the target's triple
holds the instructions it is there for. Whether they compute the C integers is checked by
running kernels (tests/schedules/x86/test_int8.py through both backends) and int8 bundles
on QEMU (tests/boards/test_llvm_qemu.py)."""

from __future__ import annotations

import pytest

from toolchain.codegen.llvm_target import machine_for, optimize
from toolchain.errors import TargetError
from toolchain.intrinsics import (
    get_spec,
    llvm_definition,
    llvm_helper_definition,
    load_intrinsics,
)
from toolchain.target import load_target, parse_target

#: shipped CPU targets whose kernels LLVM compiles
TARGETS = ["c-generic", "x86_64-avx2", "x86_64-avx512", "cortex-m4", "cortex-m7",
           "aarch64-neon"]
#: (target, intrinsic-name prefix) -> an instruction the body must produce
EXPECTED = {
    ("x86_64-avx512", "dot_i16"): "vpdpwssd",
    ("x86_64-avx512", "dot_u8i8"): "vpdpbusd",
    ("x86_64-avx512", "dot_u8s8"): "vpdpbusd",
    ("x86_64-avx512", "narrow_i32"): "vpmovdb",
    ("x86_64-avx2", "dot_i16"): "vpmaddwd",
    ("x86_64-avx2", "dot_u8i8"): "vpmaddubsw",
    ("cortex-m4", "dot_"): "smlad",
    ("cortex-m4", "dwconv"): "smlad",
    ("cortex-m7", "dot_"): "smlad",
    ("cortex-m4", "smlad"): "smlad",
    ("x86_64-avx512", "fma_f32_8x32"): "vfmadd231ps",
    ("x86_64-avx512", "fma_f32_6x16"): "zmm",
    ("x86_64-avx2", "fma_f32_6x16"): "vfmadd231ps",
    # the NCHW write-back's in-register transposes: two-source lane permutes
    ("x86_64-avx512", "unblock"): "vperm",
    ("x86_64-avx2", "unblock"): "ymm",
}


def _contiguous_env(spec) -> dict[str, object]:
    """Template variables for operands laid out as their contiguous tiles."""
    env: dict[str, object] = {f"ext_{k}": v for k, v in spec.extents.items()}
    for name, tile in zip(spec.operands, spec.tiles, strict=True):
        stride = 1
        for d in range(len(tile) - 1, -1, -1):
            env[f"{name}_s{d}"] = stride
            stride *= tile[d]
        env[name] = name
    return env


def _impls(target: str) -> list[str]:
    return [n for n in load_intrinsics(target) if get_spec(n).llvm_template]


@pytest.mark.parametrize("target", TARGETS)
def test_every_intrinsic_has_an_llvm_body(target: str) -> None:
    """No shipped CPU intrinsic is C-only: int8 and fp32 kernels all build through LLVM."""
    names = load_intrinsics(target)
    missing = [n for n in names if not get_spec(n).llvm_template]
    assert names and not missing, missing


@pytest.mark.parametrize("target", TARGETS)
def test_llvm_impls_verify_and_select_their_instructions(target: str) -> None:
    for name in _impls(target):
        spec = get_spec(name)
        d = llvm_definition(spec, "kiln_f", _contiguous_env(spec))
        asm = _call_asm(target, d.text, len(spec.operands))
        short = name.split(".", 1)[1]
        for (t, prefix), insn in EXPECTED.items():
            if t == target and short.startswith(prefix):
                assert insn in asm, f"{name}: no {insn} in\n{asm}"


def _call_asm(target: str, definition: str, n: int) -> str:
    params = ", ".join(f"ptr %p{k}" for k in range(n))
    wrapper = (f"declare i32 @kiln_f({', '.join(['ptr'] * n)})\n"
               f"define i32 @kernel({params}) {{\n"
               f"  %r = call i32 @kiln_f({params})\n  ret i32 %r\n}}\n")
    mod, tm = optimize(wrapper, machine_for(load_target(target)), extra=[definition])
    return tm.emit_assembly(mod)


@pytest.mark.parametrize("target", ["c-generic", "cortex-m4"])
def test_llvm_helpers_verify(target: str) -> None:
    """Each C helper the int8 kernels call has an LLVM version that LLVM accepts."""
    t = load_target(target)
    assert t.llvm_helpers
    for name, helper in t.llvm_helpers.items():
        d = llvm_helper_definition(name, helper)
        params = ", ".join(p.split()[0] for p in helper["params"])
        args = ", ".join(helper["params"])
        wrapper = (f"declare {helper['returns']} @{name}({params})\n"
                   f"define {helper['returns']} @kernel({args}) {{\n"
                   f"  %r = call {helper['returns']} @{name}({args})\n"
                   f"  ret {helper['returns']} %r\n}}\n")
        mod, tm = optimize(wrapper, machine_for(t), extra=[d.text])
        asm = tm.emit_assembly(mod)
        if name == "kiln_ssat8":
            assert "ssat" in asm


@pytest.mark.parametrize("text, needle", [
    ("llvm_helpers: {f: {returns: i32, params: ['i32 %x']}}", "missing body"),
    ("llvm_helpers: {f: {returns: i32, params: ['i32 %x'], body: x, colour: red}}",
     "unknown key 'llvm_helpers.f.colour'"),
    ("llvm_helpers: {f: {returns: i32, params: 'i32 %x', body: x}}",
     "'llvm_helpers.f.params' must be a list"),
    ("llvm_helpers: {2f: {returns: i32, params: [], body: x}}", "not a C identifier"),
])
def test_llvm_helpers_are_validated(text: str, needle: str) -> None:
    with pytest.raises(TargetError, match=needle):
        parse_target(f"name: h\nkind: c\n{text}\n", "h.yaml")
