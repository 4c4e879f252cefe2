"""AArch64 through the LLVM backend (targets/aarch64-neon.yaml): kernel objects for the
``aarch64-unknown-linux-gnu`` triple, linked by the cross gcc with the bundle's C parts,
and the bundle's demo run under QEMU's user mode, against the reference executor (fp32) and
the C backend's build for the same target (int8: bit for bit)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.tools import require
from toolchain.bundle.host import read_metadata
from toolchain.zoo import ZOO

TARGET = "aarch64-neon"
#: ELF e_machine of AArch64
EM_AARCH64 = 183


def _compile(model: onnx.ModelProto | str, out: Path, backend: str) -> Path:
    import toolchain

    return toolchain.compile(toolchain.load(model), TARGET, out, backend=backend).path


def _run_qemu(bundle: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``make main`` with the cross gcc, then ``./main IN.bin... OUT.bin...`` under
    qemu-aarch64 (raw bytes in the order of metadata.json)."""
    require("aarch64-linux-gnu-gcc", "qemu-aarch64", "make")
    meta = read_metadata(bundle)
    subprocess.run(["make", "-s", "main"], cwd=bundle, check=True, capture_output=True)
    args = []
    for t in meta["inputs"]:
        p = bundle / f"{t['field']}.bin"
        np.ascontiguousarray(feeds[t["name"]], t["dtype"]).tofile(p)
        args.append(str(p))
    outs = {t["name"]: bundle / f"{t['field']}.out.bin" for t in meta["outputs"]}
    res = subprocess.run(["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", "./main", *args,
                          *map(str, outs.values())], cwd=bundle, capture_output=True,
                         text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    return {t["name"]: np.fromfile(outs[t["name"]], t["dtype"]).reshape(t["shape"])
            for t in meta["outputs"]}


@pytest.fixture(scope="module")
def lenet_llvm(tmp_path_factory) -> Path:
    """LeNet-5 compiled through the LLVM backend for AArch64, once for the module: the
    cross-link test and the QEMU run read the same bundle (``make main`` builds in it
    once; the other test's ``make`` finds ``main`` up to date)."""
    return _compile("examples/lenet5.onnx", tmp_path_factory.mktemp("lenet_llvm") / "b",
                    "llvm")


def test_aarch64_objects_and_cross_link(lenet_llvm) -> None:
    """Every kernel is an AArch64 ELF object; the cross linker resolves them with the
    bundle's C parts (no undefined kernel symbol)."""
    b = lenet_llvm
    meta = read_metadata(b)
    assert meta["options"]["backend"] == "llvm" and meta["kernel_objects"]
    for o in meta["kernel_objects"]:
        head = (b / o).read_bytes()[:20]
        assert head[:4] == b"\x7fELF" and head[4] == 2  # 64-bit
        assert int.from_bytes(head[18:20], "little") == EM_AARCH64, o
    assert "aarch64-unknown-linux-gnu" in (b / meta["kernel_objects"][0]).with_suffix(
        ".ll").read_text()
    require("aarch64-linux-gnu-gcc", "make")
    res = subprocess.run(["make", "-s", "main"], cwd=b, capture_output=True, text=True,
                         check=False)
    assert res.returncode == 0, res.stderr
    head = (b / "main").read_bytes()[:20]
    assert int.from_bytes(head[18:20], "little") == EM_AARCH64  # an AArch64 executable


def test_aarch64_fp32_bundle_runs_under_qemu(lenet_llvm) -> None:
    from toolchain.bundle.check import compare, reference_outputs

    b = lenet_llvm
    meta = read_metadata(b)
    feeds = {t["name"]: np.random.default_rng(0).standard_normal(t["shape"]).astype("float32")
             for t in meta["inputs"]}
    got = _run_qemu(b, feeds)
    rows = compare(got, reference_outputs(meta, feeds, "examples/lenet5.onnx"), 1e-4)
    assert rows and all(r["ok"] for r in rows), rows


def test_aarch64_int8_bundle_bit_exact_with_c_build(tmp_path) -> None:
    """int8 DS-CNN (Kiln's PTQ): LLVM kernels (the requantization as the target's
    llvm_helpers) and the C backend's kernels, both built by the cross gcc and run under
    QEMU, give the same integers."""
    from toolchain.zoo.quantized import kiln_qdq

    spec = ZOO["ds_cnn"]
    model = spec.build()
    q = kiln_qdq(model)
    onnx.save(q, tmp_path / "q.onnx")
    feeds = spec.inputs(model)
    runs = {be: _run_qemu(_compile(str(tmp_path / "q.onnx"), tmp_path / be, be), feeds)
            for be in ("c", "llvm")}
    for name, want in runs["c"].items():
        np.testing.assert_array_equal(runs["llvm"][name], want, err_msg=name)
    assert any(len(np.unique(v)) > 1 for v in runs["c"].values())
