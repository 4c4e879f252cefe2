"""Firmware builds: refusal with the numbers, exit status, timeouts, the real-board start-up
code, the Cortex-M7 machine, the CMake add_subdirectory route and the CLI."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import numpy as np
import onnx
import pytest
from onnx import helper

from tests.boards.conftest import needs_cross, needs_qemu
from tests.bundle.helpers import make_model
from tests.tools import require
from toolchain.cli import main
from toolchain.errors import SimulationError, TargetError


def _tiny(tmp_path, hw: int = 8, cin: int = 3, cout: int = 4, softmax: bool = False):
    """Conv 3x3 + Relu on 1 x cin x hw x hw (weights cout*cin*9 floats); with ``softmax`` a
    channel Softmax after it (the conv's output then lives in the arena)."""
    rng = np.random.default_rng(0)
    tail = [helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("Softmax", ["r"], ["y"], axis=1)] if softmax else \
        [helper.make_node("Relu", ["c"], ["y"])]
    m = make_model([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
                    *tail],
                   {"x": (np.float32, [1, cin, hw, hw])}, {"y": (np.float32, [1, cout, hw, hw])},
                   {"w": rng.standard_normal((cout, cin, 3, 3)).astype(np.float32),
                    "b": rng.standard_normal(cout).astype(np.float32)}, name="tiny")
    path = tmp_path / "tiny.onnx"
    onnx.save(m, path)
    x = rng.standard_normal((1, cin, hw, hw)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    return path, {"x": x}


def test_resnet18_refused_for_nrf52840dk_with_the_numbers(tmp_path, capsys):
    from toolchain.zoo import ZOO

    onnx.save(ZOO["resnet18"].build(), tmp_path / "resnet18.onnx")
    rc = main(["compile", str(tmp_path / "resnet18.onnx"), "--board", "nrf52840dk",
               "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2
    assert "model resnet18.onnx does not fit board nrf52840dk: flash needs 46,796,448 B, " \
           "the board has 1,048,576 B (44.6x)" in err
    assert not (tmp_path / "out").exists()


def test_activations_too_large_refused_with_ram_numbers(tmp_path):
    from toolchain.boards import compile_board

    path, _ = _tiny(tmp_path, hw=160, cin=3, cout=8)  # 160*160*8 floats = 800 KiB output
    with pytest.raises(TargetError) as e:
        compile_board(path, "nrf52840dk", tmp_path / "out", build=False)
    msg = str(e.value)
    assert "does not fit board nrf52840dk: RAM needs" in msg
    assert "the board has 262,144 B" in msg and "arena" in msg
    assert "flash needs" not in msg  # the weights fit


@needs_cross
def test_link_overflow_is_refused_with_the_linker_numbers(tmp_path):
    """A board whose flash is above the estimate but below what the firmware links to: the
    check before compiling lets it through, the link refuses it with exact numbers."""
    from toolchain.boards import compile_board
    from toolchain.boards.descriptor import BOARDS_DIR

    path, _ = _tiny(tmp_path)
    out, report = compile_board(path, "nrf52840dk", tmp_path / "b", build=False)
    assert report is None
    est = json.loads((out / "metadata.json").read_text())["board"]["estimate"]["flash"]
    assert "__flash_size = 0x100000;" in (out / "firmware" / "board.ld").read_text()

    yaml = (BOARDS_DIR / "nrf52840dk.yaml").read_text().replace(
        "size: 0x100000}", f"size: {est + 256}}}")
    (tmp_path / "small.yaml").write_text(yaml.replace("name: nrf52840dk", "name: small"))
    with pytest.raises(TargetError, match=r"the firmware does not fit board small: flash "
                       rf"overflowed by [0-9,]+ B \(needs [0-9,]+ B, the board has "
                       rf"{est + 256:,} B\) \(the linked ELF"):
        compile_board(path, tmp_path / "small.yaml", tmp_path / "c")


@needs_cross
def test_int8_firmware_builds_under_a_firmware_teams_warnings(tmp_path):
    """The whole firmware of a board with section defines (nucleo-l4r5zi: main.c,
    inputs.c, startup.c and the bundle, both links) at -Os under the strict set of
    docs/bundle.md, "Into your own build", for an int8 conv (the DSP helpers) and global
    average pool (its one-element accumulator): both warned before session 24."""
    from tests.bundle.test_own_build import FIRMWARE_WARNINGS
    from toolchain.boards import compile_board
    from toolchain.zoo.quantized import kiln_qdq

    rng = np.random.default_rng(0)
    m = make_model([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
                    helper.make_node("Relu", ["c"], ["r"]),
                    helper.make_node("GlobalAveragePool", ["r"], ["y"])],
                   {"x": (np.float32, [1, 8, 8, 8])}, {"y": (np.float32, [1, 8, 1, 1])},
                   {"w": rng.standard_normal((8, 8, 3, 3)).astype(np.float32),
                    "b": rng.standard_normal(8).astype(np.float32)}, name="tinyq")
    onnx.save(kiln_qdq(m), tmp_path / "tinyq.onnx")
    out, _ = compile_board(tmp_path / "tinyq.onnx", "nucleo-l4r5zi", tmp_path / "b",
                           build=False)
    kernels = (out / "src" / "kernels.c").read_text()
    assert "__smlad" in kernels and "qpool_sum" in kernels
    res = subprocess.run(["make", "-s", "-C", str(out / "firmware"), "all", "OPT=-Os",
                          "KERNEL_OPT=-Os", f"EXTRA_CFLAGS={' '.join(FIRMWARE_WARNINGS)}"],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (out / "firmware" / "build" / "board" / "firmware.elf").is_file()


@needs_qemu
def test_firmware_exit_status_reaches_the_caller(tmp_path, capsys):
    from toolchain.boards import compile_board, run_on_qemu

    path, inputs = _tiny(tmp_path, softmax=True)  # an arena to misalign
    out, _ = compile_board(path, "qemu-mps2-an386", tmp_path / "b")
    assert run_on_qemu(out, inputs).outputs["y"].shape == (1, 4, 8, 8)
    with pytest.raises(SimulationError, match=r"the firmware exited with status 12 \(the arena "
                       r"is misaligned\) on QEMU mps2-an386: kiln-error 2"):
        run_on_qemu(out, inputs, extra_cflags="-DKILN_TEST_MISALIGNED_ARENA")
    # through the CLI: a failing firmware is a non-zero exit with the message
    mk = out / "firmware" / "Makefile"
    mk.write_text("EXTRA_CFLAGS = -DKILN_TEST_MISALIGNED_ARENA\n" + mk.read_text())
    subprocess.run(["make", "-C", str(out / "firmware"), "clean"], check=True,
                   capture_output=True)
    rc = main(["run", str(out), "--inputs", str(tmp_path / "in.npz")])
    assert rc == 2
    assert "the firmware exited with status 12" in capsys.readouterr().err
    with pytest.raises(SimulationError, match="did not finish within 0 s"):
        run_on_qemu(out, inputs, timeout=0.001)


@needs_qemu
def test_cli_compile_run_check_and_wrong_inputs(tmp_path, capsys):
    path, inputs = _tiny(tmp_path)
    out = tmp_path / "fw"
    assert main(["compile", str(path), "--board", "nucleo-l4r5zi", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "for board nucleo-l4r5zi (cortex-m4, target cortex-m4)" in text
    assert "flash " in text and " of 2,097,152 " in text and "RAM " in text
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["board"]["size"]["flash"]["total"] > 0
    # QEMU link: the board's sizes at the emulator's addresses; board link: real addresses
    qemu_ld = (out / "firmware" / "qemu.ld").read_text()
    board_ld = (out / "firmware" / "board.ld").read_text()
    for text, flash in ((qemu_ld, "0x00000000"), (board_ld, "0x08000000")):
        assert f"__flash = {flash};" in text and "__flash_size = 0x200000;" in text
        assert "__ram = 0x20000000;" in text and "__ram_size = 0xa0000;" in text
    assert main(["run", str(out), "--inputs", str(tmp_path / "in.npz"), "--check",
                 "--outputs", str(tmp_path / "out.npz")]) == 0
    text = capsys.readouterr().out
    assert "check passed" in text and "instructions (QEMU -icount)" in text
    assert "cycles not modelled by QEMU" in text
    with np.load(tmp_path / "out.npz") as got:
        assert list(got.files) == ["y"]
        ref = np.maximum(got["y"], 0)
        assert np.array_equal(got["y"], ref)
    np.savez(tmp_path / "bad.npz", x=inputs["x"][:, :2])
    assert main(["run", str(out), "--inputs", str(tmp_path / "bad.npz")]) == 2
    assert "input 'x' is float32[1, 2, 8, 8], the bundle expects float32[1, 3, 8, 8]" in \
        capsys.readouterr().err
    assert main(["compile", str(path), "--board", "nucleo-l4r5zi", "--target", "x86_64-avx2",
                 "-o", str(tmp_path / "x")]) == 2
    assert "--target x86_64-avx2 and --board nucleo-l4r5zi disagree" in capsys.readouterr().err


@needs_qemu
def test_board_startup_code_runs(tmp_path):
    """The real-board build (boards/startup + vector table, no picolibc crt0) linked at
    QEMU's addresses boots on QEMU and gives the same outputs."""
    from toolchain.boards import compile_board, load_board, run_on_qemu
    from toolchain.boards.qemu import parse_output, qemu_command

    path, inputs = _tiny(tmp_path)
    out, _ = compile_board(path, "nrf52840dk", tmp_path / "b")
    expected = run_on_qemu(out, inputs).outputs
    fw = out / "firmware"
    subprocess.run(["make", "-C", str(fw), "board", "BOARD_LD=qemu.ld"], check=True,
                   capture_output=True)
    elf = fw / "build" / "board" / "firmware.elf"
    proc = subprocess.run(qemu_command(load_board("nrf52840dk"), elf), capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    meta = json.loads((out / "metadata.json").read_text())
    got = parse_output(proc.stdout, meta)[0]
    assert np.array_equal(got["y"], expected["y"])
    # a board with no debugger: picolibc's dummyhost instead of semihosting links too.
    # OSLIB reaches only startup.o (-DKILN_NO_HOST) and the link, so those are what is
    # rebuilt (-W: startup.c taken as changed); the other objects are the ones above, at
    # the same flags (the ELF is byte-identical to a -B rebuild of everything)
    proc = subprocess.run(["make", "-C", str(fw), "board", "OSLIB=dummyhost", "-W",
                           "startup.c"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "-DKILN_NO_HOST -c startup.c" in proc.stdout
    assert "--oslib=dummyhost -nostartfiles" in proc.stdout


@needs_qemu
def test_cortex_m7_board(zoo_compiled):
    from toolchain.boards import run_on_qemu
    from toolchain.bundle.check import compare
    from toolchain.frontend.onnx import from_onnx
    from toolchain.graph.reference import run_graph

    c = zoo_compiled("ds_cnn")
    path, report = c.for_board("stm32f746g-disco")
    assert report["ram"]["available"] == 320 * 1024
    assert "-mcpu=cortex-m7" in (path / "firmware" / "Makefile").read_text()
    run = run_on_qemu(path, c.inputs)
    ref = run_graph(from_onnx(c.model), c.inputs)
    assert all(r["ok"] for r in compare(run.outputs, ref, 1e-4))


@needs_qemu
def test_bundle_in_a_parent_cmake_firmware(tmp_path):
    """The bundle's CMake library, added with add_subdirectory to a firmware project that
    uses the generated toolchain file, links and runs on QEMU."""
    from toolchain.boards import compile_board, load_board, run_on_qemu
    from toolchain.boards.qemu import parse_output, qemu_command

    require("cmake")
    require("readelf")
    path, inputs = _tiny(tmp_path)
    out, _ = compile_board(path, "qemu-mps2-an386", tmp_path / "bundle", name="tiny")
    expected = run_on_qemu(out, inputs).outputs  # also writes inputs.c with these inputs
    parent = tmp_path / "app"
    parent.mkdir()
    (parent / "CMakeLists.txt").write_text(f"""\
cmake_minimum_required(VERSION 3.13)
project(app C)
set(KILN_TINY_DEMO OFF CACHE BOOL "" FORCE)
add_subdirectory({out} tiny)
add_executable(app.elf {out}/firmware/main.c {out}/firmware/inputs.c)
target_compile_definitions(app.elf PRIVATE KILN_TIMER_BASE=0x40000000u KILN_TIMER_HZ=25000000u)
target_link_libraries(app.elf PRIVATE tiny)
target_link_options(app.elf PRIVATE --crt0=semihost -T {out}/firmware/qemu.ld)
""")
    build = tmp_path / "build"
    for cmd in (["cmake", "-S", str(parent), "-B", str(build),
                 f"-DCMAKE_TOOLCHAIN_FILE={out}/firmware/toolchain.cmake"],
                ["cmake", "--build", str(build), "-j2"]):
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    # the weight blob's object (CMake's ASM, not C) is built for the board's CPU too
    arch = {}
    for obj in ("weights_blob.S", "kernels.c"):
        (found,) = build.glob(f"tiny/**/{obj}.obj")
        attrs = subprocess.run(["readelf", "-A", str(found)], capture_output=True, text=True,
                               check=True).stdout
        arch[obj] = re.findall(r"Tag_CPU_arch: (\S+)", attrs)
    assert arch["weights_blob.S"] == arch["kernels.c"] == ["v7E-M"], arch
    proc = subprocess.run(qemu_command(load_board("qemu-mps2-an386"), build / "app.elf"),
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    meta = json.loads((out / "metadata.json").read_text())
    got = parse_output(proc.stdout, meta)[0]["y"]
    # CMake's default build type has no -O2 (no fused multiply-adds): equal to rounding
    np.testing.assert_allclose(got, expected["y"], rtol=1e-5, atol=1e-5)


@needs_qemu
def test_stack_high_water_mark_and_overflow(tmp_path):
    from toolchain.boards import compile_board, run_on_qemu
    from toolchain.boards.descriptor import BOARDS_DIR

    path, inputs = _tiny(tmp_path)
    out, _ = compile_board(path, "nrf52840dk", tmp_path / "b")
    used, size = run_on_qemu(out, inputs).stack_bytes
    assert 0 < used < size == 8192
    yaml = (BOARDS_DIR / "nrf52840dk.yaml").read_text().replace("stack_bytes: 8192",
                                                                 "stack_bytes: 256")
    (tmp_path / "tight.yaml").write_text(yaml.replace("name: nrf52840dk", "name: tight"))
    out, _ = compile_board(path, tmp_path / "tight.yaml", tmp_path / "c")
    with pytest.raises(SimulationError, match="stack overflow: the firmware used all 256 bytes "
                       "of its stack .*raise stack_bytes in board tight's descriptor"):
        run_on_qemu(out, inputs)


@needs_qemu
@pytest.mark.parametrize("board", ["qemu-mps2-an500", "qemu-mps2-an386"])
def test_emulator_boards_run_and_match_the_reference(tmp_path, board):
    from toolchain.boards import compile_board, run_on_qemu
    from toolchain.frontend.onnx import from_onnx
    from toolchain.graph.reference import run_graph

    path, inputs = _tiny(tmp_path, hw=12, cin=5, cout=7)
    out, report = compile_board(path, board, tmp_path / "b")
    assert report["ram"]["stack"] == 16384 and report["flash"]["available"] == 4 << 20
    run = run_on_qemu(out, inputs)
    ref = run_graph(from_onnx(str(path)), inputs)["y"]
    np.testing.assert_allclose(run.outputs["y"], ref, rtol=1e-5, atol=1e-5)
    assert run.instructions > 1000


def test_board_bundle_is_deterministic(tmp_path):
    from toolchain.boards import compile_board

    path, _ = _tiny(tmp_path)
    a, _ = compile_board(path, "stm32f746g-disco", tmp_path / "a", build=False)
    b, _ = compile_board(path, "stm32f746g-disco", tmp_path / "b", build=False)
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files_a == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert any(str(f).startswith("firmware/") for f in files_a)
    for f in files_a:
        assert (a / f).read_bytes() == (b / f).read_bytes(), f


@needs_cross
@pytest.mark.parametrize("failure", ["missing tool", "template", "link", "fit"])
def test_a_failed_board_compile_leaves_nothing_and_loses_nothing(tmp_path, monkeypatch,
                                                                 failure):
    """A failed ``compile --board`` writes no directory, and with --force keeps the bundle
    that was there (each failure point: tool check, rendering, the firmware link, fit)."""
    from toolchain.boards import build as board_build
    from toolchain.boards import compile_board
    from toolchain.errors import BuildError, KilnError

    path, _ = _tiny(tmp_path)
    kept = tmp_path / "kept"
    compile_board(path, "nucleo-l4r5zi", kept, build=False)
    before = sorted(p.relative_to(kept) for p in kept.rglob("*"))
    if failure == "missing tool":
        real = shutil.which
        monkeypatch.setattr(shutil, "which",
                            lambda n, *a, **k: None if n == "arm-none-eabi-gcc" else real(n))
    elif failure == "template":
        def broken(meta, b):
            raise RuntimeError("template error")
        monkeypatch.setattr(board_build, "firmware_files", broken)
    elif failure == "link":
        def no_link(out, b):
            raise BuildError("building the firmware failed (test)")
        monkeypatch.setattr(board_build, "build_and_report", no_link)
    board = "nucleo-l4r5zi"
    if failure == "fit":
        from toolchain.boards.descriptor import BOARDS_DIR
        yaml = (BOARDS_DIR / "nrf52840dk.yaml").read_text().replace(
            "name: nrf52840dk", "name: tiny").replace("size: 0x100000}", "size: 0x400}")
        (tmp_path / "tiny.yaml").write_text(yaml)
        board = str(tmp_path / "tiny.yaml")
    with pytest.raises((KilnError, RuntimeError)):
        compile_board(path, board, tmp_path / "new")
    assert not (tmp_path / "new").exists()
    with pytest.raises((KilnError, RuntimeError)):
        compile_board(path, board, kept, force=True)
    assert sorted(p.relative_to(kept) for p in kept.rglob("*")) == before
    assert [p.name for p in tmp_path.iterdir() if ".kiln-" in p.name] == []


@needs_cross
def test_kernels_build_at_kernel_opt_and_the_rest_at_opt(tmp_path):
    """The kernels take KERNEL_OPT (-O3: depthwise and pooling loops run 0.4-0.9x the
    instructions of -O2), the runtime and main OPT (-O2); both can be overridden."""
    from toolchain.boards import compile_board

    path, _ = _tiny(tmp_path)
    # the commands make would run (-n -B) need the project, not a build of it
    out, _ = compile_board(path, "qemu-mps2-an386", tmp_path / "b", build=False)

    def flags(*extra: str) -> dict[str, str]:
        proc = subprocess.run(["make", "-n", "-B", "-C", str(out / "firmware"), "qemu",
                               *extra], capture_output=True, text=True, check=True)
        return {obj: next(f for f in line.split() if f.startswith("-O"))
                for line in proc.stdout.splitlines()
                for obj in ("kernels.o", "kiln_runtime.o", "main.o")
                if line.endswith(f"/{obj}") and " -c " in line}

    assert flags() == {"kernels.o": "-O3", "kiln_runtime.o": "-O2", "main.o": "-O2"}
    assert flags("KERNEL_OPT=-Os")["kernels.o"] == "-Os"
    assert set(flags("OPT=-O1").values()) == {"-O1"}


def test_firmware_builds_compile_through_ccache_where_installed(tmp_path, monkeypatch):
    """Kiln's ``make`` of a firmware passes ``CC="<ccache> arm-none-eabi-gcc"`` where
    ``ccache`` is on PATH (a caller's own ``CC`` wins), and nothing where it is not."""
    from toolchain.boards import build

    seen = []
    monkeypatch.setattr(build, "require_tool", lambda name, hint: name)
    monkeypatch.setattr(build.subprocess, "run", lambda cmd, **kw: seen.append(cmd) or
                        subprocess.CompletedProcess(cmd, 0, "", ""))
    monkeypatch.setattr(build.shutil, "which",
                        lambda name: "/opt/bin/ccache" if name == "ccache" else None)
    build.make(tmp_path, "qemu")
    build.make(tmp_path, "qemu", extra={"CC": "my-gcc", "EXTRA_CFLAGS": "-DX"})
    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    build.make(tmp_path, "board")
    assert seen[0][-1] == "CC=/opt/bin/ccache arm-none-eabi-gcc"
    assert seen[1][-2:] == ["CC=my-gcc", "EXTRA_CFLAGS=-DX"]
    assert not any(a.startswith("CC=") for a in seen[2])
