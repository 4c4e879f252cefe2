"""``kiln sim``: listing, checking, running on fsim, DRAM in/out, exit statuses."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from toolchain.cli import main
from toolchain.vta.builder import ProgramBuilder
from toolchain.vta.isa import MEM_INP, MEM_UOP
from toolchain.vta.workloads import gemm_workload


@pytest.fixture()
def workload(tmp_path):
    wl = gemm_workload(32, 32, 32, tiling=(16, 1, 1), seed=5)
    path = tmp_path / "prog.bin"
    wl.vthread.save(path)
    return wl, path


def test_disasm_prints_listing(workload, capsys):
    wl, path = workload
    assert main(["sim", str(path), "--disasm"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(wl.vthread.insns)
    assert out[-1] == f"{len(out) - 1:04d} FINISH"
    assert any("push_next" in line for line in out)


def test_fsim_run_writes_dram_and_prints_counters(workload, tmp_path, capsys):
    wl, path = workload
    out_path = tmp_path / "out.bin"
    assert main(["sim", str(path), "--fsim", "--tokens", "--seed", "3",
                 "--out-dram", str(out_path)]) == 0
    captured = capsys.readouterr()
    assert "fsim counters:" in captured.out
    assert "  macs" in captured.out and str(wl.macs) in captured.out
    dram = np.frombuffer(out_path.read_bytes(), np.uint8)
    np.testing.assert_array_equal(wl.read_output(dram), wl.expected)


def test_default_action_is_fsim_and_dram_override(workload, tmp_path, capsys):
    wl, path = workload
    image = tmp_path / "image.bin"
    image.write_bytes(wl.vthread.dram.tobytes())
    out_path = tmp_path / "out.bin"
    assert main(["sim", str(path), "--dram", str(image), "--out-dram", str(out_path)]) == 0
    assert "fsim counters:" in capsys.readouterr().out
    dram = np.frombuffer(out_path.read_bytes(), np.uint8)
    np.testing.assert_array_equal(wl.read_output(dram), wl.expected)


def test_out_dram_naming_a_directory_is_refused_before_the_run(workload, tmp_path, capsys):
    _, path = workload
    assert main(["sim", str(path), "--fsim", "--out-dram", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert f"--out-dram {tmp_path}: is a directory" in captured.err
    assert "fsim counters:" not in captured.out  # nothing ran


def test_check_ok(workload, capsys):
    _, path = workload
    assert main(["sim", str(path), "--check"]) == 0
    assert capsys.readouterr().out.startswith("check: ok (")


def test_deadlocking_program_exits_2_with_report(tmp_path, capsys):
    b = ProgramBuilder()
    x = b.data("x", np.zeros((1, 1, 16), np.int8))
    b.load(MEM_INP, 0, x, pop_next=True, push_next=True)
    b.gemm(0, 0, pop_prev=True, push_prev=True)
    b.finish()
    path = tmp_path / "dead.bin"
    b.build().save(path)
    assert main(["sim", str(path), "--fsim"]) == 2
    err = capsys.readouterr().err
    assert "static check failed" in err
    assert "certain deadlock: load engine blocked at instruction 0 (LOAD INP)" in err


def test_user_errors_exit_2(tmp_path, workload, capsys):
    _, path = workload
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"hello")
    assert main(["sim", str(junk)]) == 2
    assert "not a Kiln VTA program" in capsys.readouterr().err
    assert main(["sim", str(tmp_path / "none.bin")]) == 2
    assert "cannot read program" in capsys.readouterr().err
    assert main(["sim", str(path), "--latency", "5"]) == 2
    assert "--latency/--bandwidth apply to --rtl only" in capsys.readouterr().err
    assert main(["sim", str(path), "--dram", str(tmp_path / "nope")]) == 2
    assert "cannot read DRAM image" in capsys.readouterr().err


def _dram_past_the_image(tmp_path):
    """A program whose STORE writes past its 64-byte DRAM image."""
    from toolchain.vta.isa import Finish, Store
    from toolchain.vta.program import Program

    path = tmp_path / "past.bin"
    Program([Store(dram_base=1000, x_size=2, x_stride=2), Finish()],
            np.zeros(64, np.uint8)).save(path)
    return path


@pytest.mark.parametrize("engine", ["--fsim", "--check", "--rtl"])
def test_dram_access_past_the_image_exits_2_before_any_run(tmp_path, engine, monkeypatch,
                                                            capsys):
    path = _dram_past_the_image(tmp_path)
    out = tmp_path / "out.bin"

    def never(*args, **kwargs):
        raise AssertionError("the RTL must not run")

    import types
    monkeypatch.setitem(sys.modules, "toolchain.vta.rtl", types.SimpleNamespace(run_rtl=never))
    assert main(["sim", str(path), engine, *(["--out-dram", str(out)] if engine != "--check"
                                             else [])]) == 2
    err = capsys.readouterr().err
    assert "static check failed" in err
    assert ("instruction 0 (STORE): DRAM element 1001 (bytes 16016..16031) is outside the "
            "64-byte DRAM image") in err
    assert "Traceback" not in err and not out.exists()


def _count_fsim_runs(monkeypatch) -> list[int]:
    """The functional simulator's runs, counted (``refuse_unsafe`` calls it by name); the
    RTL's Verilator build raises instead of building: nothing runs on the RTL."""
    from toolchain.errors import SimulationError
    from toolchain.vta import fsim, rtl

    runs, real = [], fsim.run_fsim

    def counted(*args, **kwargs):
        runs.append(1)
        return real(*args, **kwargs)

    def no_rtl(*args, **kwargs):
        raise SimulationError("test: the RTL is not built here")

    monkeypatch.setattr(fsim, "run_fsim", counted)
    monkeypatch.setattr(rtl, "build", no_rtl)
    return runs


def test_rtl_run_of_a_loop_past_a_buffer_is_refused_before_the_run(tmp_path, monkeypatch,
                                                                     capsys):
    # ACC rows 2000..2049: the RTL's behaviour is undefined (it ran and exited 0)
    from toolchain.vta.isa import Uop

    b = ProgramBuilder()
    b.load_uops(b.uops("k", [Uop(acc=2000)]), 0)
    b.gemm(0, 1, iter_in=50, dst=(0, 1), reset=True)
    b.finish()
    path = tmp_path / "acc.bin"
    b.build().save(path)
    runs = _count_fsim_runs(monkeypatch)
    assert main(["sim", str(path), "--rtl"]) == 2
    err = capsys.readouterr().err
    assert f"{path}: refused before the RTL run" in err  # named by its file
    assert "instruction 1 (GEMM): ACC row 2048 is outside the buffer (depth 2048)" in err
    assert "the RTL is not built here" not in err and len(runs) == 1


def test_rtl_run_runs_the_functional_simulator_once(workload, monkeypatch, capsys):
    """``kiln sim --rtl`` ran the functional simulator twice before the RTL (once itself,
    to name the file in a refusal, and again inside run_rtl): once now."""
    _, path = workload
    runs = _count_fsim_runs(monkeypatch)
    assert main(["sim", str(path), "--rtl"]) == 2  # stopped where the RTL would be built
    assert "the RTL is not built here" in capsys.readouterr().err
    assert len(runs) == 1


def test_dram_image_too_small_for_the_program_exits_2(workload, tmp_path, capsys):
    _, path = workload
    small, out = tmp_path / "small.img", tmp_path / "out.bin"
    small.write_bytes(bytes(100))
    assert main(["sim", str(path), "--fsim", "--dram", str(small), "--out-dram", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"static check failed against --dram {small} (100 bytes)" in err
    assert "is outside the 100-byte DRAM image" in err
    assert not out.exists()


def test_rtl_unavailable_is_a_clear_error(workload, monkeypatch, capsys):
    _, path = workload
    monkeypatch.setitem(sys.modules, "toolchain.vta.rtl", None)  # import fails
    assert main(["sim", str(path), "--rtl"]) == 2
    assert "the RTL runner is unavailable" in capsys.readouterr().err


def test_rtl_runner_is_called_with_program_dram_and_settings(workload, monkeypatch, capsys):
    wl, path = workload
    import types

    calls = {}

    def fake_run_rtl(program, dram, config, latency, bandwidth, where):
        calls.update(n=len(program.insns), size=len(dram), latency=latency, bw=bandwidth,
                     where=where)
        return dram, {"cycles": 1234}

    monkeypatch.setitem(sys.modules, "toolchain.vta.rtl",
                        types.SimpleNamespace(run_rtl=fake_run_rtl))
    assert main(["sim", str(path), "--rtl", "--latency", "99", "--bandwidth", "4"]) == 0
    assert calls == dict(n=len(wl.vthread.insns), size=len(wl.vthread.dram), latency=99, bw=4,
                         where=str(path))
    assert "cycles  1234" in capsys.readouterr().out


def test_console_entry_point(workload):
    _, path = workload
    proc = subprocess.run([sys.executable, "-m", "toolchain", "sim", str(path), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "check: ok" in proc.stdout


def _patched(data: bytes, what: str) -> bytes:
    insn = 64 + 16 * 2  # instruction 2 of the container
    word = int.from_bytes(data[insn:insn + 16], "little")
    if what == "opcode":
        word = word & ~7 | 6
    elif what == "memory_type":
        word = word & ~(7 << 7) | 7 << 7
    elif what == "reserved":
        word |= 1 << 127
    elif what == "trailing":
        return data + b"\0"
    elif what == "truncated":
        return data[:-1]
    return data[:insn] + word.to_bytes(16, "little") + data[insn + 16:]


@pytest.mark.parametrize("what, message", [
    ("opcode", "instruction 2: invalid opcode 6"),
    ("memory_type", "instruction 2: LOAD: memory_type 7 is not one of"),
    ("reserved", "instruction 2: LOAD has reserved bits set"),
    ("trailing", "trailing data after the container"),
    ("truncated", "truncated or corrupt program file"),
])
def test_a_corrupt_program_file_exits_2_naming_the_problem(workload, tmp_path, what, message,
                                                           capsys):
    _, path = workload
    bad, out = tmp_path / "bad.bin", tmp_path / "out.bin"
    bad.write_bytes(_patched(path.read_bytes(), what))
    assert main(["sim", str(bad), "--fsim", "--out-dram", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: {message}" in err or (message in err and str(bad) in err)
    assert "Traceback" not in err and not out.exists()


def test_run_rtl_refuses_what_kiln_sim_rtl_refuses_before_building(monkeypatch):
    # run_rtl from Python used to skip the functional simulator's checks: a GEMM past a
    # buffer ran on the RTL (undefined) and a 2^24-step loop simulated for minutes
    from toolchain.errors import SimulationError
    from toolchain.vta import rtl
    from toolchain.vta.isa import Finish, Gemm, Load, Uop
    from toolchain.vta.program import Program

    def never(*args, **kwargs):
        raise AssertionError("the RTL must not be built or run")

    monkeypatch.setattr(rtl, "build", never)
    b = ProgramBuilder()
    b.load_uops(b.uops("k", [Uop(acc=2000)]), 0)
    b.gemm(0, 1, iter_in=50, dst=(0, 1), reset=True)
    b.finish()
    with pytest.raises(SimulationError, match=r"^program: refused before the RTL run \(the "
                                              r"functional simulator, run first, reports: "
                                              r"instruction 1 \(GEMM\): ACC row 2048 is outside "
                                              r"the buffer \(depth 2048\)"):
        rtl.run_rtl(b.build())
    insns = [Load(memory_type=MEM_UOP, x_size=1, x_stride=1),
             Gemm(uop_end=1, iter_out=4097, iter_in=4097, reset=True), Finish()]
    with pytest.raises(SimulationError, match=r"refused before the RTL run .* 16,785,409 "
                                              r"micro-op steps .* more than the functional "
                                              r"simulator runs in one instruction"):
        rtl.run_batch([(Program(insns, np.zeros(4, np.uint8)), None)])


def test_a_seed_without_token_mode_is_refused_not_ignored(workload, capsys):
    # plain mode runs in program order: the seed did nothing and said nothing
    from toolchain.errors import OptionError
    from toolchain.vta.cfsim import run_cfsim
    from toolchain.vta.fsim import run_fsim

    wl, path = workload
    assert main(["sim", str(path), "--fsim", "--seed", "3"]) == 2
    assert "--seed 3 picks the engines' turns of --tokens; add --tokens" in \
        capsys.readouterr().err
    for run in (run_fsim, run_cfsim):
        with pytest.raises(OptionError, match=r"seed=3 picks the engines' turns in token "
                                              r"mode; pass tokens=True"):
            run(wl.vthread, seed=3)
    assert run_cfsim(wl.vthread, tokens=True, seed=3).counters["insn_FINISH"] == 1


def test_run_rtl_refuses_a_timeout_under_one_cycle(monkeypatch):
    # a timeout under one cycle was taken: the RTL was built and started only to time out
    from toolchain.errors import SimulationError
    from toolchain.vta import rtl

    b = ProgramBuilder()
    b.finish()
    monkeypatch.setattr(rtl, "build", lambda *a, **k: pytest.fail("built"))
    for bad in (0, -1):
        with pytest.raises(SimulationError, match=f"timeout_cycles must be at least 1 cycle, "
                                                  f"got {bad}"):
            rtl.run_rtl(b.build(), timeout_cycles=bad)


@pytest.mark.parametrize("flags", [["--check", "--out-dram", "o.bin"], ["--disasm", "--tokens"],
                                   ["--check", "--tokens", "--out-dram", "o.bin"]])
def test_run_options_without_a_run_are_refused(workload, tmp_path, flags, capsys):
    # --check --out-dram exited 0 and wrote nothing; --tokens was ignored
    _, path = workload
    flags = [str(tmp_path / f) if f == "o.bin" else f for f in flags]
    assert main(["sim", str(path), *flags]) == 2
    err = capsys.readouterr().err
    named = " and ".join(f for f in ("--out-dram", "--tokens") if f in flags)
    assert f"{named} apply to a run, and --disasm and --check run nothing: add --fsim" in err
    assert not (tmp_path / "o.bin").exists()
    assert main(["sim", str(path), "--check", "--fsim", "--tokens", "--out-dram",
                 str(tmp_path / "o.bin")]) == 0
    assert (tmp_path / "o.bin").exists()
