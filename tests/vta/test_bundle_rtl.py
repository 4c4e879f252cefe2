"""Accelerator bundles on the Verilog RTL: `make DEVICE=rtl` links the Verilator model the
bundle carries in rtl/ instead of the C functional simulator, and `kiln run --device rtl` /
`toolchain.run(..., device="rtl")` build it on the host; both bit-exact with the fsim."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

import toolchain
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.passes.quantize_ops import quantize_ops
from toolchain.graph.reference import run_graph
from toolchain.vta.cfsim import counter_names
from toolchain.vta.rtl import verilator_env

from ..tools import needs
from .qmodels import quantized, small_cnn

pytestmark = needs("verilator", "c++", "make", "perl")


@pytest.fixture(scope="module")
def cnn_bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, onnx.ModelProto]:
    d = tmp_path_factory.mktemp("vta_rtl_cnn")
    q = quantized(small_cnn())
    onnx.save(q, d / "cnn.onnx")
    return toolchain.compile(d / "cnn.onnx", "vta", output=d / "bundle"), q


def _demo(bundle: Path, where: Path, device: str, x: np.ndarray) -> np.ndarray:
    """Build the bundle's ./main with ``make DEVICE=device`` in a copy at ``where``; its
    output on ``x``."""
    shutil.copytree(bundle, where)
    r = subprocess.run(["make", "-s", "main", f"DEVICE={device}"], cwd=where,
                       env=verilator_env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    x.tofile(where / "x.bin")
    r = subprocess.run(["./main", "x.bin", "y.bin"], cwd=where, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return np.fromfile(where / "y.bin", np.float32)


def test_make_device_rtl_links_the_rtl_and_equals_the_fsim(
        cnn_bundle: tuple[Any, onnx.ModelProto], tmp_path: Path) -> None:
    pkg, q = cnn_bundle
    x = np.random.default_rng(7).standard_normal((1, 3, 8, 8)).astype(np.float32)
    rtl = _demo(pkg.path, tmp_path / "rtl", "rtl", x)
    fsim = _demo(pkg.path, tmp_path / "fsim", "fsim", x)
    assert rtl.tobytes() == fsim.tobytes()
    want = run_graph(quantize_ops(from_onnx(q)), {"x": x})["y"]
    np.testing.assert_array_equal(rtl.reshape(want.shape), want)
    # the RTL build carries no simulator, the fsim build no Verilator model
    assert (tmp_path / "rtl" / "build" / "rtl" / "Vvta_sim_top__ALL.a").is_file()
    assert not (tmp_path / "rtl" / "build" / "kiln_vta_fsim.o").exists()
    assert not (tmp_path / "fsim" / "build" / "rtl").exists()
    # `make profile` links each device like ./main (reusing the copy's Verilator build)
    kernels = [k["name"] for k in pkg.metadata["kernels"] if not k["elided"]]
    for device in ("rtl", "fsim"):
        d = tmp_path / device
        r = subprocess.run(["make", "-s", "profile", f"DEVICE={device}"], cwd=d,
                           env=verilator_env(), capture_output=True, text=True)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
        r = subprocess.run(["./main_profile", "--repeat", "2", "x.bin", "p.bin"], cwd=d,
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        rows = [ln.split() for ln in r.stdout.splitlines() if ln.startswith("kiln-profile")]
        assert [row[2] for row in rows] == kernels  # the accelerator layers' kernels too
        assert (d / "p.bin").read_bytes() == (d / "y.bin").read_bytes()
    assert (tmp_path / "rtl" / "build" / "profile-rtl" / "src" / "kiln_vta_bundle.o").is_file()
    assert not (tmp_path / "rtl" / "build" / "profile-rtl" / "runtime" /
                "kiln_vta_fsim.o").exists()


def test_run_on_the_rtl_is_bit_exact_and_counts_cycles(
        cnn_bundle: tuple[Any, onnx.ModelProto]) -> None:
    pkg, _ = cnn_bundle
    x = {"x": np.random.default_rng(8).standard_normal((1, 3, 8, 8)).astype(np.float32)}
    fsim = toolchain.run(pkg, x)
    rtl = toolchain.run(pkg, x, device="rtl")
    np.testing.assert_array_equal(rtl.outputs["y"], fsim.outputs["y"])
    assert [c["layer"] for c in rtl.accelerator] == ["conv1_vta", "conv2_vta", "fc_vta"]
    for hw, soft in zip(rtl.accelerator, fsim.accelerator, strict=True):
        # the RTL counts its non-reset GEMM steps as the fsim does; cycles only it has
        assert hw["gemm_cycles"] == soft["gemm_steps"] > 0
        assert hw["cycles"] > hw["gemm_cycles"] and soft["cycles"] == 0
        assert hw["dram_wr_beats"] * 16 == soft["bytes_stored_out"]
        # the driver's counters are filled on the RTL too, equal to the fsim's
        driver = counter_names()
        assert {k: hw[k] for k in driver} == {k: soft[k] for k in driver}
        assert hw["instructions"] > 0 and hw["macs"] > 0


@needs("cmake")
def test_cmake_device_rtl_links_the_rtl_and_equals_the_fsim(
        cnn_bundle: tuple[Any, onnx.ModelProto], tmp_path: Path) -> None:
    pkg, _ = cnn_bundle
    x = np.random.default_rng(9).standard_normal((1, 3, 8, 8)).astype(np.float32)
    x.tofile(tmp_path / "x.bin")
    build = tmp_path / "build"
    env = verilator_env()
    for cmd in (["cmake", "-S", str(pkg.path), "-B", str(build), "-DKILN_CNN_DEVICE=rtl"],
                ["cmake", "--build", str(build)], ["./cnn_main", "../x.bin", "../y.bin"]):
        r = subprocess.run(cmd, cwd=build if cmd[0] == "./cnn_main" else tmp_path, env=env,
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    want = toolchain.run(pkg, {"x": x}).outputs["y"]
    np.testing.assert_array_equal(np.fromfile(tmp_path / "y.bin", np.float32), want.ravel())


def test_kiln_run_on_the_rtl_prints_hardware_and_driver_counters(
        cnn_bundle: tuple[Any, onnx.ModelProto], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    from toolchain.cli import main

    pkg, _ = cnn_bundle
    x = np.random.default_rng(11).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    assert main(["run", str(pkg.path), "--inputs", str(tmp_path / "in.npz"),
                 "--device", "rtl", "--split", "--accel-mhz", "200"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("accelerator layers on rtl"):].splitlines()
    assert table[1].split()[:2] == ["layer", "cycles"] and table[1].split()[-8:] == [
        "insns", "MACs", "DMA", "in", "B", "DMA", "out", "B"]
    total = [int(v) for v in table[5].split()[1:] if not v.endswith("%")]
    soft = toolchain.run(pkg, {"x": x}).accelerator
    assert table[5].split()[0] == "total" and total[0] > 0
    # the last four columns are the driver's: instructions, MACs, DMA in and out
    assert total[-4:] == [sum(c[k] for c in soft) for k in ("instructions", "macs")] + [
        sum(v for c in soft for k, v in c.items() if k.startswith("bytes_loaded_")),
        sum(c["bytes_stored_out"] for c in soft)]
    assert total[-3] > 0
    # the time split: host kernels, the accelerator kernels' own host work, the RTL cycles
    split = out[out.index("host/accelerator split"):].splitlines()
    assert "RTL cycles at 200 MHz" in split[0]
    on_host = sum(not k["elided"] for k in pkg.metadata["kernels"]) - 3
    assert split[1].split()[:2] == ["host", "kernels"]
    assert f"({on_host} kernels on the host)" in split[1]
    assert "in 3 accelerator kernels" in split[2]
    us = float(split[3].split()[1])
    assert us == pytest.approx(total[0] / 200, abs=0.06)  # cycles at 200 MHz, in us
    host, accel = (float(v.rstrip("%,")) for v in split[4].split()[1:4:2])
    assert host + accel == pytest.approx(100, abs=0.11) and 0 < host < 100


def test_kiln_verilates_a_bundle_as_its_makefile_does(
        cnn_bundle: tuple[Any, onnx.ModelProto]) -> None:
    """`make DEVICE=rtl` and Kiln's own RTL build (`kiln run --device rtl`) run the same
    Verilator command relative to the bundle folder, so ccache (CCACHE_BASEDIR at the
    folder, exported by the Makefile) gives one the other's compiled objects."""
    from toolchain.vta.rtl_device import VERILATOR_MAKEFLAGS, verilate_command

    pkg, _ = cnn_bundle
    text = (pkg.path / "Makefile").read_text()
    assert f"VERILATOR_MAKEFLAGS ?= {VERILATOR_MAKEFLAGS}\n" in text
    assert "export CCACHE_BASEDIR ?= $(CURDIR)\n" in text
    srcs = next(ln for ln in text.splitlines() if ln.startswith("RTL_SRCS = ")).split()[2:]
    recipe = next(ln for ln in text.splitlines() if ln.startswith("\t$(VERILATOR) "))
    want = verilate_command("$(CURDIR)", srcs, "$(VERILATOR)", "$(VERILATOR_MAKEFLAGS)")
    quoted = [f'"{a}"' if " " in a or a.startswith("$(VERILATOR_M") else a for a in want]
    assert recipe.strip().replace("$(RTL_SRCS)", " ".join(srcs)) == " ".join(quoted)


def test_cmake_verilates_a_bundle_as_its_makefile_does(
        cnn_bundle: tuple[Any, onnx.ModelProto]) -> None:
    """The CMake RTL build runs the Makefile's Verilator command in a copy of the bundle's
    layout (``kiln_rtl/`` in the build folder), with CCACHE_BASEDIR there, so ccache gives it
    `make DEVICE=rtl`'s compiled objects."""
    from toolchain.vta.rtl_device import verilate_command

    pkg, _ = cnn_bundle
    text = (pkg.path / "CMakeLists.txt").read_text()
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("set(KILN_RTL_SRCS "))
    srcs = line.strip()[:-1].split()[1:]
    block = text[text.index("${KILN_VERILATOR} --cc"):text.index("    WORKING_DIRECTORY")]
    want = verilate_command("${KILN_RTL_ROOT}", srcs, "${KILN_VERILATOR}")
    quoted = [f'"{a}"' if " " in a else a for a in want]
    assert " ".join(block.split()).replace("${KILN_RTL_SRCS}", " ".join(srcs)) == " ".join(quoted)
    assert "WORKING_DIRECTORY ${KILN_RTL_ROOT}\n" in text
    assert "CCACHE_BASEDIR=${KILN_RTL_ROOT}\n" in text


def test_the_rtl_build_is_keyed_by_the_rtl_and_the_command(
        cnn_bundle: tuple[Any, onnx.ModelProto], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Bundles with the same RTL share one Verilator build; an edited RTL file or another
    Verilator flag builds anew; an incomplete rtl/ is refused by name."""
    from toolchain.errors import BuildError
    from toolchain.vta import rtl_device

    pkg, _ = cnn_bundle
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        shutil.copytree(pkg.path / "rtl", d / "rtl")
        shutil.copytree(pkg.path / "runtime", d / "runtime")
    first = rtl_device.bundle_rtl_build_dir(a / "rtl")[0]
    assert rtl_device.bundle_rtl_build_dir(b / "rtl")[0] == first
    sv = b / "rtl" / "vta_fifo.sv"
    sv.write_text(sv.read_text() + "\n// edited\n")
    assert rtl_device.bundle_rtl_build_dir(b / "rtl")[0] != first
    monkeypatch.setattr(rtl_device, "MAKE_VERILATE", (*rtl_device.MAKE_VERILATE, "-O2"))
    assert rtl_device.bundle_rtl_build_dir(a / "rtl")[0] != first
    (a / "rtl" / "vta_params.svh").unlink()
    with pytest.raises(BuildError, match="vta_params.svh"):
        rtl_device.bundle_rtl_build_dir(a / "rtl")
