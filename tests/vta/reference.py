"""A slow, literal interpreter of hw/ISA.md used as the oracle for the functional simulator.

It decodes the encoded instruction *bytes* with its own field table (written from ISA.md, not
imported from toolchain.vta.isa) and executes every micro-op step one at a time with Python
integers, so it shares no code with the vectorised simulator it checks.
"""

from __future__ import annotations

import numpy as np

# name: (low bit, width), per hw/ISA.md section 2
HEADER = {"opcode": (0, 3), "pop_prev": (3, 1), "pop_next": (4, 1), "push_prev": (5, 1),
          "push_next": (6, 1)}
MEM = {"memory_type": (7, 3), "sram_base": (10, 16), "dram_base": (26, 32), "y_size": (58, 16),
       "x_size": (74, 16), "x_stride": (90, 16), "top": (106, 4), "bottom": (110, 4),
       "left": (114, 4), "right": (118, 4)}
LOOP = {"uop_bgn": (8, 13), "uop_end": (21, 14), "iter_out": (35, 14), "iter_in": (49, 14),
        "dfo": (63, 11), "dfi": (74, 11), "sfo": (85, 11), "sfi": (96, 11)}
GEMM = {"reset": (7, 1), "wfo": (107, 10), "wfi": (117, 10)}
ALU = {"alu_op": (107, 3), "use_imm": (110, 1), "imm": (111, 16)}


def fields(word: int, table: dict) -> dict:
    return {k: (word >> lo) & ((1 << w) - 1) for k, (lo, w) in table.items()}


def s32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >> 31 else v


def run_reference(insn_bytes: bytes, dram: np.ndarray, batch=1, block_in=16, block_out=16,
                  depths=(8192, 1024, 2048, 2048)) -> np.ndarray:
    """Execute the program in order; returns the DRAM after FINISH."""
    dram = bytearray(np.asarray(dram, np.uint8).tobytes())
    uop_d, wgt_d, inp_d, acc_d = depths
    rows = {0: 4, 1: block_out * block_in, 2: batch * block_in, 3: 4 * batch * block_out}
    bufs = {0: [bytes(4)] * uop_d, 1: [bytes(rows[1])] * wgt_d, 2: [bytes(rows[2])] * inp_d,
            3: [bytes(rows[3])] * acc_d}
    acc = bufs[3]

    def acc_vals(i):
        return list(np.frombuffer(acc[i], "<i4").astype(np.int64))

    def set_acc(i, vals):
        acc[i] = np.array([s32(int(v)) for v in vals], "<i4").tobytes()

    for pc in range(0, len(insn_bytes), 16):
        word = int.from_bytes(insn_bytes[pc:pc + 16], "little")
        op = word & 7
        if op in (0, 1):
            f = fields(word, MEM)
            mt, row = f["memory_type"], rows.get(f["memory_type"], batch * block_out)
            if op == 0:
                w = f["left"] + f["x_size"] + f["right"]
                h = f["top"] + f["y_size"] + f["bottom"]
                for y in range(h):
                    for x in range(w):
                        yy, xx = y - f["top"], x - f["left"]
                        if 0 <= yy < f["y_size"] and 0 <= xx < f["x_size"]:
                            e = f["dram_base"] + yy * f["x_stride"] + xx
                            val = bytes(dram[e * row:(e + 1) * row])
                        else:
                            val = bytes(row)
                        bufs[mt][f["sram_base"] + y * w + x] = val
            else:
                for y in range(f["y_size"]):
                    for x in range(f["x_size"]):
                        e = f["dram_base"] + y * f["x_stride"] + x
                        vals = acc_vals(f["sram_base"] + y * f["x_size"] + x)
                        dram[e * row:(e + 1) * row] = bytes(v & 0xFF for v in vals)
        elif op in (2, 4):
            f = fields(word, LOOP)
            f.update(fields(word, GEMM if op == 2 else ALU))
            for i in range(f["iter_out"]):
                for j in range(f["iter_in"]):
                    for u in range(f["uop_bgn"], f["uop_end"]):
                        uw = int.from_bytes(bufs[0][u], "little")
                        ua, us, ug = uw & 0x7FF, (uw >> 11) & 0x7FF, uw >> 22
                        a = ua + i * f["dfo"] + j * f["dfi"]
                        s = us + i * f["sfo"] + j * f["sfi"]
                        if op == 2:
                            g = ug + i * f["wfo"] + j * f["wfi"]
                            if f["reset"]:
                                set_acc(a, [0] * (batch * block_out))
                                continue
                            x = np.frombuffer(bufs[2][s], np.int8).reshape(batch, block_in)
                            wt = np.frombuffer(bufs[1][g], np.int8).reshape(block_out, block_in)
                            cur = acc_vals(a)
                            for b in range(batch):
                                for o in range(block_out):
                                    dot = sum(int(x[b, k]) * int(wt[o, k])
                                              for k in range(block_in))
                                    cur[b * block_out + o] += dot
                            set_acc(a, cur)
                        else:
                            imm = f["imm"] - (1 << 16) if f["imm"] >> 15 else f["imm"]
                            av = acc_vals(a)
                            bv = [imm] * len(av) if f["use_imm"] else acc_vals(s)
                            set_acc(a, [alu_op(f["alu_op"], int(p), int(q))
                                        for p, q in zip(av, bv, strict=True)])
        elif op == 3:
            break
    return np.frombuffer(bytes(dram), np.uint8).copy()


def alu_op(op: int, a: int, b: int) -> int:
    if op == 0:
        return min(a, b)
    if op == 1:
        return max(a, b)
    if op == 2:
        return a + b
    if op == 4:
        return a * b
    sh = b & 63
    if sh >= 32:
        sh -= 64
    return a >> sh if sh >= 0 else (a << -sh)
