"""``kiln compile`` and ``kiln run DIR`` through the real CLI entry point, and the Python
API (toolchain.api)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.bundle.helpers import assert_matches, run_ort
from tests.tools import needs
from toolchain import api, cli
from toolchain.zoo import ZOO


@pytest.fixture()
def kiln(monkeypatch, capsys):
    """Run ``kiln ARGS``; returns (exit status, stdout, stderr)."""
    monkeypatch.setitem(cli.COMMANDS, "compile", "compile_cmd")

    def call(*argv: str):
        code = cli.main([str(a) for a in argv])
        out = capsys.readouterr()
        return code, out.out, out.err

    return call


@pytest.fixture(scope="module")
def lenet(tmp_path_factory):
    d = tmp_path_factory.mktemp("lenet")
    model = ZOO["lenet5"].build()
    onnx.save(model, d / "lenet5.onnx")
    x = ZOO["lenet5"].inputs(model)
    np.savez(d / "in.npz", **x)
    return d, model, x


@pytest.fixture(scope="module")
def bundle(lenet, tmp_path_factory):
    from toolchain.bundle import compile_model

    d, _, _ = lenet
    return compile_model(d / "lenet5.onnx", "c-generic", d / "bundle")


def test_compile_prints_summary_and_writes_bundle(kiln, lenet, tmp_path):
    d, _, _ = lenet
    code, out, err = kiln("compile", d / "lenet5.onnx", "--target", "c-generic", "-o",
                          tmp_path / "b", "--dump-ir", tmp_path / "ir")
    assert code == 0, err
    assert "kernels 9 (from 13 nodes)" in out and "arena" in out
    meta = json.loads((tmp_path / "b" / "metadata.json").read_text())
    assert meta["model"]["name"] == "lenet5" and meta["target"]["name"] == "c-generic"
    assert (tmp_path / "ir" / "00_input.txt").is_file()
    assert (tmp_path / "b" / "include" / "lenet5.h").is_file()


def test_compile_target_from_yaml_file(kiln, lenet, tmp_path):
    d, _, _ = lenet
    t = tmp_path / "board.yaml"
    t.write_text("name: my-board\nkind: c\nvector_width_bits: 128\n")
    code, _, err = kiln("compile", d / "lenet5.onnx", "--target", t, "-o", tmp_path / "b")
    assert code == 0, err
    assert json.loads((tmp_path / "b" / "metadata.json").read_text())["target"]["name"] == \
        "my-board"


def test_compile_bad_target_lists_targets(kiln, lenet, tmp_path):
    d, _, _ = lenet
    code, _, err = kiln("compile", d / "lenet5.onnx", "--target", "pdp-11", "-o",
                        tmp_path / "b")
    assert code == 2
    assert "unknown target 'pdp-11'" in err and "c-generic" in err
    assert not (tmp_path / "b").exists()


def test_compile_target_without_a_backend_refused(kiln, lenet, tmp_path):
    d, _, _ = lenet
    (tmp_path / "t.yaml").write_text("name: acc\nkind: vta\n")
    code, _, err = kiln("compile", d / "lenet5.onnx", "--target", tmp_path / "t.yaml", "-o",
                        tmp_path / "b")
    assert code == 2 and "missing key(s) gemm.batch" in err
    assert not (tmp_path / "b").exists()


def test_compile_float_model_for_the_accelerator_keeps_it_on_the_host(kiln, lenet, tmp_path):
    d, _, _ = lenet
    code, out, err = kiln("compile", d / "lenet5.onnx", "--target", "vta", "-o",
                          tmp_path / "b")
    assert code == 0, err
    # the summary names the target asked for, not only the host kernels' c-generic
    assert "model lenet5 for target vta (host kernels for c-generic) in " in out, out
    meta = json.loads((tmp_path / "b" / "metadata.json").read_text())
    placed = meta["accelerator"]["placements"]
    assert placed and all(p["device"] == "host" and p["reason"] for p in placed)
    assert all("float" in p["reason"] for p in placed if p["op"] == "Conv")
    assert not meta["accelerator"]["layers"]
    assert not list((tmp_path / "b" / "runtime").glob("kiln_vta*"))


def test_compile_llvm_kind_target_writes_kernel_objects(kiln, lenet, tmp_path):
    """A descriptor of kind llvm is a CPU target whose kernels LLVM compiles."""
    d, _, _ = lenet
    (tmp_path / "t.yaml").write_text("name: jit\nkind: llvm\nkeys: [cpu]\n")
    code, _, err = kiln("compile", d / "lenet5.onnx", "--target", tmp_path / "t.yaml", "-o",
                        tmp_path / "b")
    assert code == 0, err
    assert list((tmp_path / "b" / "src" / "kernels").glob("*.o"))


def test_emulate_is_for_gpu_targets(kiln, lenet, tmp_path):
    d, _, _ = lenet
    code, _, err = kiln("compile", d / "lenet5.onnx", "--target", "c-generic", "--emulate",
                        "-o", tmp_path / "b")
    assert code == 2 and "--emulate" in err and "kind 'c'" in err
    assert not (tmp_path / "b").exists()


def test_compile_existing_output_needs_force(kiln, lenet, tmp_path):
    d, _, _ = lenet
    (tmp_path / "b").mkdir()
    code, _, err = kiln("compile", d / "lenet5.onnx", "-o", tmp_path / "b")
    assert code == 2 and "already exists" in err and "--force" in err
    code, _, err = kiln("compile", d / "lenet5.onnx", "-o", tmp_path / "b", "--force")
    assert code == 0, err


def test_compile_missing_model_and_dynamic_shape(kiln, tmp_path):
    code, _, err = kiln("compile", tmp_path / "nope.onnx", "-o", tmp_path / "b")
    assert code == 2 and "does not exist" in err
    onnx.save(ZOO["mlp"].build(), tmp_path / "mlp.onnx")
    code, _, err = kiln("compile", tmp_path / "mlp.onnx", "-o", tmp_path / "b")
    assert code == 2 and "--input-shape input=1,1,28,28" in err
    assert not (tmp_path / "b").exists()
    code, _, err = kiln("compile", tmp_path / "mlp.onnx", "-o", tmp_path / "b",
                        "--input-shape", "input=2,1,28,28")
    assert code == 0, err


def test_run_bundle_check_passes(kiln, lenet, bundle, tmp_path):
    d, model, x = lenet
    code, out, err = kiln("run", bundle, "--inputs", d / "in.npz", "--check",
                          "--outputs", tmp_path / "out.npz")
    assert code == 0, err
    assert "max rel err" in out and "check passed: 2 output(s)" in out
    with np.load(tmp_path / "out.npz") as got:
        assert_matches(dict(got), run_ort(model, x))


def test_run_bundle_check_fails_above_tolerance(kiln, lenet, bundle):
    d, _, _ = lenet
    code, out, _ = kiln("run", bundle, "--inputs", d / "in.npz", "--check",
                        "--tolerance", "1e-30")
    assert code == 1 and "check FAILED" in out and "FAIL" in out


def test_run_bundle_errors(kiln, lenet, bundle, tmp_path):
    d, _, _ = lenet
    np.savez(tmp_path / "bad.npz", input=np.zeros((1, 1, 28, 27), np.float32))
    code, _, err = kiln("run", bundle, "--inputs", tmp_path / "bad.npz")
    assert code == 2 and "input 'input'" in err and "[1, 1, 28, 28]" in err
    code, _, err = kiln("run", tmp_path, "--inputs", d / "in.npz")
    assert code == 2 and "not a Kiln bundle" in err
    code, _, err = kiln("run", d / "lenet5.onnx", "--inputs", d / "in.npz", "--check")
    assert code == 2 and "give a bundle directory" in err
    code, _, err = kiln("run", bundle, "--inputs", d / "in.npz", "--check", "--model-file",
                        tmp_path / "missing.onnx")
    assert code == 2 and "missing.onnx is not a file" in err
    onnx.save(ZOO["mlp"].build(), tmp_path / "other.onnx")
    code, _, err = kiln("run", bundle, "--inputs", d / "in.npz", "--check", "--model-file",
                        tmp_path / "other.onnx")
    assert code == 2 and "not the model this bundle was compiled from" in err


def test_bundle_records_the_model_files_sha256(kiln, lenet, bundle, tmp_path):
    """The digest is of the file's bytes (hashed a block at a time, never a second copy of
    a large model); a bundle that recorded the older digest of the serialised model is
    still checked against the same file."""
    import hashlib
    import json
    import shutil

    d, _, _ = lenet
    meta = json.loads((bundle / "metadata.json").read_text())
    assert meta["model"]["sha256"] == hashlib.sha256(
        (d / "lenet5.onnx").read_bytes()).hexdigest()
    old = tmp_path / "old"
    shutil.copytree(bundle, old)
    proto = onnx.load(d / "lenet5.onnx")
    meta["model"]["sha256"] = hashlib.sha256(
        proto.SerializeToString(deterministic=True)).hexdigest()
    (old / "metadata.json").write_text(json.dumps(meta))
    code, out, err = kiln("run", old, "--inputs", d / "in.npz", "--check")
    assert code == 0 and "check passed" in out, err


def test_run_onnx_path_unchanged(kiln, lenet):
    d, _, _ = lenet
    code, out, err = kiln("run", d / "lenet5.onnx", "--inputs", d / "in.npz")
    assert code == 0, err
    assert out.startswith("logits: float32[1, 10]")


def test_python_api_load_compile_run(lenet, tmp_path):
    d, model, x = lenet
    m = api.load(d / "lenet5.onnx")
    pkg = api.compile(m, target="c-generic", output=tmp_path / "pkg")
    assert pkg.name == "lenet5" and pkg.path == (tmp_path / "pkg").absolute()
    result = api.run(pkg, x, check=True)
    assert result.ok and len(result.check) == 2
    assert_matches(result.outputs, run_ort(model, x))
    assert "max rel err" in str(result)
    # a ModelProto with a symbolic batch, compiled to a temporary folder, default inputs
    spec = ZOO["mlp"]
    pkg2 = api.compile(api.load(spec.build(), shape_dict={"input": (2, 1, 28, 28)}))
    r2 = api.run(pkg2, check=True)
    assert r2.ok and r2["logits"].shape == (2, 10)


def test_digits_example_accuracy_matches_onnxruntime(tmp_path, capsys):
    import importlib.util
    from pathlib import Path

    from toolchain.bundle import compile_model

    here = Path(__file__).resolve().parents[2] / "examples" / "digits"
    bundle = compile_model(here / "digits.onnx", "c-generic", tmp_path / "digits")
    spec = importlib.util.spec_from_file_location("digits_evaluate", here / "evaluate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main([str(bundle)]) == 0
    out = capsys.readouterr().out
    kiln_acc = float(out.split("Kiln bundle accuracy: ")[1].split()[0])
    ort_acc = float(out.split("onnxruntime accuracy: ")[1].split()[0])
    assert kiln_acc == ort_acc >= 0.9
    assert "predictions agree: 360/360" in out


def test_x86_target_bundle_runs_when_host_can(lenet, tmp_path):
    from toolchain.bundle import compile_model, load_bundle
    from toolchain.target import load_target, runs_here

    if not runs_here(load_target("x86_64-avx2")):
        pytest.skip("this host cannot run x86_64-avx2 code")
    d, model, x = lenet
    path = compile_model(d / "lenet5.onnx", "x86_64-avx2", tmp_path / "b")
    meta = json.loads((path / "metadata.json").read_text())
    assert "-march=x86-64-v3" in meta["target"]["cflags"]
    assert "-march=x86-64-v3" in (path / "Makefile").read_text()
    assert_matches(load_bundle(path, extra_flags=("-Wall", "-Wextra", "-Werror", "-pedantic"))(x),
                   run_ort(model, x))


def _make_dry_run(bundle: Path, *goals: str) -> str:
    """The commands ``make -n GOALS`` would run in ``bundle`` (nothing is built)."""
    res = subprocess.run(["make", "-n", *goals], cwd=bundle, capture_output=True, text=True,
                         check=False)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_cross_target_compiles_but_does_not_run_here(kiln, lenet, tmp_path):
    d, _, _ = lenet
    code, out, err = kiln("compile", d / "lenet5.onnx", "--target", "cortex-m4", "-o",
                          tmp_path / "m4")
    assert code == 0, err
    make = (tmp_path / "m4" / "Makefile").read_text()
    assert "CC = arm-none-eabi-gcc" in make
    # bare metal: plain `make` is the library alone (the demo main cannot link with no OS),
    # and says so; the compile's hint sends the user to make and a board, not to kiln run
    assert "the demo ./main cannot link" in make and "and ./main (the demo)" not in make
    plan = _make_dry_run(tmp_path / "m4")
    assert "rcs liblenet5.a" in plan and " -o main " not in plan
    assert "-o main build/main.o" in _make_dry_run(tmp_path / "m4", "main")  # still by name
    assert 'DEMO "build the demo program lenet5_main" OFF' in (
        tmp_path / "m4" / "CMakeLists.txt").read_text()
    assert f"build: make -C {tmp_path / 'm4'} (liblenet5.a" in out
    assert "run: kiln run" not in out
    code, _, err = kiln("run", tmp_path / "m4", "--inputs", d / "in.npz")
    assert code == 2 and "arm-none-eabi-gcc" in err and "cannot run on this host" in err
    assert "--board" in err  # the way to run a Cortex-M model here: a board bundle on QEMU


@needs("arm-none-eabi-gcc", "picolibc", "make")
def test_plain_make_builds_a_cortex_m_bundle_library(kiln, lenet, tmp_path):
    # the Makefile's own CFLAGS name the C library (picolibc's specs, as a --board build
    # does): with none, plain `make` stopped at #include <math.h>
    d, _, _ = lenet
    code, _, err = kiln("compile", d / "lenet5.onnx", "--target", "cortex-m4", "-o",
                        tmp_path / "m4")
    assert code == 0, err
    res = subprocess.run(["make", "-s"], cwd=tmp_path / "m4", capture_output=True, text=True,
                         check=False)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "m4" / "liblenet5.a").is_file()
    assert not (tmp_path / "m4" / "main").exists()
    # a C library of the user's own: LIBC_FLAGS replaces picolibc's flags
    plan = _make_dry_run(tmp_path / "m4", "-B", "LIBC_FLAGS=-DKILN_OWN_LIBC", "lib")
    assert "-DKILN_OWN_LIBC" in plan and "picolibc" not in plan


def test_aarch64_linux_bundle_refusal_says_how_to_run_it(kiln, lenet, tmp_path):
    # a Linux cross target has a demo program to build and run under qemu-user, no board
    d, _, _ = lenet
    code, _, err = kiln("compile", d / "lenet5.onnx", "--target", "aarch64-neon", "-o",
                        tmp_path / "a64")
    assert code == 0, err
    # Linux: plain `make` links the demo as on the host
    assert "-o main build/main.o" in _make_dry_run(tmp_path / "a64")
    code, _, err = kiln("run", tmp_path / "a64", "--inputs", d / "in.npz")
    assert code == 2 and "cannot run on this host" in err
    assert "make main" in err and "qemu-aarch64 -L /usr/aarch64-linux-gnu" in err
    assert "board" not in err


def test_dump_ir_into_a_file_is_a_user_error(kiln, lenet, tmp_path):
    d, _, _ = lenet
    (tmp_path / "ir").write_text("not a folder")
    code, _, err = kiln("compile", d / "lenet5.onnx", "-o", tmp_path / "b", "--dump-ir",
                        tmp_path / "ir")
    assert code == 2, err
    assert f"--dump-ir {tmp_path / 'ir'}: is a file, not a directory" in err
    assert not (tmp_path / "b").exists()


def test_cores_on_a_model_too_small_to_split_is_said(kiln, tmp_path):
    # every digits kernel is under MIN_PARALLEL_FLOPS: --cores 4 gives no threaded kernel,
    # and both commands say so instead of "compiled for at most 4" / nothing
    digits = Path(__file__).resolve().parents[2] / "examples" / "digits"
    code, out, err = kiln("compile", digits / "digits.onnx", "--cores", "4", "-o",
                          tmp_path / "d")
    assert code == 0, err
    assert "threads: none of the 7 kernels is large enough to split" in out
    code, out, err = kiln("run", tmp_path / "d", "--inputs", digits / "sample.npz",
                          "--threads", "2")
    assert code == 0, err
    assert "note: running on 1 thread: no kernel of this bundle splits across threads" in out


def test_check_of_an_fp16_precision_bundle_uses_the_float16_tolerance(kiln, lenet, tmp_path):
    # --precision fp16 keeps a float32 API, so no output is float16, yet every tensor
    # inside is: 1e-4 failed it with exit 1 ("a Kiln bug") at the documented 3e-4 error
    d, _, _ = lenet
    code, _, err = kiln("compile", d / "lenet5.onnx", "--precision", "fp16", "-o",
                        tmp_path / "h")
    assert code == 0, err
    code, out, err = kiln("run", tmp_path / "h", "--inputs", d / "in.npz", "--check")
    assert code == 0, out + err
    assert "ok (float16 inside: tolerance 0.002)" in out and "check passed" in out
    from toolchain import api

    assert api.run(str(tmp_path / "h"), dict(np.load(d / "in.npz")), check=True).ok


def test_an_empty_name_is_refused(kiln, lenet, tmp_path):
    d, _, _ = lenet
    code, _, err = kiln("compile", d / "lenet5.onnx", "--name", "", "-o", tmp_path / "b")
    assert code == 2 and "--name '': empty" in err, err
    assert not (tmp_path / "b").exists()


def test_accel_mhz_without_split_is_refused(kiln, lenet, bundle):
    d, _, _ = lenet
    code, _, err = kiln("run", bundle, "--inputs", d / "in.npz", "--accel-mhz", "200")
    assert code == 2 and "--accel-mhz applies with --split" in err, err


@pytest.mark.parametrize("extra", [["--tolerance", "1e-3"], ["--model-file", "m.onnx"]])
def test_check_options_without_check_are_refused(kiln, lenet, bundle, extra):
    d, _, _ = lenet
    code, _, err = kiln("run", bundle, "--inputs", d / "in.npz", *extra)
    assert code == 2 and f"{extra[0]} applies with --check" in err, err
