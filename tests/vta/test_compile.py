"""compile_dense: schedule -> lowered TIR -> instructions -> tokens -> checked program,
bit-exact with numpy on the functional simulator (plain order and token-mode interleavings)."""

from __future__ import annotations

import numpy as np
import pytest

from toolchain.errors import ScheduleError
from toolchain.target import load_target
from toolchain.vta import check_program, run_fsim
from toolchain.vta.compile import (
    ConvTiles,
    Tiles,
    compile_conv2d,
    compile_conv2d_im2col,
    compile_dense,
    im2col,
)
from toolchain.vta.isa import MEM_INP, MEM_UOP, Finish, Load
from toolchain.vta.workloads import expected_conv

FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")


def _reference(x: np.ndarray, w: np.ndarray, shift: int) -> np.ndarray:
    acc = x.astype(np.int64) @ w.astype(np.int64)
    acc = (acc + 2**31) % 2**32 - 2**31
    return np.clip(acc >> shift, -128, 127).astype(np.int8)


def _data(m: int, k: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.integers(-128, 128, (m, k), dtype=np.int8),
            rng.integers(-128, 128, (k, n), dtype=np.int8))


@pytest.mark.parametrize("m, k, n, tiles, vthreads", [
    (16, 64, 64, Tiles(2, 2, 2), 2),
    (16, 64, 64, Tiles(2, 2, 2), 1),
    (20, 72, 40, Tiles(5, 3, 5), 2),   # K, N not multiples of the 16-wide blocks
    (7, 33, 17, None, 1),              # odd M: one thread; tiles chosen from the buffers
    (12, 100, 50, None, 2),
    (6, 64, 64, Tiles(6, 2, 2, "n"), 2),  # column tiles on the threads (own input copies)
    (8, 64, 64, Tiles(2, 2, 2, resident=True), 2),  # weights loaded once, shared
    # tiles of one block (their loops vanish from the nest): a classifier's single row,
    # one block of K (no reduction loop: loads under the thread loop), every tile 1
    (1, 64, 10, None, 1),
    (1, 200, 64, None, 2),
    (4, 16, 48, None, 2),
    (3, 40, 20, Tiles(1, 1, 1), 1),
    (4, 40, 64, Tiles(1, 1, 3, "n"), 2),
])
def test_dense_layers_are_bit_exact_on_the_functional_simulator(m, k, n, tiles,
                                                                vthreads) -> None:
    x, w = _data(m, k, n, seed=m * k + n)
    layer = compile_dense(w, m, shift=9, tiles=tiles, vthreads=vthreads, layer="fc")
    assert check_program(layer.program).ok
    ref = _reference(x, w, 9)
    dram = layer.image(x)
    for tokens, seed in ((False, None), (True, 0), (True, 7)):
        out = layer.read_output(run_fsim(layer.program, dram, tokens=tokens, seed=seed).dram)
        assert out.shape == (m, n)
        np.testing.assert_array_equal(out, ref)


def test_virtual_threads_get_their_own_buffer_rows() -> None:
    """Each thread's copy of every tile buffer is its own rows: twice the rows of one."""
    _, w = _data(16, 64, 64, 1)
    one = compile_dense(w, 16, 4, tiles=Tiles(2, 2, 2), vthreads=1)
    two = compile_dense(w, 16, 4, tiles=Tiles(2, 2, 2), vthreads=2)
    assert one.rows_used == {"inp": 4, "wgt": 4, "acc": 4}
    assert two.rows_used == {key: 2 * rows for key, rows in one.rows_used.items()}


def test_token_pattern_of_a_small_nest_is_the_hand_checked_one() -> None:
    """M=4, K=N=32 in tiles of 2 blocks, 2 threads: one tile and one reduction step per
    thread. Each engine's instructions come thread by thread (thread 0's weight and input
    loads, then thread 1's; thread 0's SHR, MIN, MAX, then thread 1's). Only the true
    cross-engine dependencies carry tokens: each thread's GEMM waits for its own input load
    (the later of its two loads), each STORE for its thread's last ALU op; resets, weight
    loads and the in-place ALU chain need none."""
    _, w = _data(4, 32, 32, 2)
    prog = compile_dense(w, 4, 8, tiles=Tiles(2, 2, 2)).program
    got = [(type(i).__name__, " ".join(f for f in FLAGS if getattr(i, f))) for i in prog.insns]
    assert got == [
        ("Load", ""),                                   # micro-ops (compute engine)
        ("Gemm", ""), ("Gemm", ""),                     # reset, thread 0 / 1
        ("Load", ""), ("Load", "push_next"),            # thread 0: weights, inputs
        ("Load", ""), ("Load", "push_next"),            # thread 1: weights, inputs
        ("Gemm", "pop_prev"), ("Gemm", "pop_prev"),
        ("Alu", ""), ("Alu", ""), ("Alu", "push_next"),  # thread 0: SHR, MIN, MAX
        ("Alu", ""), ("Alu", ""), ("Alu", "push_next"),  # thread 1
        ("Store", "pop_prev"), ("Store", "pop_prev"),
        ("Finish", ""),
    ]
    assert isinstance(prog.insns[0], Load) and prog.insns[0].memory_type == MEM_UOP
    assert isinstance(prog.insns[-1], Finish)


def test_reuse_of_a_thread_buffer_waits_for_its_reader() -> None:
    """Two reduction steps per tile: the second step's loads into a thread's INP/WGT rows
    wait (c2l) for that thread's first GEMM, and the next tile's reset of a thread's ACC
    rows waits (s2c) for its STORE."""
    _, w = _data(8, 64, 32, 3)
    prog = compile_dense(w, 8, 8, tiles=Tiles(2, 2, 2)).program
    kinds = [type(i).__name__ for i in prog.insns]
    loads = [i for i, k in zip(prog.insns, kinds, strict=True)
             if k == "Load" and i.memory_type != MEM_UOP]
    assert sum(i.pop_next for i in loads) > 0
    resets = [i for i in prog.insns if type(i).__name__ == "Gemm" and i.reset]
    assert [r.pop_next for r in resets] == [False, False, True, True]


def test_buffer_overflow_is_refused_naming_the_layer() -> None:
    _, w = _data(64, 1024, 32, 4)
    # 32 rows x 64 K-blocks per thread, two threads: 4096 rows of a 2048-row buffer
    with pytest.raises(ScheduleError, match=r"layer 'fc7': data_vta_inp needs 4096 rows of "
                                            r"the INP buffer at row 0 but it has 2048"):
        compile_dense(w, 64, 8, tiles=Tiles(32, 2, 64), vthreads=2, layer="fc7")


def test_a_deadlocking_program_is_refused_naming_the_layer(tmp_path) -> None:
    """With 1-deep command and token queues the same schedule deadlocks (compute pushes a
    second 'buffer free' token before the load that pops the first is fetched): the static
    check refuses it at compile time; the default queues accept it."""
    path = tmp_path / "vta-tiny-queues.yaml"
    path.write_text("name: vta-tiny-queues\nkind: vta\nextends: vta\n"
                    "queues: {cmd_queue_depth: 1, token_queue_depth: 1}\n")
    _, w = _data(8, 64, 32, 5)
    compile_dense(w, 8, 8, tiles=Tiles(2, 2, 2), layer="fc2")
    with pytest.raises(ScheduleError, match=r"layer 'fc2': the emitted program fails the "
                                            r"static check .*certain deadlock"):
        compile_dense(w, 8, 8, load_target(str(path)), tiles=Tiles(2, 2, 2), layer="fc2")


def test_bad_input_is_refused_naming_the_layer() -> None:
    _, w = _data(16, 64, 64, 6)
    with pytest.raises(ScheduleError, match=r"layer 'fc3': tiles .* must divide"):
        compile_dense(w, 16, 8, tiles=Tiles(3, 2, 2), layer="fc3")
    with pytest.raises(ScheduleError, match=r"layer 'fc3': needs an int8 \(K, N\) weight"):
        compile_dense(w.astype(np.int16), 16, 8, layer="fc3")
    layer = compile_dense(w, 16, 8, tiles=Tiles(2, 2, 2), layer="fc3")
    with pytest.raises(ScheduleError, match=r"layer 'fc3': input must be int8 of shape"):
        layer.image(np.zeros((16, 63), np.int8))




@pytest.mark.parametrize("ic, h, w, oc, k, stride, pad, tiles, vthreads", [
    (32, 8, 8, 32, 3, 1, 1, ConvTiles(4, 2, 2), 2),              # 'same' 3x3, row tiles
    (24, 6, 6, 20, 3, 1, 1, None, 2),                            # channels not whole blocks
    (32, 8, 8, 32, 3, 2, 1, ConvTiles(2, 1, 1, "n", True), 2),   # stride 2, resident weights
    (64, 7, 7, 32, 1, 2, 0, None, 2),                            # 1x1, stride 2, no padding
    (32, 7, 7, 17, 3, 1, 1, ConvTiles(7, 1, 1), 1),              # one thread, odd sizes
])
def test_convolutions_are_bit_exact_on_the_functional_simulator(ic, h, w, oc, k, stride, pad,
                                                                tiles, vthreads) -> None:
    rng = np.random.default_rng(ic * h + oc)
    x = rng.integers(-128, 128, (ic, h, w), dtype=np.int8)
    wt = rng.integers(-128, 128, (oc, ic, k, k), dtype=np.int8)
    conv = compile_conv2d(wt, h, w, 10, stride=stride, pad=pad, tiles=tiles,
                          vthreads=vthreads, layer="conv")
    ref = expected_conv(x, wt, stride, pad, 10)
    for tokens, seed in ((False, None), (True, 5)):
        got = conv.read_output(run_fsim(conv.program, conv.image(x), tokens=tokens,
                                        seed=seed).dram)
        np.testing.assert_array_equal(got, ref)


def test_the_padded_input_tile_is_loaded_by_dma_with_padding() -> None:
    """8x8 image, 3x3 'same', output rows in tiles of 4 on two threads: each thread loads
    one 6x10 window per input-channel block; thread 0's (output rows 0-3) has one zero row
    above, thread 1's (rows 4-7) one below; both a zero column left and right."""
    wt = np.ones((16, 32, 3, 3), np.int8)
    conv = compile_conv2d(wt, 8, 8, 4, pad=1, tiles=ConvTiles(4, 1, 2), layer="c")
    loads = [i for i in conv.program.insns if isinstance(i, Load) and i.memory_type == MEM_INP]
    pads = [(i.y_pad_top, i.y_pad_bottom, i.x_pad_left, i.x_pad_right, i.y_size, i.x_size,
             i.x_stride) for i in loads]
    assert pads == [(1, 0, 1, 1, 5, 8, 8)] * 2 + [(0, 1, 1, 1, 5, 8, 8)] * 2


@pytest.mark.parametrize("ic, h, oc, k, stride, pad, tiles, vthreads", [
    (3, 8, 16, 3, 1, 1, None, 2),                               # RGB first layer
    (16, 8, 32, 3, 2, 1, ConvTiles(1, 2, 1), 2),                # one output row per tile
    (16, 6, 16, 1, 1, 0, ConvTiles(6, 1, 1), 1),                # 1x1, one tile per thread
    (16, 8, 32, 1, 2, 0, ConvTiles(2, 1, 1, "n", True), 2),     # resident weights
    (8, 4, 48, 3, 1, 1, ConvTiles(2, 3, 1, "m", True), 2),
    (16, 3, 16, 3, 1, 0, None, 1),                              # one output pixel
    (16, 1, 16, 1, 1, 0, None, 1),                              # every tile loop of extent 1
])
def test_one_block_of_input_channels_is_bit_exact_on_the_functional_simulator(
        ic, h, oc, k, stride, pad, tiles, vthreads) -> None:
    """IC <= BLOCK_IN: no reduction loop over channel blocks; the tile's input and weights
    load once per tile, the missing channels are zero in the packed input and filters."""
    rng = np.random.default_rng(ic * h + oc + k)
    x = rng.integers(-128, 128, (ic, h, h), dtype=np.int8)
    wt = rng.integers(-128, 128, (oc, ic, k, k), dtype=np.int8)
    conv = compile_conv2d(wt, h, h, 10, stride=stride, pad=pad, tiles=tiles,
                          vthreads=vthreads, layer="conv")
    ref = expected_conv(x, wt, stride, pad, 10)
    for tokens, seed in ((False, None), (True, 7)):
        got = conv.read_output(run_fsim(conv.program, conv.image(x), tokens=tokens,
                                        seed=seed).dram)
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("seed", range(16))
def test_random_convolutions_with_few_channels_are_bit_exact(seed: int) -> None:
    """Random shapes around one block of input channels (1..40 channels, 1x1 and 3x3,
    stride 1 and 2, padding 0 and 1 (3x3), images down to one pixel), tiles chosen by the
    compiler, in plain and token mode."""
    rng = np.random.default_rng(1000 + seed)
    ic, oc = int(rng.integers(1, 41)), int(rng.integers(1, 41))
    k, stride = int(rng.choice([1, 3])), int(rng.integers(1, 3))
    pad = int(rng.integers(0, 2)) if k == 3 else 0  # a padded 1x1 has all-zero input rows
    h = int(rng.integers(max(1, k - 2 * pad), 10))
    w = int(rng.integers(max(1, k - 2 * pad), 10))
    x = rng.integers(-128, 128, (ic, h, w), dtype=np.int8)
    wt = rng.integers(-128, 128, (oc, ic, k, k), dtype=np.int8)
    try:
        conv = compile_conv2d(wt, h, w, 9, stride=stride, pad=pad, layer=f"rand{seed}")
    except ScheduleError as exc:  # e.g. 7 output rows, one channel block: no 2-thread split
        assert "no tiling" in str(exc)
        conv = compile_conv2d(wt, h, w, 9, stride=stride, pad=pad, vthreads=1,
                              layer=f"rand{seed}")
    ref = expected_conv(x, wt, stride, pad, 9)
    for tokens in (False, True):
        got = conv.read_output(run_fsim(conv.program, conv.image(x), tokens=tokens,
                                        seed=seed + 1 if tokens else None).dram)
        np.testing.assert_array_equal(got, ref, err_msg=f"{conv.shape} {conv.tiles}")


@pytest.mark.parametrize("ic, h, oc, k, stride, pad", [
    (3, 8, 16, 3, 1, 1), (3, 9, 20, 3, 2, 1), (5, 6, 16, 1, 1, 0), (8, 7, 32, 3, 2, 0)])
def test_a_convolution_as_an_im2col_gemm_is_bit_exact(ic, h, oc, k, stride, pad) -> None:
    rng = np.random.default_rng(ic + h + oc)
    x = rng.integers(-128, 128, (ic, h, h), dtype=np.int8)
    wt = rng.integers(-128, 128, (oc, ic, k, k), dtype=np.int8)
    gemm = compile_conv2d_im2col(wt, h, h, 10, stride=stride, pad=pad, vthreads=1,
                                 layer="c")
    assert gemm.conv is not None and gemm.shape.k == ic * k * k
    oh, ow = gemm.conv.out_hw
    for tokens in (False, True):
        got = gemm.read_output(run_fsim(gemm.program, gemm.image(im2col(x, gemm.conv)),
                                        tokens=tokens, seed=2 if tokens else None).dram)
        np.testing.assert_array_equal(got.T.reshape(oc, oh, ow),
                                      expected_conv(x, wt, stride, pad, 10))


def test_a_layer_of_a_shape_lowered_before_reuses_its_functions(monkeypatch) -> None:
    """``LOWERED``: a tiling's lowered function depends on the layer's shape, shift and
    target alone, so a second layer of the same shape (other weights, another name) lowers
    nothing, and its program is the one it gets with nothing kept."""
    from toolchain.vta import compile as vcompile

    _, w1 = _data(16, 64, 64, 1)
    _, w2 = _data(16, 64, 64, 2)
    vcompile.LOWERED.clear()
    compile_dense(w1, 16, 7, layer="fc1")
    lowered = []
    real = vcompile.lower_dense
    monkeypatch.setattr(vcompile, "lower_dense", lambda sch: lowered.append(sch) or real(sch))
    second = compile_dense(w2, 16, 7, layer="fc2")
    assert lowered == []
    vcompile.LOWERED.clear()
    vcompile.CHOSEN.clear()
    alone = compile_dense(w2, 16, 7, layer="fc2")
    assert len(lowered) > 1 and second.tiles == alone.tiles
    assert second.program.insn_bytes == alone.program.insn_bytes
    assert np.array_equal(second.program.dram, alone.program.dram)
    assert str(second.func) == str(alone.func)
