"""The C functional simulator (runtime_c/kiln_vta_fsim.c, through the C driver) against the
Python one: DRAM after the run, counters and execution order, bit for bit, on random
programs, compiled dense and conv2d layers, and the hand-written GEMM workloads."""

from __future__ import annotations

import numpy as np
import pytest

from toolchain.vta.cfsim import program_counters, run_cfsim
from toolchain.vta.compile import ConvTiles, Tiles, compile_conv2d, compile_dense
from toolchain.vta.config import VTAConfig
from toolchain.vta.fsim import FsimResult, run_fsim
from toolchain.vta.randprog import random_program
from toolchain.vta.workloads import gemm_workload

#: a small variant: BATCH 2, 8-wide blocks, short buffers and queues
SMALL = VTAConfig(batch=2, block_in=8, block_out=8, input_bytes=2048, weight_bytes=4096,
                  acc_bytes=8192, uop_bytes=1024, cmd_queue_depth=4, token_queue_depth=2,
                  name="small")


def _nonzero(counters: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in counters.items() if v or k == "instructions"}


def _same(c: FsimResult, py: FsimResult) -> None:
    np.testing.assert_array_equal(c.dram, py.dram)
    assert c.counters == _nonzero(py.counters)


@pytest.mark.parametrize("seed", range(40))
def test_random_programs_agree_in_every_mode(seed):
    prog = random_program(seed)
    plain = run_fsim(prog)
    _same(run_cfsim(prog), plain)
    tok = run_fsim(prog, tokens=True)
    ctok = run_cfsim(prog, tokens=True)
    _same(ctok, tok)
    assert ctok.order == tok.order  # both engines take turns load, compute, store
    for s in (seed, seed + 1000):
        shuffled = run_cfsim(prog, tokens=True, seed=s)
        _same(shuffled, plain)
        assert sorted(shuffled.order) == list(range(len(prog.insns)))


@pytest.mark.parametrize("seed", range(12))
def test_random_programs_agree_on_another_configuration(seed):
    prog = random_program(seed, SMALL, phases=3, scale=3)
    plain = run_fsim(prog)
    _same(run_cfsim(prog), plain)
    tok = run_fsim(prog, tokens=True)
    ctok = run_cfsim(prog, tokens=True)
    _same(ctok, tok)
    assert ctok.order == tok.order


def test_seeded_runs_really_interleave():
    """With a seed the C engines run out of program order (so races would show)."""
    reordered = 0
    for seed in range(10):
        prog = random_program(seed, phases=3)
        order = run_cfsim(prog, tokens=True, seed=seed).order
        reordered += order != sorted(order)
    assert reordered >= 5


def _dense_ref(x, w, shift):
    acc = x.astype(np.int64) @ w.astype(np.int64)
    acc = (acc + 2**31) % 2**32 - 2**31
    return np.clip(acc >> shift, -128, 127).astype(np.int8)


@pytest.mark.parametrize("m, k, n, tiles, vthreads", [
    (16, 64, 64, Tiles(2, 2, 2), 2),
    (20, 72, 40, Tiles(5, 3, 5), 2),
    (7, 33, 17, None, 1),
    (6, 64, 64, Tiles(6, 2, 2, "n"), 2),
    (8, 64, 64, Tiles(2, 2, 2, resident=True), 2),
])
def test_compiled_dense_layers(m, k, n, tiles, vthreads):
    rng = np.random.default_rng(m * k + n)
    x = rng.integers(-128, 128, (m, k), dtype=np.int8)
    w = rng.integers(-128, 128, (k, n), dtype=np.int8)
    layer = compile_dense(w, m, shift=9, tiles=tiles, vthreads=vthreads, layer="fc")
    dram = layer.image(x)
    py = run_fsim(layer.program, dram, tokens=True)
    for seed in (None, 5):
        c = run_cfsim(layer.program, dram, tokens=True, seed=seed)
        _same(c, py)
        np.testing.assert_array_equal(layer.read_output(c.dram), _dense_ref(x, w, 9))


def _conv_ref(x, w, stride, pad, shift):
    oc, ic, k, _ = w.shape
    xp = np.pad(x.astype(np.int64), ((0, 0), (pad, pad), (pad, pad)))
    oh = (xp.shape[1] - k) // stride + 1
    ow = (xp.shape[2] - k) // stride + 1
    out = np.zeros((oc, oh, ow), np.int64)
    for dy in range(k):
        for dx in range(k):
            patch = xp[:, dy:dy + stride * oh:stride, dx:dx + stride * ow:stride]
            out += np.einsum("ihw,oi->ohw", patch, w[:, :, dy, dx].astype(np.int64))
    return np.clip(out >> shift, -128, 127).astype(np.int8)


@pytest.mark.parametrize("oc, ic, h, k, stride, pad, tiles", [
    (20, 24, 6, 3, 1, 1, None),
    (32, 32, 8, 3, 2, 1, None),
    (32, 64, 7, 1, 2, 0, None),
    (32, 32, 8, 3, 1, 1, ConvTiles(4, 2, 2)),
])
def test_compiled_conv2d_layers(oc, ic, h, k, stride, pad, tiles):
    rng = np.random.default_rng(oc + ic * h)
    w = rng.integers(-128, 128, (oc, ic, k, k), dtype=np.int8)
    x = rng.integers(-128, 128, (ic, h, h), dtype=np.int8)
    conv = compile_conv2d(w, h, h, shift=10, stride=stride, pad=pad, tiles=tiles, layer="conv")
    dram = conv.image(x)
    c = run_cfsim(conv.program, dram, tokens=True)
    _same(c, run_fsim(conv.program, dram, tokens=True))
    np.testing.assert_array_equal(conv.read_output(c.dram), _conv_ref(x, w, stride, pad, 10))


@pytest.mark.parametrize("shape, requant", [
    ((40, 64, 48), "clip"),
    ((33, 100, 70), "shift"),
    ((16, 32, 32), "none"),
])
def test_hand_written_workloads(shape, requant):
    wl = gemm_workload(*shape, seed=1, requant=requant)
    for prog in (wl.serial, wl.vthread):
        c = run_cfsim(prog, tokens=True)
        _same(c, run_fsim(prog, tokens=True))
        np.testing.assert_array_equal(wl.read_output(c.dram), wl.expected)


def test_counters_are_the_python_simulators():
    """Every counter the Python simulator reports exists in C under the same name."""
    from toolchain.vta.cfsim import counter_names

    names = set(counter_names())
    seen: set[str] = set()
    for seed in range(10):
        seen |= set(run_fsim(random_program(seed)).counters)
    assert seen <= names
    assert len(names) == 14 and {"macs", "alu_steps", "bytes_loaded_uop"} <= seen


@pytest.mark.parametrize("seed", range(8))
def test_counters_counted_from_the_program_are_the_simulators(seed):
    """What a bundle on the RTL reports (the driver counts the program) is what the
    simulator counts running it, on both configurations."""
    for prog in (random_program(seed), random_program(seed, SMALL, phases=3, scale=3)):
        assert program_counters(prog.insn_bytes, prog.config) == run_cfsim(prog).counters


def test_counters_counted_from_compiled_layers_are_the_simulators():
    rng = np.random.default_rng(3)
    w = rng.integers(-128, 128, (32, 16, 3, 3), dtype=np.int8)
    x = rng.integers(-128, 128, (16, 6, 6), dtype=np.int8)
    conv = compile_conv2d(w, 6, 6, shift=10, stride=1, pad=1, layer="conv")
    want = run_cfsim(conv.program, conv.image(x), tokens=True).counters
    assert want["gemm_steps"] > 0 and want["alu_steps"] > 0
    assert program_counters(conv.program.insn_bytes, conv.program.config) == want
