"""`kiln compile --target vta`: int8 models as bundles whose accelerator layers run through
the C driver on the C functional simulator, bit-exact with Kiln's integer reference."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

import toolchain
from toolchain.cli import main
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.passes.quantize_ops import quantize_ops
from toolchain.graph.reference import run_graph

from ..tools import needs
from .qmodels import assert_cnn_bundle_bit_exact, quantized, small_cnn, small_mlp


@pytest.fixture(scope="module")
def cnn_bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, onnx.ModelProto]:
    d = tmp_path_factory.mktemp("vta_cnn")
    q = quantized(small_cnn())
    onnx.save(q, d / "cnn.onnx")
    return toolchain.compile(d / "cnn.onnx", "vta", output=d / "bundle"), q


def test_cnn_bundle_on_the_fsim_is_bit_exact_with_the_integer_reference(
        cnn_bundle: tuple[Any, onnx.ModelProto]) -> None:
    pkg, q = cnn_bundle
    assert_cnn_bundle_bit_exact(pkg, q)


def test_metadata_says_which_node_runs_where_and_why(
        cnn_bundle: tuple[Any, onnx.ModelProto]) -> None:
    pkg, _ = cnn_bundle
    meta = json.loads((pkg.path / "metadata.json").read_text())
    acc = meta["accelerator"]
    assert acc["target"] == "vta" and acc["host_target"] == "c-generic"
    where = {p["node"]: p for p in acc["placements"]}
    assert where["conv1"]["device"] == where["conv2"]["device"] == "accelerator"
    assert where["pool"]["device"] == "host" and where["fc"]["device"] == "accelerator"
    assert all(p["reason"] for p in acc["placements"])
    assert [x["node"] for x in acc["layers"]] == ["conv1_vta", "conv2_vta", "fc_vta"]
    layer = acc["layers"][1]
    assert layer["instructions"] > 0
    # the layer's DRAM window is arena scratch placed by the static memory plan
    scratch = [t for t in meta["memory_plan"]["tensors"] if t["kind"] == "scratch"]
    assert any(t["size"] == layer["window_bytes"] for t in scratch)
    assert layer["window_offset"] + layer["window_bytes"] <= meta["arena_bytes"]


def test_compiling_a_float_model_for_the_accelerator_says_to_quantize_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A float model compiles for --target vta with every node on the host; the summary
    used to end at "0 of 7 nodes" and one "a float op" reason per node."""
    onnx.save(small_cnn(mid=16), tmp_path / "f.onnx")
    assert main(["compile", str(tmp_path / "f.onnx"), "--target", "vta", "-o",
                 str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "accelerator vta: 0 of 7 nodes" in out
    assert ("note: no node runs on the accelerator: the model's Conv, Gemm are float and the "
            "accelerator runs int8 layers; quantize the model first, e.g. kiln quantize") in out


def test_accelerator_bundle_carries_the_driver_and_builds_with_make(
        cnn_bundle: tuple[Any, onnx.ModelProto]) -> None:
    d = cnn_bundle[0].path
    for f in ("runtime/kiln_vta.c", "runtime/kiln_vta_fsim.c", "src/kiln_vta_bundle.c"):
        assert (d / f).is_file()
    model = json.loads((d / "metadata.json").read_text())["model"]["name"]
    assert "KILN_ERR_ACCELERATOR" in (d / "src" / f"{model}.c").read_text()
    r = subprocess.run(["make", "-s", "lib",
                        "CFLAGS=-O0 -std=c99 -Wall -Wextra -Werror -Wcast-qual"],
                       cwd=d, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(["make", "-s", "lib", "DEVICE=gpu"], cwd=d, capture_output=True,
                       text=True)
    assert r.returncode != 0 and "devices are fsim and rtl" in r.stderr
    assert (d / "rtl" / "vta_params.svh").is_file() and (d / "rtl" / "sim" /
                                                         "kiln_vta_rtl.cpp").is_file()


def test_kiln_run_prints_the_accelerator_counters_of_each_layer(
        cnn_bundle: tuple[Any, onnx.ModelProto], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    pkg, _ = cnn_bundle
    x = np.random.default_rng(5).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    assert main(["run", str(pkg.path), "--inputs", str(tmp_path / "in.npz"), "--check"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("accelerator layers on fsim"):].splitlines()
    assert table[1].split()[:3] == ["layer", "insns", "GEMM"]
    rows = {line.split()[0]: line.split()[1:] for line in table[2:6]}
    assert set(rows) == {"conv1_vta", "conv2_vta", "fc_vta", "total"}
    # conv2: 32 -> 32 channels, 3x3 on 8x8 'same': 64 pixels x 9 taps x 2 x 2 blocks
    insns, steps, macs = (int(v) for v in rows["conv2_vta"][:3])
    assert steps == 64 * 9 * 2 * 2 and macs == 256 * steps
    meta = json.loads((pkg.path / "metadata.json").read_text())
    assert insns == meta["accelerator"]["layers"][1]["instructions"]
    # conv1 (3 -> 32 channels) as an im2col GEMM: 64 pixels x K = 27 in 2 blocks x 2
    # output blocks; fc: 512 -> 10 on one row, 32 blocks of K
    assert int(rows["total"][1]) == steps + 64 * 2 * 2 + 32
    assert "check passed" in out


def test_kernel_times_split_each_accelerator_kernel_into_device_and_host_work(
        cnn_bundle: tuple[Any, onnx.ModelProto], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    from toolchain.bundle.host import BundleModule

    pkg, _ = cnn_bundle
    x = {"x": np.random.default_rng(6).standard_normal((1, 3, 8, 8)).astype(np.float32)}
    module = BundleModule(pkg.path, profile=True)
    rows = module.kernel_times(x, repeat=2)
    assert [r["kernel"] for r in rows] == [
        k["name"] for k in pkg.metadata["kernels"] if not k["elided"]]
    accel = [r for r in rows if "device_ns" in r]
    assert [r["kernel"] for r in accel] == [la["kernel"]
                                            for la in pkg.metadata["accelerator"]["layers"]]
    assert all(0 < r["device_ns"] < r["mean_ns"] and r["calls"] == 2 for r in accel)
    np.testing.assert_array_equal(module(x)["y"], toolchain.run(pkg, x).outputs["y"])
    with pytest.raises(toolchain.errors.TargetError, match="profiling build"):
        BundleModule(pkg.path).kernel_times(x)
    np.savez(tmp_path / "in.npz", **x)
    assert main(["run", str(pkg.path), "--inputs", str(tmp_path / "in.npz"), "--split"]) == 0
    out = capsys.readouterr().out
    assert "accelerator not timed on the fsim" in out and "--device rtl" in out


def test_kiln_run_refuses_a_device_that_does_not_apply(
        cnn_bundle: tuple[Any, onnx.ModelProto], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    np.savez(tmp_path / "in.npz", x=np.zeros((1, 3, 8, 8), np.float32))
    onnx.save(cnn_bundle[1], tmp_path / "m.onnx")
    rc = main(["run", str(tmp_path / "m.onnx"), "--inputs", str(tmp_path / "in.npz"),
               "--device", "rtl"])
    assert rc == 2 and "--target vta" in capsys.readouterr().err
    rc = main(["run", str(tmp_path / "m.onnx"), "--inputs", str(tmp_path / "in.npz"),
               "--split"])
    assert rc == 2 and "--split applies to a bundle" in capsys.readouterr().err
    for opt in (["--device", "rtl"], ["--split"], ["--check"]):  # a mistyped bundle path
        rc = main(["run", str(tmp_path / "bundle_typo"), "--inputs", str(tmp_path / "in.npz"),
                   *opt])  # was "bundle_typo is an ONNX model" / "not bundle_typo"
        err = capsys.readouterr().err
        assert rc == 2 and "bundle_typo: no such file or directory" in err, err
    for mhz in ("0", "nan", "inf"):
        rc = main(["run", str(cnn_bundle[0].path), "--inputs", str(tmp_path / "in.npz"),
                   "--split", "--accel-mhz", mhz])
        assert rc == 2 and f"--accel-mhz {mhz}: must be a positive" in capsys.readouterr().err


def test_mlp_bundle_runs_its_gemms_on_the_accelerator(tmp_path: Path) -> None:
    q = quantized(small_mlp())
    onnx.save(q, tmp_path / "mlp.onnx")
    pkg = toolchain.compile(tmp_path / "mlp.onnx", "vta", output=tmp_path / "b")
    meta = json.loads((pkg.path / "metadata.json").read_text())
    assert [x["node"] for x in meta["accelerator"]["layers"]] == ["fc1_vta", "fc2_vta"]
    x = {"x": np.random.default_rng(3).standard_normal((4, 64)).astype(np.float32)}
    want = run_graph(quantize_ops(from_onnx(q)), x)
    got = toolchain.run(pkg, x).outputs
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


def test_cpu_bundles_leave_the_accelerator_driver_out(tmp_path: Path) -> None:
    q = quantized(small_mlp())
    onnx.save(q, tmp_path / "mlp.onnx")
    pkg = toolchain.compile(tmp_path / "mlp.onnx", "c-generic", output=tmp_path / "b").path
    assert not list((pkg / "runtime").glob("kiln_vta*"))
    assert "accelerator" not in json.loads((pkg / "metadata.json").read_text())


@needs("cmake", "make")
def test_cmake_builds_an_accelerator_bundle_on_the_fsim(
        cnn_bundle: tuple[Any, onnx.ModelProto], tmp_path: Path) -> None:
    pkg, _ = cnn_bundle
    x = np.random.default_rng(4).standard_normal((1, 3, 8, 8)).astype(np.float32)
    x.tofile(tmp_path / "x.bin")
    build = tmp_path / "build"
    for cmd in (["cmake", "-S", str(pkg.path), "-B", str(build)],
                ["cmake", "--build", str(build)], [str(build / "cnn_main"), "x.bin", "y.bin"]):
        r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    want = toolchain.run(pkg, {"x": x}).outputs["y"]
    np.testing.assert_array_equal(np.fromfile(tmp_path / "y.bin", np.float32), want.ravel())
    r = subprocess.run(["cmake", "-S", str(pkg.path), "-B", str(tmp_path / "b2"),
                        "-DKILN_CNN_DEVICE=gpu"], capture_output=True, text=True)
    assert r.returncode != 0 and "devices are fsim and rtl" in r.stdout + r.stderr


def test_a_target_the_rtl_cannot_build_offers_the_fsim_only(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A 256-bit DRAM bus is a valid target for the ISA and the fsim, but the RTL fetches
    128-bit instructions from whole beats: the bundle carries no rtl/ and refuses
    DEVICE=rtl in make and kiln run, saying which devices it has."""
    (tmp_path / "wide.yaml").write_text("name: vta-wide-bus\nkind: vta\nextends: vta\n"
                                        "dram: {bus_width_bits: 256}\n")
    q = quantized(small_cnn(mid=16))
    onnx.save(q, tmp_path / "cnn.onnx")
    pkg = toolchain.compile(tmp_path / "cnn.onnx", str(tmp_path / "wide.yaml"),
                            output=tmp_path / "b")
    meta = json.loads((pkg.path / "metadata.json").read_text())
    assert meta["accelerator"]["devices"] == ["fsim"] and not (pkg.path / "rtl").exists()
    r = subprocess.run(["make", "-s", "lib", "DEVICE=rtl"], cwd=pkg.path,
                       capture_output=True, text=True)
    assert r.returncode != 0 and "devices are fsim only" in r.stderr
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    rc = main(["run", str(pkg.path), "--inputs", str(tmp_path / "in.npz"), "--device", "rtl"])
    assert rc == 2 and "offers the devices fsim" in capsys.readouterr().err
    want = run_graph(quantize_ops(from_onnx(q)), {"x": x})
    np.testing.assert_array_equal(toolchain.run(pkg, {"x": x}).outputs["y"], want["y"])


def test_an_accelerator_bundle_recompiles_byte_identical(
        cnn_bundle: tuple[Any, onnx.ModelProto], tmp_path: Path) -> None:
    """Programs, DRAM images, glue, Makefile and the RTL copy: the same bytes again (the
    metadata too, but for the path of the model file it was compiled from)."""
    pkg, q = cnn_bundle
    onnx.save(q, tmp_path / "cnn.onnx")
    again = toolchain.compile(tmp_path / "cnn.onnx", "vta", output=tmp_path / "b").path

    def files(d: Path) -> dict[str, bytes]:
        return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*"))
                if p.is_file() and "build" not in p.relative_to(d).parts
                and p.name not in ("main", "libcnn.a", "metadata.json")}

    a, b = files(pkg.path), files(again)
    assert "rtl/vta_params.svh" in a and a.keys() == b.keys()
    assert [k for k in a if a[k] != b[k]] == []
    meta = [json.loads((d / "metadata.json").read_text()) for d in (pkg.path, again)]
    for m in meta:
        m["model"].pop("path")          # where the model was compiled from
    assert meta[0] == meta[1]
