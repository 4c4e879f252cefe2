"""Access orders and leads (toolchain.graph.overlap) against a direct simulation.

The simulation runs each declared step order on one flat memory holding the input at
``lead`` bytes after the output's start: it reads a step's input elements, then writes
the step's output elements, and counts the reads of bytes an earlier write overwrote.  A
lead is legal exactly when that count is 0; ``AccessOrder.lead`` must be the smallest
legal multiple of the alignment and ``clobbered`` must agree with the simulation on every
lead."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from toolchain.errors import OptionError
from toolchain.graph.overlap import AccessOrder


def _steps(a: AccessOrder) -> list[tuple[list[int], list[int]]]:
    """Per step, (input byte offsets read, output byte offsets written), by loops."""
    _, c, h, w = a.in_shape
    _, m, ho, wo = a.out_shape
    (kh, kw), (sh, sw), (dh, dw) = a.window, a.strides, a.dilations
    top, left = a.pads[0], a.pads[1]
    size = a.itemsize

    def window(ch: int, oy: int, ox: int) -> list[int]:
        found = []
        for ky, kx in itertools.product(range(kh), range(kw)):
            iy, ix = oy * sh - top + ky * dh, ox * sw - left + kx * dw
            if 0 <= iy < h and 0 <= ix < w:
                e = (iy * w + ix) * c + ch if a.in_layout == "NHWC" else (ch * h + iy) * w + ix
                found += range(e * size, (e + 1) * size)
        return found

    def out(ch: int, oy: int, ox: int) -> list[int]:
        e = (ch * ho + oy) * wo + ox
        return list(range(e * size, (e + 1) * size))

    steps = []
    if a.kind == "pixels":
        for oy, ox in itertools.product(range(ho), range(wo)):
            steps.append(([b for ch in range(c) for b in window(ch, oy, ox)],
                          [b for ch in range(m) for b in out(ch, oy, ox)]))
    elif a.kind == "channels":
        for ch in range(c):
            px = list(itertools.product(range(ho), range(wo)))
            steps.append(([b for oy, ox in px for b in window(ch, oy, ox)],
                          [b for oy, ox in px for b in out(ch, oy, ox)]))
    else:
        for ch, oy in itertools.product(range(c), range(ho)):
            steps.append(([b for ox in range(wo) for b in window(ch, oy, ox)],
                          [b for ox in range(wo) for b in out(ch, oy, ox)]))
    return steps


def _simulate(a: AccessOrder, lead: int) -> int:
    """Input bytes read after the output overwrote them, the input ``lead`` bytes in."""
    written: set[int] = set()
    bad: set[int] = set()
    for reads, writes in _steps(a):
        bad.update(i for i in reads if i + lead in written)
        written.update(writes)
    return len(bad)


CASES = [
    AccessOrder("pixels", (1, 3, 5, 5), (1, 4, 5, 5), 1),  # pointwise, more channels
    AccessOrder("pixels", (1, 4, 5, 5), (1, 2, 5, 5), 1),  # pointwise, fewer channels
    AccessOrder("pixels", (1, 2, 5, 6), (1, 3, 5, 6), 1, (3, 3), pads=(1, 1, 1, 1)),
    AccessOrder("pixels", (1, 3, 7, 7), (1, 4, 3, 3), 1, (3, 3), (2, 2)),  # stride 2
    AccessOrder("pixels", (1, 2, 6, 6), (1, 2, 3, 3), 4, (3, 3), (2, 2), (0, 0, 1, 1)),
    AccessOrder("channels", (1, 3, 5, 5), (1, 3, 5, 5), 1, (3, 3), pads=(1, 1, 1, 1)),
    AccessOrder("channels", (1, 3, 6, 6), (1, 3, 3, 3), 1, (3, 3), (2, 2), (0, 0, 1, 1)),
    AccessOrder("rows", (1, 2, 6, 6), (1, 2, 6, 6), 1, (3, 3), pads=(1, 1, 1, 1)),
    AccessOrder("rows", (1, 2, 7, 7), (1, 2, 3, 3), 2, (3, 3), (2, 2)),
    # a first convolution reading the caller's channels-last image (docs/embedded.md)
    AccessOrder("pixels", (1, 3, 6, 6), (1, 4, 3, 3), 1, (3, 3), (2, 2), (0, 0, 1, 1),
                in_layout="NHWC"),
    AccessOrder("pixels", (1, 2, 5, 6), (1, 3, 5, 6), 2, (3, 3), pads=(1, 1, 1, 1),
                in_layout="NHWC"),
]


@pytest.mark.parametrize("a", CASES, ids=lambda a: f"{a.kind}-{a.in_shape}-{a.out_shape}")
def test_clobbered_and_lead_agree_with_the_simulation(a: AccessOrder) -> None:
    out_bytes = int(np.prod(a.out_shape)) * a.itemsize
    legal = []
    for lead in range(out_bytes):
        sim = _simulate(a, lead)
        assert a.clobbered(lead) == sim, f"lead {lead}"
        legal.append(sim == 0)
    for alignment in (1, 4, 16):
        want = next((x for x in range(0, out_bytes, alignment) if legal[x]), None)
        assert a.lead(alignment) == want


def test_the_legal_leads_are_not_an_interval() -> None:
    """Why the planner uses the declared lead and no other: a pointwise convolution from
    2 to 3 channels of NCHW planes is legal at 0, not one byte later."""
    a = AccessOrder("pixels", (1, 2, 4, 4), (1, 3, 4, 4), 1)
    assert a.clobbered(0) == 0 and a.clobbered(1) > 0 and a.clobbered(16) == 0


def test_bad_access_orders_are_named() -> None:
    with pytest.raises(OptionError, match="'zigzag' is not one of"):
        AccessOrder("zigzag", (1, 2, 4, 4), (1, 2, 4, 4), 1)
    with pytest.raises(OptionError, match="batch 1"):
        AccessOrder("pixels", (2, 2, 4, 4), (2, 2, 4, 4), 1)
    with pytest.raises(OptionError, match="channel c to channel c"):
        AccessOrder("channels", (1, 2, 4, 4), (1, 3, 4, 4), 1)
    with pytest.raises(OptionError, match="cannot read an input in 'NHWC'"):
        AccessOrder("channels", (1, 2, 4, 4), (1, 2, 4, 4), 1, in_layout="NHWC")


def test_an_nhwc_input_needs_its_own_lead() -> None:
    """The NCHW lead of a stride-2 first convolution is not legal for the same tensor
    stored channels-last: the layout is part of the contract."""
    nchw = AccessOrder("pixels", (1, 3, 8, 8), (1, 8, 4, 4), 1, (3, 3), (2, 2), (0, 0, 1, 1))
    nhwc = AccessOrder(*[getattr(nchw, f) for f in ("kind", "in_shape", "out_shape",
                                                    "itemsize", "window", "strides", "pads")],
                       in_layout="NHWC")
    assert nchw.lead(1) != nhwc.lead(1)
    assert nhwc.clobbered(nchw.lead(1)) > 0 or nchw.clobbered(nhwc.lead(1)) > 0
