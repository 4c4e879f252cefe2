"""Instructions per 16 MACs of Cortex-M4 int8 convolution dot loops, from the disassembly.

    python benchmarks/cortex_m_dot_loops.py            # needs arm-none-eabi-gcc / -objdump

The k x k int8 convolutions of the ``cortex-m4`` target take two output pixels x two
channels a step. With weights widened to int16 at compile time (``dot_q15q15_2x2``) the
loop needs no SXTB16; with int8 weights (``dot_q15q7_2x2``, the ``cortex-m4-compact``
variant) each weight word is unpacked by two SXTB16 for only two pixels. This script
compiles the two shipped loops (the bodies of ``targets/cortex-m4.yaml``, K = 144, the same
load macros) and the int8-weight candidates that amortise the unpacking over four pixels,
with the target's flags at ``-O3`` (``KERNEL_OPT``), and prints per loop: its instructions
(from the backward branch's target to the branch), the MACs one pass does, instructions
per 16 MACs, the stack loads/stores inside the loop (spills) and the ratio to the int16
loop. Static counts of one loop pass, which is what executes (no data-dependent branch);
the candidates are not kernels of the target (their im2col layouts differ), only the
arithmetic of each tile (docs/int8.md, "int8 weights in flash").
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FLAGS = ["-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16", "-O3"]

PRELUDE = r"""
#include <stdint.h>
#include <arm_acle.h>
#define SX(x) ((int32_t)__sxtb16((uint32_t)(x)))
static inline int32_t SXR(int32_t x) {
  int32_t r; __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(x)); return r;
}
#define SM(a, b, c) ((int32_t)__smlad((uint32_t)(a), (uint32_t)(b), (c)))
#define LDRD_POST(lo, hi, p) __asm__("ldrd %0, %1, [%2], #8" \
  : "=r"(lo), "=r"(hi), "+r"(p) : "m"(*(const int16_t (*)[4])(p)))
#define LDRD_AT(lo, hi, p, off) __asm__("ldrd %0, %1, [%2, %3]" \
  : "=r"(lo), "=r"(hi) : "r"(p), "i"(2 * (off)), "m"(*(const int16_t (*)[4])((p) + (off))))
#define LDR_POST(v, p) __asm__("ldr %0, [%1], #4" \
  : "=r"(v), "+r"(p) : "m"(*(const int8_t (*)[4])(p)))
/* four words at p into fixed ascending registers (LDM), p advanced by 8 int16 */
#define LDM4(r0, r1, r2, r3, p) __asm__("ldmia %4!, {%0, %1, %2, %3}" \
  : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3), "+r"(p) : "m"(*(const int16_t (*)[8])(p)))
#define K 144
"""

#: name -> (MACs of one loop pass, what it is, C function body taking a, b, c)
LOOPS: dict[str, tuple[int, str, str]] = {
    "q15q15_2x2": (16, "shipped, int16 weights (2 px x 2 ch)", r"""
  int32_t c00 = c[0], c01 = c[1], c10 = c[2], c11 = c[3];
  const int16_t *w = (const int16_t *)b, *end = a + K;
  do {
    int32_t p01, p23, q01, q23, w01, w23;
    LDRD_POST(p01, p23, a); LDRD_AT(q01, q23, a, K - 4); LDRD_POST(w01, w23, w);
    c00 = SM(p01, w01, c00); c10 = SM(q01, w01, c10); c00 = SM(p23, w23, c00);
    c10 = SM(q23, w23, c10);
    LDRD_AT(w01, w23, w, K - 4);
    c01 = SM(p01, w01, c01); c11 = SM(q01, w01, c11); c01 = SM(p23, w23, c01);
    c11 = SM(q23, w23, c11);
  } while (a != end);
  c[0] = c00; c[1] = c01; c[2] = c10; c[3] = c11;"""),
    "q15q7_2x2": (16, "shipped, int8 weights (2 px x 2 ch)", r"""
  int32_t c00 = c[0], c01 = c[1], c10 = c[2], c11 = c[3];
  const int16_t *end = a + K;
  do {
    int32_t p01, p23, q01, q23, w, w1 = *(const int32_t *)(b + K), t;
    LDRD_POST(p01, p23, a); LDRD_AT(q01, q23, a, K - 4); LDR_POST(w, b);
    t = SX(w); c00 = SM(p01, t, c00); c10 = SM(q01, t, c10);
    t = SXR(w); c00 = SM(p23, t, c00); c10 = SM(q23, t, c10);
    t = SX(w1); c01 = SM(p01, t, c01); c11 = SM(q01, t, c11);
    t = SXR(w1); c01 = SM(p23, t, c01); c11 = SM(q23, t, c11);
  } while (a != end);
  c[0] = c00; c[1] = c01; c[2] = c10; c[3] = c11;"""),
    "q15q7_4x2": (32, "int8, 4 px x 2 ch, rows at stride K", r"""
  int32_t c00 = c[0], c01 = c[1], c10 = c[2], c11 = c[3];
  int32_t c20 = c[4], c21 = c[5], c30 = c[6], c31 = c[7];
  const int16_t *end = a + K;
  do {
    int32_t w0, w1; LDR_POST(w0, b); w1 = *(const int32_t *)(b + K - 4);
    int32_t u0 = SX(w0), v0 = SXR(w0), u1 = SX(w1), v1 = SXR(w1), p, q;
    LDRD_AT(p, q, a, 0); c00 = SM(p, u0, c00); c00 = SM(q, v0, c00); c01 = SM(p, u1, c01);
    c01 = SM(q, v1, c01);
    LDRD_AT(p, q, a, K); c10 = SM(p, u0, c10); c10 = SM(q, v0, c10); c11 = SM(p, u1, c11);
    c11 = SM(q, v1, c11);
    LDRD_AT(p, q, a, 2 * K); c20 = SM(p, u0, c20); c20 = SM(q, v0, c20); c21 = SM(p, u1, c21);
    c21 = SM(q, v1, c21);
    LDRD_AT(p, q, a, 3 * K); c30 = SM(p, u0, c30); c30 = SM(q, v0, c30); c31 = SM(p, u1, c31);
    c31 = SM(q, v1, c31);
    a += 4;
  } while (a != end);
  c[0] = c00; c[1] = c01; c[2] = c10; c[3] = c11; c[4] = c20; c[5] = c21; c[6] = c30;
  c[7] = c31;"""),
    "q15q7_4x1": (16, "int8, 4 px x 1 ch, rows at stride K", r"""
  int32_t c0 = c[0], c1 = c[1], c2 = c[2], c3 = c[3];
  const int16_t *end = a + K;
  do {
    int32_t w, p, q; LDR_POST(w, b);
    int32_t t0 = SX(w), t1 = SXR(w);
    LDRD_POST(p, q, a); c0 = SM(p, t0, c0); c0 = SM(q, t1, c0);
    LDRD_AT(p, q, a, K - 4); c1 = SM(p, t0, c1); c1 = SM(q, t1, c1);
    LDRD_AT(p, q, a, 2 * K - 4); c2 = SM(p, t0, c2); c2 = SM(q, t1, c2);
    LDRD_AT(p, q, a, 3 * K - 4); c3 = SM(p, t0, c3); c3 = SM(q, t1, c3);
  } while (a != end);
  c[0] = c0; c[1] = c1; c[2] = c2; c[3] = c3;"""),
    "q15q7_4x1_ldm": (16, "int8, 4 px x 1 ch, im2col interleaved per 4 k, LDM", r"""
  int32_t c0 = c[0], c1 = c[1], c2 = c[2], c3 = c[3];
  const int16_t *end = a + 4 * K;
  do {
    int32_t w; LDR_POST(w, b);
    int32_t t0 = SX(w), t1 = SXR(w);
    register int32_t r0 __asm__("r4"), r1 __asm__("r5"), r2 __asm__("r6"), r3 __asm__("r7");
    LDM4(r0, r1, r2, r3, a); c0 = SM(r0, t0, c0); c0 = SM(r1, t1, c0); c1 = SM(r2, t0, c1);
    c1 = SM(r3, t1, c1);
    LDM4(r0, r1, r2, r3, a); c2 = SM(r0, t0, c2); c2 = SM(r1, t1, c2); c3 = SM(r2, t0, c3);
    c3 = SM(r3, t1, c3);
  } while (a != end);
  c[0] = c0; c[1] = c1; c[2] = c2; c[3] = c3;"""),
    "q15q7_4x1_ldm_x2": (32, "the same, two groups of 4 k a pass", r"""
  int32_t c0 = c[0], c1 = c[1], c2 = c[2], c3 = c[3];
  const int16_t *end = a + 4 * K;
  do {
    register int32_t r0 __asm__("r4"), r1 __asm__("r5"), r2 __asm__("r6"), r3 __asm__("r7");
    for (int g = 0; g < 2; g++) {
      int32_t w; LDR_POST(w, b);
      int32_t t0 = SX(w), t1 = SXR(w);
      LDM4(r0, r1, r2, r3, a); c0 = SM(r0, t0, c0); c0 = SM(r1, t1, c0); c1 = SM(r2, t0, c1);
      c1 = SM(r3, t1, c1);
      LDM4(r0, r1, r2, r3, a); c2 = SM(r0, t0, c2); c2 = SM(r1, t1, c2); c3 = SM(r2, t0, c3);
      c3 = SM(r3, t1, c3);
    }
  } while (a != end);
  c[0] = c0; c[1] = c1; c[2] = c2; c[3] = c3;"""),
}

_INSN = re.compile(r"^\s*([0-9a-f]+):\s+(?:[0-9a-f]{4}\s?){1,2}\s+(\S+)\s*(.*)$")


def loop_stats(disasm: str, name: str) -> tuple[int, int]:
    """(instructions of the function's loop, stack loads/stores in it) from ``objdump -d``
    text: the loop runs from the target of the last backward conditional branch to it."""
    body = disasm.split(f"<{name}>:", 1)[1].split("\n\n", 1)[0]
    insns = [(int(m[1], 16), m[2], m[3]) for m in map(_INSN.match, body.splitlines()) if m]
    for i in range(len(insns) - 1, -1, -1):
        addr, op, args = insns[i]
        if re.fullmatch(r"b(ne|eq|cc|cs|lt|gt|le|ge|hi|ls)(\.[nw])?", op):
            target = int(args.split()[0], 16)
            if target < addr:
                loop = [x for x in insns if target <= x[0] <= addr]
                return len(loop), sum("sp" in x[2] and x[1][:3] in ("ldr", "str") for x in loop)
    raise RuntimeError(f"no loop found in {name}")


def main() -> int:
    gcc, objdump = shutil.which("arm-none-eabi-gcc"), shutil.which("arm-none-eabi-objdump")
    if gcc is None or objdump is None:
        print("arm-none-eabi-gcc and arm-none-eabi-objdump are needed", file=sys.stderr)
        return 1
    src = PRELUDE + "".join(
        f"\nvoid {n}(const int16_t *a, const int8_t *b, int32_t *c) {{{body}\n}}\n"
        for n, (_, _, body) in LOOPS.items())
    with tempfile.TemporaryDirectory(prefix="kiln-dot-loops-") as tmp:
        c, o = Path(tmp) / "loops.c", Path(tmp) / "loops.o"
        c.write_text(src)
        subprocess.run([gcc, *FLAGS, "-c", str(c), "-o", str(o)], check=True)
        disasm = subprocess.run([objdump, "-d", str(o)], check=True, capture_output=True,
                                text=True).stdout
    stats = {n: loop_stats(disasm, n) for n in LOOPS}
    ref = stats["q15q15_2x2"][0] * 16 / LOOPS["q15q15_2x2"][0]
    print(f"{'loop':18} {'insns':>5} {'MACs':>4} {'/16 MACs':>8} {'spills':>6} "
          f"{'/ int16':>7}  what")
    for n, (macs, what, _) in LOOPS.items():
        insns, spills = stats[n]
        per16 = insns * 16 / macs
        print(f"{n:18} {insns:5d} {macs:4d} {per16:8.2f} {spills:6d} {per16 / ref:7.3f}  {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
