"""Target descriptors: the shipped files load, and every schema error names file, key, line."""

from __future__ import annotations

import textwrap
from dataclasses import replace

import pytest

from toolchain.errors import TargetError
from toolchain.target import host_cpu_flags, host_target, load_target, parse_target, runs_here

CPU_TARGETS = ("c-generic", "x86_64-avx2", "x86_64-avx512", "cortex-m4", "cortex-m7")


@pytest.mark.parametrize("name", CPU_TARGETS)
def test_shipped_cpu_descriptors_load(name: str) -> None:
    t = load_target(name)
    assert t.name == name and t.kind == "c"
    assert t.vector_width_bits and t.cores == 1 and t.dtypes
    assert t.intrinsics, f"{name} declares no tensor intrinsic"
    for spec in t.intrinsics.values():
        assert {"behaviour", "extents", "dtypes", "function", "impl"} <= set(spec)


def test_x86_descriptors_facts() -> None:
    avx2, avx512 = load_target("x86_64-avx2"), load_target("x86_64-avx512")
    assert (avx2.vector_width_bits, avx512.vector_width_bits) == (256, 512)
    assert avx512.caches["l2"] > avx512.caches["l1d"] > 0
    assert avx2.layout == "nchw8c" and avx512.layout == "nchw16c"
    assert "fma_f32_6x16" in avx2.intrinsics and "fma_f32_6x16" in avx512.intrinsics
    assert "dot_u8i8_16x4" in avx512.intrinsics and "dot_u8i8_8x4" in avx2.intrinsics
    assert avx512.intrinsics["dot_u8i8_16x4"]["cflags"] == ("-mavx512vnni",)
    m4 = load_target("cortex-m4")
    assert m4.compiler == "arm-none-eabi-gcc" and "-mthumb" in m4.cflags
    assert m4.layout == "nhwc" and "smlad_i16_4x2" in m4.intrinsics


def test_cortex_m_descriptors_declare_the_dsp_intrinsics() -> None:
    m4, m7 = load_target("cortex-m4"), load_target("cortex-m7")
    assert "-mcpu=cortex-m7" in m7.cflags and "-mfpu=fpv5-sp-d16" in m7.cflags
    assert "-mcpu=cortex-m4" in m4.cflags and "-mfpu=fpv4-sp-d16" in m4.cflags
    assert m7.caches == {"l1d": 4096} and not m4.caches
    for t in (m4, m7):
        assert {"dot_q15q7_4x4", "dot_q15q7_4x8", "dot_q15q7_1x4", "dwconv_q15q7_1x4",
                "dot_s8s8_4x4", "dot_s8s8_4x8", "dot_s8s8_1x4"} <= set(t.intrinsics)
        # ACLE where the compiler has the DSP extension, portable C with the same integers
        # elsewhere; SXTB16 (both forms), SMLAD and SSAT/USAT
        h = t.c_helpers
        assert "#if defined(__ARM_FEATURE_DSP)" in h and "#include <arm_acle.h>" in h
        for needle in ("__sxtb16(", "sxtb16 %0, %1, ror #8", "__smlad(", "__ssat(", "__usat(",
                       "static inline int32_t kiln_smlad(int32_t a", "kiln_cm_requantize"):
            assert needle in h, needle
        assert "\n\n" not in h.strip()
    fns = {s["function"] for s in m7.intrinsics.values()}
    assert all(f.startswith("kiln_m7_") for f in fns)


def test_c_helpers_must_be_text() -> None:
    assert "key 'c_helpers' must be C text" in _err("""\
        name: t
        kind: c
        c_helpers: [1, 2]
        """)


def test_layout_key_reaches_the_layout_pass() -> None:
    from toolchain.graph.passes.layout import layout_for_target

    assert layout_for_target(load_target("x86_64-avx512")).block == 16
    assert layout_for_target(load_target("cortex-m4")).kind == "nhwc"


def test_host_target_runs_here() -> None:
    t = host_target()
    assert runs_here(t) and t.cores >= 1
    assert runs_here(load_target("c-generic"))
    assert not runs_here(load_target("cortex-m4"))  # a cross compiler
    if "avx512f" not in host_cpu_flags():
        assert not runs_here(load_target("x86_64-avx512"))


def _err(text: str) -> str:
    with pytest.raises(TargetError) as ei:
        parse_target(textwrap.dedent(text), "t.yaml")
    return str(ei.value)


BASE = "name: t\nkind: c\n"


@pytest.mark.parametrize("text, needles", [
    (BASE + "vector_widht_bits: 128\n", ["t.yaml:3", "unknown key 'vector_widht_bits'",
                                          "known keys"]),
    (BASE + "cores: two\n", ["t.yaml:3", "'cores' must be an integer", "str 'two'"]),
    (BASE + "cores: 0\n", ["t.yaml:3", "'cores' must be positive"]),
    (BASE + "cflags: [-O2, 3]\n", ["t.yaml:3", "'cflags' must be a list of strings", "3"]),
    (BASE + "cflags: -O2\n", ["t.yaml:3", "'cflags' must be a list of strings"]),
    (BASE + "dtypes: [float32, float128]\n", ["t.yaml:3", "'float128' is not a dtype"]),
    (BASE + "layout: nchw4\n", ["t.yaml:3", "'layout' = 'nchw4'"]),
    (BASE + "caches:\n  l1d: 32768\n  l4: 1\n", ["t.yaml:5", "unknown key 'caches.l4'"]),
    (BASE + "caches:\n  l2: -1\n", ["t.yaml:4", "'caches.l2' must be a positive size"]),
    (BASE + "intrinsics:\n  f:\n    behaviour: C[i] += A[i, k]\n    extents: {i: 4, k: 2}\n"
            "    dtypes: {A: float32, C: float32}\n    function: f\n    impl: x\n"
            "    colour: red\n", ["t.yaml:10", "unknown key 'intrinsics.f.colour'"]),
    (BASE + "intrinsics:\n  f:\n    behaviour: C[i] += A[i, k]\n    extents: [4]\n",
     ["t.yaml:6", "'intrinsics.f.extents' must be a mapping"]),
    (BASE + "intrinsics:\n  f:\n    behaviour: C[i] += A[i, k]\n",
     ["t.yaml:4", "intrinsic 'f' is missing key 'extents'"]),
    (BASE + "intrinsics:\n  f: 3\n", ["t.yaml:4", "intrinsic 'f' must be a mapping"]),
])
def test_schema_errors_name_file_key_and_line(text: str, needles: list[str]) -> None:
    msg = _err(text)
    for n in needles:
        assert n in msg, (n, msg)


def test_errors_in_a_descriptor_file_name_the_file(tmp_path) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text(BASE + "vector_registers: many\n")
    with pytest.raises(TargetError, match=r"bad\.yaml:3: key 'vector_registers' must be an "
                                          r"integer"):
        load_target(p)


def test_target_is_extendable_with_replace() -> None:
    t = replace(load_target("x86_64-avx2"), cores=4)
    assert t.cores == 4 and t.name == "x86_64-avx2"


def test_extends_takes_the_base_target_and_renames_its_functions() -> None:
    m4, m7 = load_target("cortex-m4"), load_target("cortex-m7")
    assert m7.extends == "cortex-m4" and m7.c_helpers == m4.c_helpers
    assert m7.layout == m4.layout and m7.compiler == m4.compiler
    assert set(m7.intrinsics) == set(m4.intrinsics)
    for name, spec in m4.intrinsics.items():
        assert m7.intrinsics[name]["impl"] == spec["impl"]
        assert m7.intrinsics[name]["function"] == spec["function"].replace("kiln_m4_", "kiln_m7_")


def test_extends_can_leave_intrinsics_out() -> None:
    """A variant without the widened-weight dots (a flash-tight board's): every other
    intrinsic of the base, none matching the patterns."""
    t = parse_target("{name: m4-compact, kind: c, extends: cortex-m4, "
                     "drop_intrinsics: ['dot_q15q15_*']}")
    m4 = load_target("cortex-m4")
    dropped = {n for n in m4.intrinsics if n.startswith("dot_q15q15_")}
    assert dropped and set(t.intrinsics) == set(m4.intrinsics) - dropped


def test_bad_extends_is_named() -> None:
    assert "key 'extends': unknown target 'nope'" in _err("""\
        name: t
        kind: c
        extends: nope
        """)
    assert "'rename_functions' applies to the intrinsics of an extended target" in _err("""\
        name: t
        kind: c
        rename_functions: {a_: b_}
        """)
    assert "'drop_intrinsics' applies to the intrinsics of an extended target" in _err("""\
        name: t
        kind: c
        drop_intrinsics: [dot_*]
        """)
    assert "drop_intrinsics entry 'dot_q31_*' matches no intrinsic of 'cortex-m4'" in _err("""\
        name: t
        kind: c
        extends: cortex-m4
        drop_intrinsics: [dot_q31_*]
        """)
    assert "makes a cycle" in _err("""\
        name: cortex-m4
        kind: c
        extends: cortex-m4
        """)
    assert "must map a function-name prefix to a C identifier prefix" in _err("""\
        name: t
        kind: c
        extends: cortex-m4
        rename_functions: {kiln_m4_: "not an id"}
        """)
