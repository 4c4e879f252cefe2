/* Kiln accelerator driver and instruction decoder (freestanding C99): see kiln_vta.h. */
#include "kiln_vta.h"

#include <string.h>

/* ---- configuration ---------------------------------------------------------------------- */
void kiln_vta_config_default(kiln_vta_config *cfg) {
  cfg->batch = KILN_VTA_BATCH;
  cfg->block_in = KILN_VTA_BLOCK_IN;
  cfg->block_out = KILN_VTA_BLOCK_OUT;
  cfg->inp_depth = KILN_VTA_INP_DEPTH;
  cfg->wgt_depth = KILN_VTA_WGT_DEPTH;
  cfg->acc_depth = KILN_VTA_ACC_DEPTH;
  cfg->uop_depth = KILN_VTA_UOP_DEPTH;
  cfg->cmd_queue_depth = KILN_VTA_CMD_QUEUE_DEPTH;
  cfg->token_queue_depth = KILN_VTA_TOKEN_QUEUE_DEPTH;
  cfg->alu_ops = KILN_VTA_ALU_OPS;
}

int kiln_vta_config_check(const kiln_vta_config *cfg) {
  if (cfg == NULL || cfg->batch == 0 || cfg->block_in == 0 || cfg->block_out == 0 ||
      cfg->inp_depth == 0 || cfg->wgt_depth == 0 || cfg->acc_depth == 0 ||
      cfg->uop_depth == 0 || cfg->cmd_queue_depth == 0 || cfg->token_queue_depth == 0) {
    return KILN_VTA_ERR_ARGUMENT;
  }
  /* the micro-op and instruction field widths (hw/ISA.md section 1) */
  if (cfg->uop_depth > (1u << 13) || cfg->inp_depth > (1u << 11) ||
      cfg->acc_depth > (1u << 11) || cfg->wgt_depth > (1u << 10) || (cfg->alu_ops & ~0x1Fu)) {
    return KILN_VTA_ERR_ARGUMENT;
  }
  return KILN_VTA_OK;
}

/* ---- counters and messages -------------------------------------------------------------- */
static const char *const counter_names[KILN_VTA_NCOUNTERS] = {
    "instructions", "insn_LOAD", "insn_STORE", "insn_GEMM", "insn_FINISH", "insn_ALU",
    "bytes_loaded_uop", "bytes_loaded_wgt", "bytes_loaded_inp", "bytes_loaded_acc",
    "bytes_stored_out", "gemm_steps", "macs", "alu_steps"};

const char *kiln_vta_counter_name(int index) {
  return index >= 0 && index < KILN_VTA_NCOUNTERS ? counter_names[index] : NULL;
}

/* Bytes of one row of buffer mt (hw/ISA.md section 1). */
static uint64_t dma_row_bytes(const kiln_vta_config *c, unsigned mt) {
  switch (mt) {
    case KILN_VTA_MEM_UOP:
      return 4u;
    case KILN_VTA_MEM_WGT:
      return (uint64_t)c->block_out * c->block_in;
    case KILN_VTA_MEM_INP:
      return (uint64_t)c->batch * c->block_in;
    case KILN_VTA_MEM_ACC:
      return 4u * (uint64_t)c->batch * c->block_out;
    default:
      return (uint64_t)c->batch * c->block_out;
  }
}

int kiln_vta_program_counters(const kiln_vta_config *cfg, const uint8_t *insns,
                              uint32_t insn_count, kiln_vta_counters *out) {
  static const int counter_of_op[5] = {KILN_VTA_CNT_INSN_LOAD, KILN_VTA_CNT_INSN_STORE,
                                       KILN_VTA_CNT_INSN_GEMM, KILN_VTA_CNT_INSN_FINISH,
                                       KILN_VTA_CNT_INSN_ALU};
  uint32_t i;
  if (cfg == NULL || insns == NULL || out == NULL) {
    return KILN_VTA_ERR_ARGUMENT;
  }
  memset(out, 0, sizeof *out);
  for (i = 0; i < insn_count; ++i) {
    kiln_vta_insn d;
    uint64_t n;
    int rc = kiln_vta_decode(insns + (size_t)i * KILN_VTA_INSN_BYTES, &d, NULL);
    if (rc != KILN_VTA_OK) {
      return rc;
    }
    out->v[counter_of_op[d.opcode]] += 1u;
    n = (uint64_t)d.y_size * d.x_size;
    if (d.opcode == KILN_VTA_OP_LOAD) {
      out->v[KILN_VTA_CNT_BYTES_LOADED_UOP + (d.memory_type == KILN_VTA_MEM_UOP   ? 0
                                              : d.memory_type == KILN_VTA_MEM_WGT ? 1
                                              : d.memory_type == KILN_VTA_MEM_INP ? 2
                                                                                  : 3)] +=
          n * dma_row_bytes(cfg, d.memory_type);
    } else if (d.opcode == KILN_VTA_OP_STORE) {
      out->v[KILN_VTA_CNT_BYTES_STORED_OUT] += n * dma_row_bytes(cfg, KILN_VTA_MEM_OUT);
    } else if (d.opcode == KILN_VTA_OP_GEMM || d.opcode == KILN_VTA_OP_ALU) {
      uint64_t steps = d.uop_end > d.uop_bgn
                           ? (uint64_t)d.iter_out * d.iter_in * (d.uop_end - d.uop_bgn)
                           : 0u;
      if (d.opcode == KILN_VTA_OP_ALU) {
        out->v[KILN_VTA_CNT_ALU_STEPS] += steps;
      } else if (!d.reset) {
        out->v[KILN_VTA_CNT_GEMM_STEPS] += steps;
        out->v[KILN_VTA_CNT_MACS] += steps * cfg->batch * cfg->block_in * cfg->block_out;
      }
    }
  }
  out->v[KILN_VTA_CNT_INSTRUCTIONS] = insn_count;
  return KILN_VTA_OK;
}

static const char *const messages[KILN_VTA_ERR_COUNT] = {
    "ok",
    "bad argument: a NULL pointer, an unusable configuration, too little memory, or a program "
    "that does not fit the DRAM window at a 16-byte aligned address",
    "malformed instruction: invalid opcode, memory type or ALU op, a reserved bit set, or a "
    "token flag its engine does not have",
    "the program does not end with FINISH, or has a FINISH before its end",
    "an on-chip buffer row or micro-op index outside its buffer",
    "a DMA outside the DRAM window (or over the instruction stream)",
    "an ALU micro-op with a non-zero wgt_idx",
    "an ALU op the target does not offer",
    "deadlock: no engine can move (a token is never pushed, or a queue is full for good)",
    "the device did not report done in time",
    "the device failed",
    "a GEMM/ALU instruction with more micro-op steps than the simulator runs in one "
    "instruction; split the loop"};

const char *kiln_vta_strerror(int code) {
  return code >= 0 && code < KILN_VTA_ERR_COUNT ? messages[code] : "unknown error code";
}

/* ---- decoding (hw/ISA.md section 2) ----------------------------------------------------- */
/* Bits [lo, lo+width) of the 128-bit little-endian word at p (width <= 32). */
static uint32_t bits(const uint8_t *p, unsigned lo, unsigned width) {
  uint64_t acc = 0;
  unsigned first = lo / 8u, last = (lo + width - 1u) / 8u, i;
  for (i = last + 1u; i-- > first;) {
    acc = (acc << 8) | p[i];
  }
  acc >>= lo % 8u;
  return (uint32_t)(acc & ((width == 32u) ? 0xFFFFFFFFu : ((1u << width) - 1u)));
}

/* Whether any bit of [lo, 127] is set. */
static int reserved_from(const uint8_t *p, unsigned lo) {
  unsigned b;
  for (b = lo; b < 128u; ++b) {
    if (((unsigned)p[b / 8u] >> (b % 8u)) & 1u) {
      return 1;
    }
  }
  return 0;
}

static int bad(kiln_vta_error *err, uint32_t what, uint64_t value) {
  if (err != NULL) {
    err->code = KILN_VTA_ERR_DECODE;
    err->what = what;
    err->value = value;
  }
  return KILN_VTA_ERR_DECODE;
}

int kiln_vta_engine(const kiln_vta_insn *insn) {
  if (insn->opcode == KILN_VTA_OP_LOAD) {
    return (insn->memory_type == KILN_VTA_MEM_INP || insn->memory_type == KILN_VTA_MEM_WGT)
               ? KILN_VTA_ENGINE_LOAD
               : KILN_VTA_ENGINE_COMPUTE;
  }
  return insn->opcode == KILN_VTA_OP_STORE ? KILN_VTA_ENGINE_STORE : KILN_VTA_ENGINE_COMPUTE;
}

/* hw/ISA.md section 3: which queue "previous"/"next" names for each engine. */
unsigned kiln_vta_pops(const kiln_vta_insn *insn) {
  switch (kiln_vta_engine(insn)) {
    case KILN_VTA_ENGINE_LOAD:
      return insn->pop_next ? KILN_VTA_Q_C2L : 0u;
    case KILN_VTA_ENGINE_STORE:
      return insn->pop_prev ? KILN_VTA_Q_C2S : 0u;
    default:
      return (insn->pop_prev ? KILN_VTA_Q_L2C : 0u) | (insn->pop_next ? KILN_VTA_Q_S2C : 0u);
  }
}

unsigned kiln_vta_pushes(const kiln_vta_insn *insn) {
  switch (kiln_vta_engine(insn)) {
    case KILN_VTA_ENGINE_LOAD:
      return insn->push_next ? KILN_VTA_Q_L2C : 0u;
    case KILN_VTA_ENGINE_STORE:
      return insn->push_prev ? KILN_VTA_Q_S2C : 0u;
    default:
      return (insn->push_prev ? KILN_VTA_Q_C2L : 0u) | (insn->push_next ? KILN_VTA_Q_C2S : 0u);
  }
}

static void decode_loop(const uint8_t *p, kiln_vta_insn *d) {
  d->uop_bgn = bits(p, 8, 13);
  d->uop_end = bits(p, 21, 14);
  d->iter_out = bits(p, 35, 14);
  d->iter_in = bits(p, 49, 14);
  d->dst_factor_out = bits(p, 63, 11);
  d->dst_factor_in = bits(p, 74, 11);
  d->src_factor_out = bits(p, 85, 11);
  d->src_factor_in = bits(p, 96, 11);
}

int kiln_vta_decode(const uint8_t *p, kiln_vta_insn *out, kiln_vta_error *err) {
  kiln_vta_insn d;
  memset(&d, 0, sizeof d);
  d.opcode = (uint8_t)bits(p, 0, 3);
  d.pop_prev = (uint8_t)bits(p, 3, 1);
  d.pop_next = (uint8_t)bits(p, 4, 1);
  d.push_prev = (uint8_t)bits(p, 5, 1);
  d.push_next = (uint8_t)bits(p, 6, 1);
  switch (d.opcode) {
    case KILN_VTA_OP_LOAD:
    case KILN_VTA_OP_STORE:
      if (reserved_from(p, 122)) {
        return bad(err, KILN_VTA_BAD_RESERVED, 122);
      }
      d.memory_type = (uint8_t)bits(p, 7, 3);
      d.sram_base = bits(p, 10, 16);
      d.dram_base = bits(p, 26, 32);
      d.y_size = bits(p, 58, 16);
      d.x_size = bits(p, 74, 16);
      d.x_stride = bits(p, 90, 16);
      d.y_pad_top = (uint8_t)bits(p, 106, 4);
      d.y_pad_bottom = (uint8_t)bits(p, 110, 4);
      d.x_pad_left = (uint8_t)bits(p, 114, 4);
      d.x_pad_right = (uint8_t)bits(p, 118, 4);
      if (d.memory_type > KILN_VTA_MEM_OUT ||
          (d.opcode == KILN_VTA_OP_LOAD && d.memory_type == KILN_VTA_MEM_OUT) ||
          (d.opcode == KILN_VTA_OP_STORE && d.memory_type != KILN_VTA_MEM_OUT)) {
        return bad(err, KILN_VTA_BAD_MEMORY_TYPE, d.memory_type);
      }
      if (d.opcode == KILN_VTA_OP_STORE &&
          (d.y_pad_top | d.y_pad_bottom | d.x_pad_left | d.x_pad_right)) {
        return bad(err, KILN_VTA_BAD_STORE_PAD, 0);
      }
      break;
    case KILN_VTA_OP_GEMM:
      if (reserved_from(p, 127)) {
        return bad(err, KILN_VTA_BAD_RESERVED, 127);
      }
      d.reset = (uint8_t)bits(p, 7, 1);
      decode_loop(p, &d);
      d.wgt_factor_out = bits(p, 107, 10);
      d.wgt_factor_in = bits(p, 117, 10);
      break;
    case KILN_VTA_OP_ALU: {
      uint32_t imm;
      if (bits(p, 7, 1) || reserved_from(p, 127)) {
        return bad(err, KILN_VTA_BAD_RESERVED, bits(p, 7, 1) ? 7u : 127u);
      }
      decode_loop(p, &d);
      d.alu_op = (uint8_t)bits(p, 107, 3);
      d.use_imm = (uint8_t)bits(p, 110, 1);
      imm = bits(p, 111, 16);
      d.imm = (imm & 0x8000u) ? (int32_t)imm - 0x10000 : (int32_t)imm;
      if (d.alu_op > KILN_VTA_ALU_MUL) {
        return bad(err, KILN_VTA_BAD_ALU_OP, d.alu_op);
      }
      break;
    }
    case KILN_VTA_OP_FINISH:
      if (reserved_from(p, 7)) {
        return bad(err, KILN_VTA_BAD_RESERVED, 7);
      }
      break;
    default:
      return bad(err, KILN_VTA_BAD_OPCODE, d.opcode);
  }
  {
    int engine = kiln_vta_engine(&d);
    if ((engine == KILN_VTA_ENGINE_LOAD && (d.pop_prev || d.push_prev)) ||
        (engine == KILN_VTA_ENGINE_STORE && (d.pop_next || d.push_next))) {
      return bad(err, KILN_VTA_BAD_TOKEN_FLAG, (uint64_t)bits(p, 3, 4));
    }
  }
  *out = d;
  return KILN_VTA_OK;
}

int kiln_vta_check_program(const uint8_t *insns, uint32_t insn_count, kiln_vta_error *err) {
  uint32_t i;
  kiln_vta_insn d;
  kiln_vta_error local;
  kiln_vta_error *e = err != NULL ? err : &local;
  memset(e, 0, sizeof *e);
  e->insn = KILN_VTA_NO_INSN;
  if (insns == NULL && insn_count) {
    e->code = KILN_VTA_ERR_ARGUMENT;
    return e->code;
  }
  for (i = 0; i < insn_count; ++i) {
    if (kiln_vta_decode(insns + (size_t)i * KILN_VTA_INSN_BYTES, &d, e) != KILN_VTA_OK) {
      e->insn = i;
      return e->code;
    }
    if ((d.opcode == KILN_VTA_OP_FINISH) != (i + 1u == insn_count)) {
      e->code = KILN_VTA_ERR_FINISH;
      e->insn = i;
      return e->code;
    }
  }
  if (insn_count == 0) {
    e->code = KILN_VTA_ERR_FINISH;
    return e->code;
  }
  return KILN_VTA_OK;
}

/* ---- the driver ------------------------------------------------------------------------- */
static int fail(kiln_vta *vta, int code) {
  memset(&vta->error, 0, sizeof vta->error);
  vta->error.code = code;
  vta->error.insn = KILN_VTA_NO_INSN;
  return code;
}

/* Whether [offset, offset+n) lies inside a window of `size` bytes (no overflow). */
static int inside(size_t offset, size_t n, size_t size) {
  return offset <= size && n <= size - offset;
}

int kiln_vta_init(kiln_vta *vta, const kiln_vta_device *dev, void *dram, size_t dram_bytes) {
  if (vta == NULL) {
    return KILN_VTA_ERR_ARGUMENT;
  }
  memset(vta, 0, sizeof *vta);
  vta->error.insn = KILN_VTA_NO_INSN;
  if (dev == NULL || dev->run == NULL || dram == NULL || ((uintptr_t)dram & 15u)) {
    return fail(vta, KILN_VTA_ERR_ARGUMENT);
  }
  vta->dev = dev;
  vta->dram = (uint8_t *)dram;
  vta->dram_bytes = dram_bytes;
  return KILN_VTA_OK;
}

int kiln_vta_write(kiln_vta *vta, size_t offset, const void *src, size_t n) {
  if (vta == NULL || vta->dram == NULL || (src == NULL && n) ||
      !inside(offset, n, vta->dram_bytes)) {
    return vta == NULL ? KILN_VTA_ERR_ARGUMENT : fail(vta, KILN_VTA_ERR_ARGUMENT);
  }
  if (n) {
    memmove(vta->dram + offset, src, n);
  }
  return KILN_VTA_OK;
}

int kiln_vta_read(const kiln_vta *vta, size_t offset, void *dst, size_t n) {
  if (vta == NULL || vta->dram == NULL || (dst == NULL && n) ||
      !inside(offset, n, vta->dram_bytes)) {
    return KILN_VTA_ERR_ARGUMENT;
  }
  if (n) {
    memmove(dst, vta->dram + offset, n);
  }
  return KILN_VTA_OK;
}

int kiln_vta_write_uops(kiln_vta *vta, size_t offset, const uint32_t *uops, size_t count) {
  size_t i;
  if (vta == NULL || vta->dram == NULL || (uops == NULL && count) || (offset & 3u) ||
      count > vta->dram_bytes / 4u || !inside(offset, count * 4u, vta->dram_bytes)) {
    return vta == NULL ? KILN_VTA_ERR_ARGUMENT : fail(vta, KILN_VTA_ERR_ARGUMENT);
  }
  for (i = 0; i < count; ++i) {
    uint8_t *p = vta->dram + offset + 4u * i;
    p[0] = (uint8_t)uops[i];
    p[1] = (uint8_t)(uops[i] >> 8);
    p[2] = (uint8_t)(uops[i] >> 16);
    p[3] = (uint8_t)(uops[i] >> 24);
  }
  return KILN_VTA_OK;
}

int kiln_vta_load_program(kiln_vta *vta, const uint8_t *insns, uint32_t insn_count,
                          size_t insn_addr) {
  size_t nbytes = (size_t)insn_count * KILN_VTA_INSN_BYTES;
  int rc;
  if (vta == NULL || vta->dram == NULL || insns == NULL || (insn_addr & 15u) ||
      (size_t)insn_count > vta->dram_bytes / KILN_VTA_INSN_BYTES ||
      !inside(insn_addr, nbytes, vta->dram_bytes)) {
    return vta == NULL ? KILN_VTA_ERR_ARGUMENT : fail(vta, KILN_VTA_ERR_ARGUMENT);
  }
  rc = kiln_vta_check_program(insns, insn_count, &vta->error);
  if (rc != KILN_VTA_OK) {
    return rc;
  }
  if (insns != vta->dram + insn_addr) {
    memmove(vta->dram + insn_addr, insns, nbytes);
  }
  vta->insn_addr = insn_addr;
  vta->insn_count = insn_count;
  return KILN_VTA_OK;
}

int kiln_vta_run(kiln_vta *vta) {
  const kiln_vta_device *dev;
  int rc;
  if (vta == NULL || vta->dev == NULL) {
    return KILN_VTA_ERR_ARGUMENT;
  }
  if (vta->insn_count == 0) {
    return fail(vta, KILN_VTA_ERR_ARGUMENT); /* no program loaded */
  }
  dev = vta->dev;
  if (dev->flush != NULL) {
    dev->flush(dev->self, vta->dram, vta->dram_bytes);
  }
  rc = dev->run(dev->self, vta->dram, vta->dram_bytes, vta->insn_addr, vta->insn_count);
  if (dev->invalidate != NULL) {
    dev->invalidate(dev->self, vta->dram, vta->dram_bytes);
  }
  if (rc != KILN_VTA_OK) {
    fail(vta, rc);
    if (dev->read_error != NULL) {
      dev->read_error(dev->self, &vta->error);
      vta->error.code = rc;
    }
  }
  return rc;
}

int kiln_vta_read_counters(const kiln_vta *vta, kiln_vta_counters *out) {
  if (vta == NULL || vta->dev == NULL || out == NULL) {
    return KILN_VTA_ERR_ARGUMENT;
  }
  if (vta->dev->read_counters == NULL) {
    memset(out, 0, sizeof *out);
    return KILN_VTA_OK;
  }
  return vta->dev->read_counters(vta->dev->self, out);
}
