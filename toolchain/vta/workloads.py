"""Tiled int8 GEMM workloads: a serial program and a latency-hiding (two virtual thread) one.

``C[M, N] = requant(A[M, K] @ B[K, N])`` with int8 A, B, int32 accumulation and an int8 result.
The work is cut into *groups*: one group loads an INP tile (``tm`` rows x ``tk`` K-blocks) and,
unless the whole weight matrix stays resident, a WGT tile (``tn`` x ``tk`` blocks), then runs one
GEMM.  Output tiles (``tm`` x ``tn``) are reset, accumulated over their K groups, requantised
with the ALU and stored.

- **serial** (one buffer each): the load of group *i* waits (``c2l``) for the GEMM of group
  *i-1*, and the reset of tile *t* waits (``s2c``) for the store of tile *t-1*: no overlap.
- **vthread** (VTA latency hiding): INP/WGT are split in two halves and group *i* uses half
  *i mod 2*; ACC/OUT are split in two and tile *t* uses half *t mod 2*.  This is what two
  virtual threads lower to: the load engine fills one half while compute works on the other,
  and the store drains one ACC half while compute fills the other.  Tokens: the last load of a
  group pushes ``l2c``; its GEMM pops it and pushes ``c2l`` when the half may be refilled (only if
  a group two later exists); group *i >= 2* pops ``c2l`` on its first load.  The last ALU of a
  tile pushes ``c2s``; the STORE pops it and pushes ``s2c`` (if tile *t+2* exists), which the reset
  of tile *t+2* pops.

``requant``: ``"clip"`` = SHR, MIN 127, MAX -128 (saturating, 3 ALU ops); ``"shift"`` = SHR
only (OUT keeps the low 8 bits); ``"none"`` = the low 8 bits of the int32 sum.

Example::

    >>> from toolchain.vta.fsim import run_fsim
    >>> wl = gemm_workload(40, 64, 48, seed=1)
    >>> out = wl.read_output(run_fsim(wl.vthread, tokens=True).dram)
    >>> bool((out == wl.expected).all())
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from toolchain.errors import OptionError
from toolchain.vta.builder import ProgramBuilder, UopKernel
from toolchain.vta.config import VTAConfig
from toolchain.vta.isa import ALU_MAX, ALU_MIN, ALU_SHR, MEM_INP, MEM_WGT, Uop
from toolchain.vta.program import Program, Region

MAX_ITER = (1 << 14) - 1
MAX_FACTOR = (1 << 11) - 1


@dataclass(frozen=True)
class ConvLayer:
    """A conv2d layer (input H x W x IC, OC filters of k x k, stride s, 'same' padding)."""

    h: int
    w: int
    ic: int
    oc: int
    k: int
    s: int

    @property
    def gemm_shape(self) -> tuple[int, int, int]:
        """(M, K, N) of the layer as an im2col GEMM."""
        oh, ow = self.h // self.s, self.w // self.s
        return oh * ow, self.ic * self.k * self.k, self.oc


#: ResNet-18 conv layers C2-C12 of the TVM paper (C1, 3 input channels, is not a VTA layer)
RESNET18_LAYERS: dict[str, ConvLayer] = {
    "C2": ConvLayer(56, 56, 64, 64, 3, 1),
    "C3": ConvLayer(56, 56, 64, 64, 1, 1),
    "C4": ConvLayer(56, 56, 64, 128, 3, 2),
    "C5": ConvLayer(56, 56, 64, 128, 1, 2),
    "C6": ConvLayer(28, 28, 128, 128, 3, 1),
    "C7": ConvLayer(28, 28, 128, 256, 3, 2),
    "C8": ConvLayer(28, 28, 128, 256, 1, 2),
    "C9": ConvLayer(14, 14, 256, 256, 3, 1),
    "C10": ConvLayer(14, 14, 256, 512, 3, 2),
    "C11": ConvLayer(14, 14, 256, 512, 1, 2),
    "C12": ConvLayer(7, 7, 512, 512, 3, 1),
}

_ALU_OPS = {"clip": 3, "shift": 1, "none": 0}


@dataclass(frozen=True)
class Tiling:
    """Tile sizes in buffer rows: ``tm`` INP/ACC rows, ``tn`` and ``tk`` blocks of N and K."""

    tm: int
    tn: int
    tk: int
    resident: bool  # whole weight matrix loaded once, before the first group


@dataclass
class Workload:
    """A GEMM workload: both programs, the data, and the numpy-expected int8 result."""

    name: str
    m: int
    k: int
    n: int
    tiling: Tiling
    serial: Program
    vthread: Program
    a: np.ndarray
    b: np.ndarray
    expected: np.ndarray
    shift: int
    requant: str
    #: MACs the GEMM core executes (padded problem): the numerator of GEMM utilisation
    macs: int

    def read_output(self, dram: np.ndarray) -> np.ndarray:
        """The (M, N) int8 result from a DRAM image after a run."""
        out = self.serial.read("out", dram)                      # (MB, NB, batch, BO)
        mb, nb, batch, bo = out.shape
        return out.transpose(0, 2, 1, 3).reshape(mb * batch, nb * bo)[: self.m, : self.n]


def expected_result(a: np.ndarray, b: np.ndarray, shift: int, requant: str) -> np.ndarray:
    """numpy oracle: int32 GEMM, then the requantisation the programs perform, as int8.

    Byte operands multiply in float64 (BLAS; exact: every partial sum of ``K`` products
    of at most 2**14 stays below 2**53 for any ``K`` under 2**39), others in int64."""
    if a.dtype.itemsize == 1 and b.dtype.itemsize == 1 and a.shape[-1] < 2**39:
        acc = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.int64)
    else:
        acc = a.astype(np.int64) @ b.astype(np.int64)
    acc = ((acc + 2**31) % 2**32) - 2**31                         # int32 wrap-around
    if requant != "none":
        acc = acc >> shift
    if requant == "clip":
        acc = np.clip(acc, -128, 127)
    return (acc & 0xFF).astype(np.uint8).view(np.int8)


def expected_conv(x: np.ndarray, w: np.ndarray, stride: int | tuple[int, int],
                  pad: int | tuple[int, int, int, int], shift: int) -> np.ndarray:
    """numpy oracle of a compiled convolution layer: ``x[IC, H, W]`` int8 convolved with
    ``w[OC, IC, KH, KW]`` in int64 (``stride``: one, or (vertical, horizontal); ``pad``: one,
    or (top, left, bottom, right)), shifted right by ``shift`` and clipped to int8 (the
    requantisation ``compile_conv2d`` programs perform).

    >>> x = np.ones((2, 3, 3), np.int8); w = np.ones((1, 2, 3, 3), np.int8)
    >>> expected_conv(x, w, 1, 1, 0)[0].tolist()
    [[8, 12, 8], [12, 18, 12], [8, 12, 8]]
    >>> expected_conv(x, w[:, :, :2], (1, 2), (0, 1, 1, 0), 0)[0].tolist()
    [[8], [8], [4]]
    """
    ic, h, wd = x.shape
    oc, _, kh, kw = w.shape
    sh, sw = (stride, stride) if isinstance(stride, int) else stride
    pt, pl, pb, pr = (pad,) * 4 if isinstance(pad, int) else pad
    xp = np.zeros((ic, h + pt + pb, wd + pl + pr), np.int64)
    xp[:, pt:pt + h, pl:pl + wd] = x
    oh, ow = (h + pt + pb - kh) // sh + 1, (wd + pl + pr - kw) // sw + 1
    out = np.zeros((oc, oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, i:i + (oh - 1) * sh + 1:sh, j:j + (ow - 1) * sw + 1:sw]
            out += np.einsum("chw,oc->ohw", patch, w[:, :, i, j].astype(np.int64))
    return np.clip(out >> shift, -128, 127).astype(np.int8)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def choose_tiling(mb: int, kb: int, nb: int, cfg: VTAConfig, n_alu: int = 3) -> Tiling:
    """Pick tiles that fit half of every buffer and minimise the estimated hidden time.

    Example::

        >>> choose_tiling(49, 288, 32, VTAConfig())     # ResNet-18 C12 in blocks
        Tiling(tm=49, tn=16, tk=18, resident=False)
    """
    inp_half, wgt_half, acc_half = cfg.inp_depth // 2, cfg.wgt_depth // 2, cfg.acc_depth // 2
    best = None
    for tn in _divisors(nb):
        for tk in _divisors(kb):
            resident = tn == nb and tk == kb and nb * kb <= cfg.wgt_depth
            if not resident and tn * tk > wgt_half:
                continue
            tm = min(mb, inp_half // tk, acc_half // tn, MAX_ITER)
            if tm < 1 or tn > MAX_FACTOR or tk > MAX_FACTOR:
                continue
            groups = math.ceil(mb / tm) * (nb // tn) * (kb // tk)
            load = tm * tk * cfg.inp_row_bytes + (0 if resident else tn * tk * cfg.wgt_row_bytes)
            per_group = max(tm * tn * tk, load / cfg.bytes_per_cycle + cfg.latency_cycles)
            tiles = math.ceil(mb / tm) * (nb // tn)
            est = groups * per_group + tiles * (1 + n_alu) * tm * tn
            key = (est, groups)
            if best is None or key < best[0]:
                best = (key, Tiling(tm, tn, tk, resident))
    if best is None:
        raise OptionError(f"no tiling of a {mb}x{kb}x{nb}-block GEMM fits the buffers of "
                          f"target '{cfg.name}'")
    return best[1]


def _check_tiling(t: Tiling, mb: int, kb: int, nb: int, cfg: VTAConfig) -> None:
    problems = []
    if nb % t.tn or kb % t.tk:
        problems.append(f"tn={t.tn} must divide N blocks {nb} and tk={t.tk} K blocks {kb}")
    if t.tm * t.tk > cfg.inp_depth // 2:
        problems.append(f"INP tile {t.tm}x{t.tk} exceeds half the INP buffer "
                        f"({cfg.inp_depth // 2} rows)")
    if t.tm * t.tn > cfg.acc_depth // 2:
        problems.append(f"ACC tile {t.tm}x{t.tn} exceeds half the ACC buffer "
                        f"({cfg.acc_depth // 2} rows)")
    wgt_limit = cfg.wgt_depth if t.resident else cfg.wgt_depth // 2
    if t.tn * t.tk > wgt_limit or (t.resident and (t.tn, t.tk) != (nb, kb)):
        problems.append(f"WGT tile {t.tn}x{t.tk} does not fit ({wgt_limit} rows"
                        f"{'; resident weights need tn, tk = all blocks' if t.resident else ''})")
    if t.tm > MAX_ITER or max(t.tn, t.tk) > MAX_FACTOR:
        problems.append("tile sizes exceed the instruction's loop/factor fields")
    if problems:
        raise OptionError("invalid tiling " + str(t) + ": " + "; ".join(problems))


@dataclass
class _Layout:
    inp: Region
    wgt: Region
    out: Region
    gemm_k: dict[tuple[int, int], UopKernel]   # (group half, acc half) -> tn micro-ops
    tile_k: dict[int, UopKernel]                # acc half -> 1 micro-op (reset/ALU)


def _layout(b: ProgramBuilder, a_blk: np.ndarray, w_blk: np.ndarray, out_shape,
            t: Tiling) -> _Layout:
    cfg = b.config
    inp = b.data("inp", a_blk)
    wgt = b.data("wgt", w_blk)
    out = b.alloc("out", out_shape, "int8")
    ih, wh, ah = cfg.inp_depth // 2, cfg.wgt_depth // 2, cfg.acc_depth // 2
    gemm_k, tile_k = {}, {}
    for g in (0, 1):
        for h in (0, 1):
            wbase = 0 if t.resident else g * wh
            gemm_k[g, h] = b.uops(f"uop_gemm_{g}{h}", [Uop(acc=h * ah + n, inp=g * ih,
                                                           wgt=wbase + n * t.tk)
                                                       for n in range(t.tn)])
    for h in (0, 1):
        tile_k[h] = b.uops(f"uop_tile_{h}", [Uop(acc=h * ah)])
    return _Layout(inp, wgt, out, gemm_k, tile_k)


def _emit(b: ProgramBuilder, lay: _Layout, t: Tiling, mb: int, kb: int, nb: int, nbuf: int,
          shift: int, requant: str) -> None:
    cfg = b.config
    ih, wh, ah = cfg.inp_depth // 2, cfg.wgt_depth // 2, cfg.acc_depth // 2
    base = 0
    kernel_at = {}
    for kern in (*lay.gemm_k.values(), *lay.tile_k.values()):
        b.load_uops(kern, sram_base=base)
        kernel_at[kern.name] = base
        base += len(kern)
    if t.resident:
        b.load(MEM_WGT, 0, lay.wgt, y_size=1, x_size=nb * kb)
    tiles = [(m0, n0) for m0 in range(0, mb, t.tm) for n0 in range(0, nb // t.tn)]
    ngroups = len(tiles) * (kb // t.tk)
    ops = {"clip": [(ALU_SHR, shift), (ALU_MIN, 127), (ALU_MAX, -128)],
           "shift": [(ALU_SHR, shift)], "none": []}[requant]
    gi = 0
    for ti, (m0, n0) in enumerate(tiles):
        tm, h = min(t.tm, mb - m0), ti % nbuf
        tk_uop = kernel_at[lay.tile_k[h].name]
        b.gemm(tk_uop, tk_uop + 1, iter_out=tm, iter_in=t.tn, dst=(t.tn, 1), reset=True,
               pop_next=ti >= nbuf)
        for k0 in range(kb // t.tk):
            g = gi % nbuf
            wants_free = gi >= nbuf
            inp_dram = m0 * kb + k0 * t.tk
            if not t.resident:
                b.load(MEM_WGT, g * wh, lay.wgt, n0 * t.tn * kb + k0 * t.tk, y_size=t.tn,
                       x_size=t.tk, x_stride=kb, pop_next=wants_free)
                wants_free = False
            b.load(MEM_INP, g * ih, lay.inp, inp_dram, y_size=tm, x_size=t.tk, x_stride=kb,
                   pop_next=wants_free, push_next=True)
            gk = kernel_at[lay.gemm_k[g, h].name]
            last = k0 == kb // t.tk - 1 and not ops
            b.gemm(gk, gk + t.tn, iter_out=t.tk, iter_in=tm, dst=(0, t.tn), src=(1, t.tk),
                   wgt=(1, 0), pop_prev=True, push_prev=gi + nbuf < ngroups, push_next=last)
            gi += 1
        for i, (op, imm) in enumerate(ops):
            b.alu(op, tk_uop, tk_uop + 1, imm=imm, iter_out=tm, iter_in=t.tn, dst=(t.tn, 1),
                  push_next=i == len(ops) - 1)
        b.store(h * ah, lay.out, m0 * nb + n0 * t.tn, y_size=tm, x_size=t.tn, x_stride=nb,
                pop_prev=True, push_prev=ti + nbuf < len(tiles))
    b.finish()


def gemm_workload(m: int, k: int, n: int, config: VTAConfig | None = None, *,
                  tiling: Tiling | tuple[int, int, int] | None = None, seed: int = 0,
                  requant: str = "clip", shift: int | None = None,
                  name: str | None = None) -> Workload:
    """Build serial and two-virtual-thread programs for an int8 (M, K) x (K, N) GEMM.

    K and N are zero-padded to whole blocks and M to whole BATCH rows.  ``tiling`` is a
    :class:`Tiling` or ``(tm, tn, tk)`` in rows/blocks; by default :func:`choose_tiling`.
    """
    cfg = config or VTAConfig()
    if requant not in _ALU_OPS:
        raise OptionError(f"requant must be one of {', '.join(_ALU_OPS)}, got '{requant}'")
    if min(m, k, n) < 1:
        raise OptionError(f"GEMM sizes must be positive, got M={m} K={k} N={n}")
    bi, bo, batch = cfg.block_in, cfg.block_out, cfg.batch
    mb, kb, nb = -(-m // batch), -(-k // bi), -(-n // bo)
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, size=(m, k), dtype=np.int8)
    w = rng.integers(-128, 128, size=(k, n), dtype=np.int8)
    if shift is None:  # bring the typical |sum| (~ 74^2 sqrt(K)) into int8 range
        shift = max(0, math.ceil(math.log2(74 * 74 * math.sqrt(k))) - 6)
    expected = expected_result(a, w, shift, requant)
    ap = np.zeros((mb * batch, kb * bi), np.int8)
    ap[:m, :k] = a
    wp = np.zeros((kb * bi, nb * bo), np.int8)
    wp[:k, :n] = w
    a_blk = ap.reshape(mb, batch, kb, bi).transpose(0, 2, 1, 3)          # (MB, KB, batch, BI)
    w_blk = wp.reshape(kb, bi, nb, bo).transpose(2, 0, 3, 1)             # (NB, KB, BO, BI)
    if tiling is None:
        t = choose_tiling(mb, kb, nb, cfg, _ALU_OPS[requant])
    elif isinstance(tiling, Tiling):
        t = tiling
    else:
        tm, tn, tk = tiling
        t = Tiling(tm, tn, tk, resident=(tn, tk) == (nb, kb) and nb * kb <= cfg.wgt_depth)
    _check_tiling(t, mb, kb, nb, cfg)
    macs = mb * kb * nb * cfg.macs_per_step
    progs = []
    for nbuf in (1, 2):
        b = ProgramBuilder(cfg)
        lay = _layout(b, a_blk, w_blk, (mb, nb, batch, bo), t)
        _emit(b, lay, t, mb, kb, nb, nbuf, shift, requant)
        progs.append(b.build())
    return Workload(name or f"gemm{m}x{k}x{n}", m, k, n, t, progs[0], progs[1], a, w,
                    expected, shift, requant, macs)


def resnet18_workload(layer: str, config: VTAConfig | None = None, **kwargs: Any) -> Workload:
    """The GEMM workload of a ResNet-18 layer of the TVM paper (``"C2"`` ... ``"C12"``).

    Example::

        >>> resnet18_workload("C12").tiling.tm
        49
    """
    if layer not in RESNET18_LAYERS:
        raise OptionError(f"unknown ResNet-18 layer '{layer}'; choose one of "
                          f"{', '.join(RESNET18_LAYERS)}")
    m, k, n = RESNET18_LAYERS[layer].gemm_shape
    return gemm_workload(m, k, n, config, name=layer, **kwargs)
