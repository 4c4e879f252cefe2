"""Instructions per 16 MACs of Cortex-M4 int8 convolution dot loops, from the disassembly.

    python benchmarks/cortex_m_dot_loops.py            # needs arm-none-eabi-gcc / -objdump
    python benchmarks/cortex_m_dot_loops.py --check    # + each loop run under QEMU

The k x k int8 convolutions of the ``cortex-m4`` target take two output pixels x two
channels a step. With weights widened to int16 at compile time (``dot_q15q15_2x2``) the
loop needs no SXTB16; with int8 weights (``dot_q15q7_2x2``, the ``cortex-m4-compact``
variant) each weight word is unpacked by two SXTB16 for only two pixels. This script
compiles copies of the two shipped loops (of the ``targets/cortex-m4.yaml`` bodies,
K = 144, the same load macros) and int8-weight candidates that amortise the unpacking
over four pixels, with the target's flags at ``-O3`` (``KERNEL_OPT``), and prints per
loop: its instructions (from the backward branch's target to the branch), the MACs one
pass does, instructions per 16 MACs, the stack loads/stores inside the loop (spills) and
the ratio to the int16 loop. Static counts of one loop pass, which is what executes (no
data-dependent branch).
The candidates are not kernels of the target (their im2col layouts differ), only the
arithmetic of each tile (docs/int8.md, "int8 weights in flash"); ``--check`` links every
loop into one program for QEMU's mps2-an386 (picolibc semihosting) that runs it on random
int16 activations and int8 weights (K = 144) against a plain C dot product, prints
``exact`` or ``MISMATCH`` per loop and makes the script exit non-zero on a mismatch.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def flags() -> list[str]:
    """The ``cortex-m4`` target's cflags with ``-O3``, the firmware's ``KERNEL_OPT``."""
    from toolchain.target import load_target

    return [f for f in load_target("cortex-m4").cflags if not f.startswith("-O")] + ["-O3"]


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

#: name -> (output pixels, channels, im2col interleaved per 4 k) of each loop's tile, for
#: ``--check`` (``q15q15`` loops read int16 weights in k order, the others int8 weights in
#: ``pack_dsp_weights``' [w0, w2, w1, w3] order)
TILES: dict[str, tuple[int, int, bool]] = {
    "q15q15_2x2": (2, 2, False), "q15q7_2x2": (2, 2, False), "q15q7_4x2": (4, 2, False),
    "q15q7_4x1": (4, 1, False), "q15q7_4x1_ldm": (4, 1, True), "q15q7_4x1_ldm_x2": (4, 1, True),
}

CHECK_MAIN = r"""
#include <stdio.h>
static int16_t A[4 * K] __attribute__((aligned(8))), AI[4 * K] __attribute__((aligned(8)));
static int8_t W[2 * K], WP[2 * K] __attribute__((aligned(8)));
static int16_t W16[2 * K] __attribute__((aligned(8)));
static int32_t REF[4][2];
static uint32_t seed = 12345;
static int rnd(void) { seed = seed * 1103515245u + 12345u; return (int)(seed >> 16); }
static int check(const char *name, void (*f)(const int16_t *, const int8_t *, int32_t *),
                 int pixels, int channels, int interleaved, int wide) {
  int32_t c[8] = {0}, bad = 0;
  f(interleaved ? AI : A, wide ? (const int8_t *)W16 : WP, c);
  for (int p = 0; p < pixels; p++)
    for (int j = 0; j < channels; j++) bad |= c[p * channels + j] != REF[p][j];
  printf("%s %s\n", bad ? "MISMATCH" : "exact", name);
  return bad;
}
int main(void) {
  for (int i = 0; i < 4 * K; i++) A[i] = (int16_t)(rnd() % 511 - 255);
  for (int i = 0; i < 2 * K; i++) W[i] = (int8_t)(rnd() % 256 - 128), W16[i] = W[i];
  for (int i = 0; i < 2 * K; i++)  /* [w0, w2, w1, w3] per group of 4 */
    WP[i] = W[(i & ~3) + ((i & 3) == 1 ? 2 : (i & 3) == 2 ? 1 : i & 3)];
  for (int p = 0; p < 4; p++)
    for (int k = 0; k < K; k++) AI[(k / 4) * 16 + p * 4 + k % 4] = A[p * K + k];
  for (int p = 0; p < 4; p++)
    for (int j = 0; j < 2; j++)
      for (int k = 0; k < K; k++) REF[p][j] += A[p * K + k] * W[j * K + k];
  int bad = 0;
"""


def check_source() -> str:
    """A program that runs every loop once on random data against a plain C dot product."""
    calls = "".join(f'  bad |= check("{n}", {n}, {p}, {c}, {int(i)}, '
                    f'{int(n.startswith("q15q15"))});\n' for n, (p, c, i) in TILES.items())
    return CHECK_MAIN + calls + "  return bad;\n}\n"


def run_check(gcc: str, src: str, tmp: Path) -> int:
    """Link ``src`` + :func:`check_source` for QEMU's mps2-an386 (picolibc semihosting) and
    run it; its exit status (non-zero: a loop's sums differ from the reference)."""
    from toolchain.boards.descriptor import load_board
    from toolchain.boards.qemu import qemu_command

    board = load_board("qemu-mps2-an386")
    c, elf = tmp / "check.c", tmp / "check.elf"
    c.write_text(src + check_source())
    mem = {"__flash": board.flash.origin, "__flash_size": board.flash.size,
           "__ram": board.ram.origin, "__ram_size": board.ram.size}
    subprocess.run([gcc, *flags(), "--specs=picolibc.specs", "--oslib=semihost",
                    "--crt0=semihost", *(f"-Wl,--defsym={k}={v:#x}" for k, v in mem.items()),
                    str(c), "-o", str(elf)], check=True)
    return subprocess.run(qemu_command(board, elf), timeout=120).returncode


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="also run every loop under QEMU (mps2-an386) against a C reference")
    args = ap.parse_args(argv)
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
        subprocess.run([gcc, *flags(), "-c", str(c), "-o", str(o)], check=True)
        disasm = subprocess.run([objdump, "-d", str(o)], check=True, capture_output=True,
                                text=True).stdout
        status = run_check(gcc, src, Path(tmp)) if args.check else 0
    stats = {n: loop_stats(disasm, n) for n in LOOPS}
    ref = stats["q15q15_2x2"][0] * 16 / LOOPS["q15q15_2x2"][0]
    print(f"{'loop':18} {'insns':>5} {'MACs':>4} {'/16 MACs':>8} {'spills':>6} "
          f"{'/ int16':>7}  what")
    for n, (macs, what, _) in LOOPS.items():
        insns, spills = stats[n]
        per16 = insns * 16 / macs
        print(f"{n:18} {insns:5d} {macs:4d} {per16:8.2f} {spills:6d} {per16 / ref:7.3f}  {what}")
    return status


if __name__ == "__main__":
    sys.exit(main())
