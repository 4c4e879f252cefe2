"""Overlap: where a kernel's output may start inside its input's block.

A kernel that stages what it reads before it writes (a Cortex-M pointwise convolution
copies each pixel's channels into its im2col row; a depthwise one pads a channel's plane
into a stack buffer) never needs an input byte again once the step that last reads it is
done.  Its output may then start *before* its input in the arena and run into it: the
bytes it writes at step *t* only cover input bytes no step after *t* reads.  The schedule
declares how the kernel walks its tensors (an :class:`AccessOrder`); :meth:`AccessOrder.lead`
turns that into the **lead**, the bytes by which the output block may start before the
input block; the memory planner (``plan_memory(..., overlap=...)``) places the pair exactly
so, and ``MemoryPlan.check`` verifies the offset.

The rule, per byte: with the input at ``out_offset + lead``, input byte *i* shares its
address with output byte ``i + lead``; that is safe when the step that last reads input
byte *i* is no later than the step that first writes output byte ``i + lead`` (within one
step the kernel reads before it writes).  Unread bytes (``-1``) never constrain.  The legal
leads are not an interval (the pointwise convolution of NCHW tensors is legal at exactly
the channel-count difference times the plane, and no lead between that and the output's
size), so the planner uses the declared lead and no other.

Example: a 1x1 convolution from 8 to 16 channels of 4 x 4 int8 pixels, one pixel (all
channels) a step: the output (256 B) may start where its input (128 B) starts (pixel *p*
of input channel *c* is read at step *p*, and output channel *c* writes its pixel *p*
there at step *p*), so the two take 256 B instead of 384; a 3 x 3 one (padding 1) reads a
pixel again up to one row and one pixel later, and each pixel step writes all 8 output
planes: its output must start 7 planes and 5 bytes before its input (117 B; 245 B in all,
not 256)::

    >>> AccessOrder("pixels", (1, 8, 4, 4), (1, 16, 4, 4), 1).lead(64)
    0
    >>> conv3 = AccessOrder("pixels", (1, 8, 4, 4), (1, 8, 4, 4), 1, (3, 3), pads=(1, 1, 1, 1))
    >>> conv3.lead(1), conv3.clobbered(117), conv3.clobbered(0)  # bytes overwritten too early
    (117, 0, 120)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from toolchain.errors import OptionError

#: the step orders a schedule can declare (see :class:`AccessOrder`)
KINDS = ("pixels", "channels", "rows")


@dataclass(frozen=True)
class AccessOrder:
    """How a kernel walks its input and its output (both NCHW, batch 1, ``itemsize`` bytes
    an element), in steps; within one step it reads everything it reads before it writes:

    * ``"pixels"``: one output pixel (every channel) a step, in raster order, after reading
      every input pixel of its ``window`` (every channel): a dense convolution whose
      im2col row is built at the pixel;
    * ``"channels"``: one channel a step (a depthwise convolution, multiplier 1): the
      window-covered pixels of input plane *c* read, then output plane *c* written;
    * ``"rows"``: one output row of one channel a step (a depthwise convolution padding
      one band of input rows per output row).

    ``pads`` are ONNX's ``(top, left, bottom, right)``.  ``in_layout`` ``"NHWC"`` (the
    ``"pixels"`` order only): the input is stored channels-last (``in_shape`` stays its
    NCHW shape), as a first convolution reads the caller's image (docs/embedded.md).
    """

    kind: str
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    itemsize: int
    window: tuple[int, int] = (1, 1)
    strides: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    dilations: tuple[int, int] = (1, 1)
    in_layout: str = "NCHW"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise OptionError(f"access order {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.in_layout not in ("NCHW", "NHWC") or \
                (self.in_layout == "NHWC" and self.kind != "pixels"):
            raise OptionError(f"access order {self.kind!r} cannot read an input in "
                              f"{self.in_layout!r} (NCHW, or NHWC for 'pixels')")
        if len(self.in_shape) != 4 or len(self.out_shape) != 4 \
                or self.in_shape[0] != 1 or self.out_shape[0] != 1:
            raise OptionError(f"access order {self.kind!r} takes NCHW tensors of batch 1, "
                              f"not {self.in_shape} -> {self.out_shape}")
        if self.kind != "pixels" and self.in_shape[1] != self.out_shape[1]:
            raise OptionError(f"access order {self.kind!r} maps channel c to channel c: "
                              f"{self.in_shape} -> {self.out_shape}")

    def _steps(self) -> tuple[np.ndarray, np.ndarray]:
        """(last step reading each input element, step writing each output element)."""
        _, c, h, w = (int(d) for d in self.in_shape)
        _, m, ho, wo = (int(d) for d in self.out_shape)
        (kh, kw), (sh, sw), (dh, dw) = self.window, self.strides, self.dilations
        top, left = self.pads[0], self.pads[1]
        oy, ox = np.meshgrid(np.arange(ho), np.arange(wo), indexing="ij")
        if self.kind == "pixels":
            step = oy * wo + ox  # one output pixel a step
        else:  # channels: the plane's step below; rows: its row's
            step = oy if self.kind == "rows" else np.zeros_like(oy)
        per_plane = ho if self.kind == "rows" else 1
        plane = np.full((h, w), -1, np.int64)
        for ky in range(kh):
            for kx in range(kw):
                iy, ix = oy * sh - top + ky * dh, ox * sw - left + kx * dw
                ok = (iy >= 0) & (iy < h) & (ix >= 0) & (ix < w)
                np.maximum.at(plane, (iy[ok], ix[ok]), step[ok])
        if self.kind == "pixels":  # every channel of a pixel read at the pixel's step
            read = np.broadcast_to(plane[:, :, None], (h, w, c)) \
                if self.in_layout == "NHWC" else np.broadcast_to(plane, (c, h, w))
            write = np.broadcast_to(step, (m, ho, wo))
        else:
            base = np.arange(c, dtype=np.int64)[:, None, None] * per_plane
            read = np.where(plane >= 0, plane + base, -1)
            write = step + np.arange(m, dtype=np.int64)[:, None, None] * per_plane
        return (np.repeat(read.reshape(-1), self.itemsize),
                np.repeat(write.reshape(-1), self.itemsize))

    def lead(self, alignment: int) -> int | None:
        """The smallest lead (a multiple of ``alignment``, below the output's bytes) at which
        no output byte is written before the last read of the input byte at its address;
        None when there is none (the output must then not meet its input at all)."""
        read, write = self._steps()
        for lead in range(0, write.size, alignment):
            n = min(read.size, write.size - lead)
            if bool(np.all(read[:n] <= write[lead:lead + n])):
                return lead
        return None

    def clobbered(self, lead: int) -> int:
        """Input bytes an output ``lead`` bytes before its input overwrites before their
        last read (0: the lead is legal).  For tests and the poisoned-arena check."""
        read, write = self._steps()
        n = max(0, min(read.size, write.size - lead))
        return int(np.count_nonzero(read[:n] > write[lead:lead + n]))


__all__ = ["KINDS", "AccessOrder"]
