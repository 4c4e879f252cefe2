"""How a bundle stores its weights (``kiln compile --weights``, docs/bundle.md "Weights"):

* ``incbin`` (default), ``c-array`` and ``external`` bundles build with the strict flags and
  give byte-identical outputs, through ``make`` + ``main`` and through the host library;
* ``weights.bin`` is the arrays' bytes at 64-byte aligned offsets, zero padding only;
  ``weights_blob.S`` holds no weight byte;
* external weights: a wrong size, a corrupted file, a misaligned pointer and a run before
  ``<m>_set_weights`` are refused with their own KILN_ERR_* codes and messages; the size
  threshold of ``auto`` is a module constant (lowered here for a small model);
* CMake builds the incbin and external bundles from another directory;
* ``KILN_WEIGHTS_SECTION`` / ``KILN_ARENA_SECTION`` put the blob and the arena in named
  sections (host objects via readelf; the nucleo-l4r5zi firmware's link map);
  ``KILN_WEIGHTS_ALIGN`` and ``KILN_ARENA_ALIGN`` below the bundle's 64 stop the build;
* the weights are written by a streaming writer, and a failure there leaves nothing.
"""

from __future__ import annotations

import ctypes
import json
import shutil
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from tests.bundle.helpers import STRICT, make, make_model, random_inputs, run_main
from tests.tools import needs, require
from toolchain.bundle import compile_model, load_bundle
from toolchain.errors import InputError

F = np.float32
STRICT_CFLAGS = "-O1 -std=c99 " + " ".join(STRICT)
MODES = ("incbin", "c-array", "external")


def _ccache_cc() -> tuple[str, ...]:
    """``make``'s ``CC`` through ``ccache`` where it is installed: the three modes' bundles
    (and the section-macro rebuilds) compile the same ``kernels.c``, model file and runtime
    with the same flags, so each is compiled once; each mode's weights, its ``main.c``
    where it differs, and every link still run."""
    ccache = shutil.which("ccache")
    return (f"CC={ccache} cc",) if ccache else ()


def _net():
    """conv + relu + dense: weights of several sizes (padding between them) and an int
    shape constant."""
    rng = np.random.default_rng(3)
    inits = {"w": (rng.standard_normal((5, 3, 3, 3)) * 0.3).astype(F),
             "b": rng.standard_normal(5).astype(F),
             "shape": np.array([1, -1], np.int64),
             "d": (rng.standard_normal((7, 5 * 6 * 6)) * 0.1).astype(F)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Reshape", ["r", "shape"], ["f"]),
             helper.make_node("Gemm", ["f", "d"], ["y"], transB=1)]
    return make_model(nodes, {"x": (F, [1, 3, 8, 8])}, {"y": (F, [1, 7])}, inits)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("weights")
    return {m: compile_model(_net(), "c-generic", root / m, name="net", weights=m,
                             progress=False) for m in MODES}


def _meta(path: Path) -> dict:
    return json.loads((path / "metadata.json").read_text())


def test_modes_build_strict_and_agree_byte_for_byte(bundles):
    inputs = random_inputs(_net(), seed=4)
    outs, libs = {}, {}
    for mode, path in bundles.items():  # the same flags give the same bits in every mode
        make(path, *_ccache_cc(), cflags=STRICT_CFLAGS)
        outs[mode] = run_main(path, inputs, _meta(path))["y"].tobytes()
        libs[mode] = load_bundle(path, extra_flags=STRICT)(inputs)["y"].tobytes()
    assert outs["incbin"] == outs["c-array"] == outs["external"]
    assert libs["incbin"] == libs["c-array"] == libs["external"]
    files = {m: sorted(str(p.relative_to(bundles[m] / "src")) for p in
                       (bundles[m] / "src").iterdir() if p.suffix != ".o") for m in MODES}
    assert files["incbin"] == ["kernels.c", "kernels.h", "net.c", "weights.bin",
                               "weights.h", "weights_blob.S"]
    assert files["c-array"] == ["kernels.c", "kernels.h", "net.c", "weights.c", "weights.h"]
    assert files["external"] == ["kernels.c", "kernels.h", "net.c", "weights.bin", "weights.c",
                                 "weights.h"]
    for m in MODES:
        assert _meta(bundles[m])["options"]["weights"] == m
        assert _meta(bundles[m])["weights_storage"]["mode"] == m


def test_weights_bin_is_the_arrays_at_aligned_offsets(bundles):
    path = bundles["incbin"]
    meta = _meta(path)
    blob = (path / "src" / "weights.bin").read_bytes()
    store = meta["weights_storage"]
    assert store["bytes"] == len(blob) and store["crc32"] == f"0x{zlib.crc32(blob):08x}"
    assert (path / "src" / "weights.bin").read_bytes() == \
        (bundles["external"] / "src" / "weights.bin").read_bytes()
    end, padding = 0, 0
    for w in meta["weights"]:
        assert w["offset"] % 64 == 0 and w["offset"] >= end
        assert blob[end:w["offset"]] == bytes(w["offset"] - end)  # only zero padding
        padding += w["offset"] - end
        end = w["offset"] + w["bytes"]
    assert end == len(blob) and len(blob) == meta["weight_bytes"] + padding
    assert padding < 64 * len(meta["weights"])
    # the stub names the file; no weight byte is in any source the compiler parses
    stub = (path / "src" / "weights_blob.S").read_text()
    assert ".incbin KILN_WEIGHTS_FILE" in stub and len(stub) < 4000
    text = sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and
               p.name != "weights.bin")
    assert (path / "src" / "weights.c").exists() is False and text < 200_000
    # the c-array form holds the same blob (its struct is the blob's size)
    c_text = (bundles["c-array"] / "src" / "weights.c").read_text()
    assert "KILN_WEIGHTS_PLACE" in c_text


def _net_lib(path: Path):
    lib = load_bundle(path)
    set_w = lib._lib.net_set_weights
    set_w.restype, set_w.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t]
    return lib, set_w


def test_external_weights_refuse_wrong_size_corruption_misalignment(bundles, tmp_path):
    path = bundles["external"]
    header = (path / "include" / "net.h").read_text()
    blob = (path / "src" / "weights.bin").read_bytes()
    assert f"#define NET_WEIGHTS_BYTES {len(blob)}u" in header
    assert f"#define NET_WEIGHTS_CRC32 0x{zlib.crc32(blob):08x}u" in header
    assert "#define NET_WEIGHTS_ALIGN 64u" in header and "net_set_weights(" in header
    lib, set_w = _net_lib(path)
    inputs = random_inputs(_net(), seed=5)
    good = lib(inputs)["y"]
    buf = np.zeros(len(blob) + 128, np.uint8)
    base = buf.ctypes.data + (-buf.ctypes.data) % 64
    ctypes.memmove(base, blob, len(blob))
    assert set_w(base, len(blob) - 1) == 5  # KILN_ERR_WEIGHTS_SIZE
    assert set_w(base + 4, len(blob)) == 6  # KILN_ERR_WEIGHTS_ALIGNMENT
    assert set_w(None, len(blob)) == 1
    # a refused set leaves no weights: run says so
    x = np.ascontiguousarray(inputs["x"])
    y = np.zeros((1, 7), F)
    cin = (ctypes.c_void_p * 1)(x.ctypes.data)
    cout = (ctypes.c_void_p * 1)(y.ctypes.data)
    assert lib._fn(cin, cout, lib.arena.ctypes.data) == 4  # KILN_ERR_WEIGHTS_MISSING
    ctypes.memset(base + len(blob) // 2, 0x5A, 1)  # one byte changed
    assert set_w(base, len(blob)) == 7  # KILN_ERR_WEIGHTS_CHECKSUM
    strerror = lib._lib.kiln_strerror
    strerror.restype = ctypes.c_char_p
    assert b"CRC-32" in strerror(7) and b"set_weights" in strerror(4)
    # the same file again: accepted, the same outputs
    lib.set_weights(path / "src" / "weights.bin")
    assert lib(inputs)["y"].tobytes() == good.tobytes()
    bad = tmp_path / "bad.bin"
    bad.write_bytes(blob[:-1] + bytes([blob[-1] ^ 1]))
    with pytest.raises(InputError, match=r"net_set_weights\(.*bad.bin\) returned 7 "
                                         r"\(the weights' CRC-32 differs"):
        lib.set_weights(bad)
    lib.set_weights(path / "src" / "weights.bin")


def test_external_demo_loads_the_file_and_names_a_bad_one(bundles, tmp_path):
    path = bundles["external"]
    make(path, *_ccache_cc(), cflags=STRICT_CFLAGS)
    x = tmp_path / "x.bin"
    random_inputs(_net(), seed=6)["x"].tofile(x)
    blob = (path / "src" / "weights.bin").read_bytes()
    cases = {"short.bin": (blob[:-8], 3, "is not"), "bad.bin": (
        blob[:100] + bytes([blob[100] ^ 0xFF]) + blob[101:], 4, "CRC-32")}
    for name, (data, rc, text) in cases.items():
        (tmp_path / name).write_bytes(data)
        res = subprocess.run(["./main", "--weights", str(tmp_path / name), str(x),
                              str(tmp_path / "y.bin")], cwd=path, capture_output=True,
                             text=True, check=False)
        assert res.returncode == rc and text in res.stderr, res.stderr
    res = subprocess.run(["./main", "--repeat", "1", str(x), str(tmp_path / "y.bin")],
                         cwd=path, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr  # default --weights src/weights.bin


def test_a_model_without_weights_runs_with_external_weights(tmp_path):
    """An external-weights bundle of a model with no constants (weights.bin empty) loads:
    the host library and the demo ``main`` both hand ``<m>_set_weights`` an aligned
    address (the host once passed numpy's address of an empty slice: error 6)."""
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": (F, [4])},
                       {"y": (F, [4])}, {})
    path = compile_model(model, "c-generic", tmp_path / "b", name="relu",
                         weights="external", progress=False)
    assert (path / "src" / "weights.bin").stat().st_size == 0
    x = np.array([-1, 2, -3, 4], F)
    mod = load_bundle(path)
    for _ in range(16):  # numpy's heap addresses vary: each call is a new allocation
        mod.set_weights(path / "src" / "weights.bin")
    np.testing.assert_array_equal(mod({"x": x})["y"], [0, 2, 0, 4])
    make(path, cflags=STRICT_CFLAGS)
    x.tofile(tmp_path / "x.bin")
    res = subprocess.run(["./main", "--repeat", "1", str(tmp_path / "x.bin"),
                          str(tmp_path / "y.bin")], cwd=path, capture_output=True, text=True,
                         check=False)
    assert res.returncode == 0, res.stderr
    np.testing.assert_array_equal(np.fromfile(tmp_path / "y.bin", F), [0, 2, 0, 4])


def test_auto_mode_goes_external_above_the_threshold(tmp_path, monkeypatch):
    import toolchain.bundle.weights as weights

    monkeypatch.setattr(weights, "EXTERNAL_THRESHOLD", 1000)
    path = compile_model(_net(), "c-generic", tmp_path / "b", name="net", progress=False)
    meta = _meta(path)
    assert meta["options"]["weights"] == "auto" and meta["weights_storage"]["mode"] == "external"
    inputs = random_inputs(_net(), seed=7)
    ref = load_bundle(compile_model(_net(), "c-generic", tmp_path / "c", name="net",
                                    weights="c-array", progress=False))(inputs)["y"]
    assert load_bundle(path)(inputs)["y"].tobytes() == ref.tobytes()


@pytest.mark.parametrize("mode", ["incbin", "external"])
@needs("cmake", "make")
def test_cmake_builds_from_another_directory(bundles, tmp_path, mode):
    path = bundles[mode]
    build = tmp_path / "cmake-build"
    for cmd in (["cmake", "-S", str(path), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release"],
                ["cmake", "--build", str(build)]):
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        assert res.returncode == 0, res.stdout + res.stderr
    x = tmp_path / "x.bin"
    inputs = random_inputs(_net(), seed=8)
    inputs["x"].tofile(x)
    res = subprocess.run([str(build / "net_main"), str(x), str(tmp_path / "y.bin")],
                         cwd=tmp_path, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr  # external: the default path is the bundle's file
    want = load_bundle(bundles["c-array"])(inputs)["y"]  # other flags: not the same bits
    np.testing.assert_allclose(np.fromfile(tmp_path / "y.bin", F).reshape(1, 7), want,
                               rtol=1e-5, atol=1e-5)


def _sections(obj: Path) -> str:
    return subprocess.run(["readelf", "-S", "-W", str(obj)], capture_output=True, text=True,
                          check=True).stdout


@pytest.mark.parametrize("mode", ["incbin", "c-array"])
@needs("readelf", "make", "nm")
def test_section_macros_place_weights_and_arena(bundles, tmp_path, mode):
    path = bundles[mode]
    subprocess.run(["make", "-s", "-C", str(path), "clean"], check=True)
    make(path, *_ccache_cc(), "CPPFLAGS=-DKILN_WEIGHTS_SECTION=.rodata.kiln_weights "
         "-DKILN_ARENA_SECTION=.bss.kiln_arena -DKILN_WEIGHTS_ALIGN=256",
         cflags=STRICT_CFLAGS)
    weights = _sections(path / "build" / "weights.o")
    line = next(ln for ln in weights.splitlines() if ".rodata.kiln_weights" in ln)
    assert " A " in line and line.split()[-1] == "256"  # read-only data, the alignment asked
    assert ".bss.kiln_arena" in _sections(path / "build" / "main.o")
    syms = subprocess.run(["nm", str(path / "main")], capture_output=True, text=True,
                          check=True).stdout
    assert " R net_weights_blob" in syms or " r net_weights_blob" in syms
    subprocess.run(["make", "-s", "-C", str(path), "clean"], check=True)


@pytest.mark.parametrize("mode", ["incbin", "c-array"])
@needs("cc")
def test_weights_align_below_the_bundles_is_refused(bundles, tmp_path, mode):
    """-DKILN_WEIGHTS_ALIGN below 64 (or not a power of two) stops the weights' compile
    with #error (the arrays sit at 64-byte offsets in the blob: an M4's LDRD faults on a
    blob below 4 bytes); 64 and above compile as before."""
    src = bundles[mode] / "src" / ("weights_blob.S" if mode == "incbin" else "weights.c")

    def cc(align: int) -> subprocess.CompletedProcess:
        return subprocess.run(["cc", "-c", f"-DKILN_WEIGHTS_ALIGN={align}",
                               f"-I{bundles[mode] / 'runtime'}", f"-I{src.parent}",
                               f"-DKILN_WEIGHTS_FILE=\"{src.parent / 'weights.bin'}\"",
                               str(src), "-o", str(tmp_path / f"w{align}.o")],
                              capture_output=True, text=True, check=False)

    for bad in (4, 32, 96):
        res = cc(bad)
        assert res.returncode != 0, bad
        assert "KILN_WEIGHTS_ALIGN must be a power of two of at least 64" in res.stderr
        assert not (tmp_path / f"w{bad}.o").exists()
    for good in (64, 256):
        res = cc(good)
        assert res.returncode == 0, res.stderr


@needs("cc")
def test_arena_align_below_the_bundles_is_refused(bundles, tmp_path):
    """-DKILN_ARENA_ALIGN below <MODEL>_ARENA_ALIGN (64) or not a power of two stops the
    compile of the demo main.c and of a board's firmware main.c with #error (net_run would
    refuse such an arena at run time, or not, where it happens to land aligned); 64 and
    above compile."""
    from toolchain.boards.descriptor import load_board
    from toolchain.boards.project import firmware_files

    path = bundles["incbin"]
    firmware = tmp_path / "firmware_main.c"
    firmware.write_text(firmware_files(_meta(path), load_board("qemu-mps2-an386"))[
        "firmware/main.c"])

    def cc(src: Path, align: int) -> subprocess.CompletedProcess:
        return subprocess.run(["cc", "-fsyntax-only", "-std=c99", f"-DKILN_ARENA_ALIGN={align}",
                               f"-I{path / 'include'}", f"-I{path / 'runtime'}", str(src)],
                              capture_output=True, text=True, check=False)

    for src in (path / "main.c", firmware):
        for bad in (4, 32, 96):
            res = cc(src, bad)
            assert res.returncode != 0, (src.name, bad)
            assert "KILN_ARENA_ALIGN must be a power of two of at least NET_ARENA_ALIGN" in \
                res.stderr, res.stderr
        for good in (64, 256):
            res = cc(src, good)
            assert res.returncode == 0, res.stderr


@needs("arm-none-eabi-gcc", "picolibc", "make")
def test_board_descriptor_defines_place_the_firmware_sections(tmp_path):
    """nucleo-l4r5zi's descriptor sets KILN_WEIGHTS_SECTION and KILN_ARENA_SECTION: the
    firmware's link map shows the blob and the arena in those input sections."""
    from toolchain.boards import compile_board, load_board

    assert load_board("nucleo-l4r5zi").defines["KILN_WEIGHTS_SECTION"] == \
        ".rodata.kiln_weights"
    out, report = compile_board(_net(), "nucleo-l4r5zi", tmp_path / "b", name="net")
    fw_make = (out / "firmware" / "Makefile").read_text()
    assert "-DKILN_WEIGHTS_SECTION=.rodata.kiln_weights" in fw_make
    link_map = (out / "firmware" / "build" / "board" / "firmware.map").read_text()
    assert ".rodata.kiln_weights" in link_map and ".bss.kiln_arena" in link_map
    assert report["flash"]["weights"]["rodata"] >= _meta(out)["weight_bytes"]
    assert report["ram"]["arena"] >= _meta(out)["arena_bytes"]


def test_board_refuses_external_weights(tmp_path):
    from toolchain.boards import compile_board
    from toolchain.errors import OptionError

    with pytest.raises(OptionError, match="--weights external and --board nucleo-l4r5zi"):
        compile_board(_net(), "nucleo-l4r5zi", tmp_path / "b", weights="external",
                      build=False)


def test_weights_are_streamed_and_a_failure_leaves_nothing(tmp_path, monkeypatch):
    import toolchain.bundle.weights as weights
    from toolchain.bundle import build_spec, render_files
    from toolchain.bundle.render import Streamed

    files = render_files(build_spec(_net(), "c-generic", progress=False))
    assert isinstance(files["src/weights.bin"], Streamed)
    assert all(not isinstance(v, (str, bytes)) or len(v) < 100_000 for v in files.values())

    def boom(self):
        yield b"\0" * 64
        raise OSError("injected: disk full while writing the weights")

    monkeypatch.setattr(weights.WeightsBlob, "chunks", boom)
    with pytest.raises(OSError, match="injected"):
        compile_model(_net(), "c-generic", tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_unknown_mode_is_refused():
    from toolchain.errors import OptionError

    with pytest.raises(OptionError, match="weights 'blob': choose one of auto, incbin, "
                                          "c-array, external"):
        compile_model(_net(), "c-generic", "unused", weights="blob")
    require("cc")


@pytest.mark.parametrize("mode", ["incbin", "external"])
@needs("nvcc", "make")
def test_cuda_bundle_links_its_weights(tmp_path, mode):
    """nvcc builds a CUDA bundle's library and demo in each mode (the .incbin stub by the
    host C compiler), and Kiln's host build too; running needs a GPU (test_cuda.py).

    ``make`` runs nvcc through ``ccache`` where installed, as Kiln's own build does
    (``nvcc_launcher``): both compile each source with the same command, so the kernels
    (the same ``kernels.cu`` in both modes) and the runtime are compiled once, not four
    times; each mode's own sources (``net.cu``, the weights, ``main.c``) still go through
    nvcc, and both link."""
    from toolchain.bundle.host import build_cuda, nvcc_launcher

    path = compile_model(_net(), "cuda-sm80", tmp_path / "b", name="net", weights=mode,
                         progress=False)
    make(path, f"NVCC={' '.join([*nvcc_launcher(), 'nvcc'])}")
    assert (path / "main").is_file()
    syms = subprocess.run(["nm", str(path / "libnet.a")], capture_output=True, text=True,
                          check=True).stdout
    assert "net_weights_blob" in syms if mode == "incbin" else "net_set_weights" in syms
    assert build_cuda(path).is_file()
