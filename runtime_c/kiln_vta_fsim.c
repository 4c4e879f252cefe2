/* Kiln accelerator functional simulator (freestanding C99): see kiln_vta_fsim.h.
 * Semantics: hw/ISA.md; engine protocol: toolchain/vta/tokens.py, step for step. */
#include "kiln_vta_fsim.h"

#include <string.h>

#define NQUEUES 4

/* ---- configuration and memory ----------------------------------------------------------- */
size_t kiln_vta_fsim_mem_bytes(const kiln_vta_config *cfg) {
  if (kiln_vta_config_check(cfg) != KILN_VTA_OK) {
    return 0;
  }
  return KILN_VTA_FSIM_MEM_BYTES(cfg->batch, cfg->block_in, cfg->block_out, cfg->inp_depth,
                                 cfg->wgt_depth, cfg->acc_depth, cfg->uop_depth,
                                 cfg->cmd_queue_depth);
}

int kiln_vta_fsim_init(kiln_vta_fsim *sim, const kiln_vta_config *cfg, void *mem,
                       size_t mem_bytes) {
  uint8_t *p = (uint8_t *)mem;
  size_t need = kiln_vta_fsim_mem_bytes(cfg);
  if (sim == NULL) {
    return KILN_VTA_ERR_ARGUMENT;
  }
  memset(sim, 0, sizeof *sim);
  sim->error.insn = KILN_VTA_NO_INSN;
  if (need == 0 || mem == NULL || ((uintptr_t)mem & 3u) || mem_bytes < need) {
    sim->error.code = KILN_VTA_ERR_ARGUMENT;
    return KILN_VTA_ERR_ARGUMENT;
  }
  sim->cfg = *cfg;
  sim->acc = (int32_t *)(void *)p;
  p += 4u * (size_t)cfg->acc_depth * cfg->batch * cfg->block_out;
  sim->uop = (uint32_t *)(void *)p;
  p += 4u * (size_t)cfg->uop_depth;
  sim->cmd = (uint32_t *)(void *)p;
  p += 12u * (size_t)cfg->cmd_queue_depth;
  sim->wgt = (int8_t *)p;
  p += (size_t)cfg->wgt_depth * cfg->block_out * cfg->block_in;
  sim->inp = (int8_t *)p;
  return KILN_VTA_OK;
}

/* ---- helpers ------------------------------------------------------------------------------ */
/* Two's-complement reinterpretation without implementation-defined conversions. */
static int32_t s32(uint32_t v) {
  return v <= 0x7FFFFFFFu ? (int32_t)v : -(int32_t)(~v) - 1;
}

static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
         ((uint32_t)p[3] << 24);
}

static int fault(kiln_vta_fsim *s, int code, uint32_t what, uint64_t value, uint64_t limit) {
  s->error.code = code;
  s->error.what = what;
  s->error.value = value;
  s->error.limit = limit;
  return code;
}

static size_t row_bytes(const kiln_vta_config *c, unsigned mt) {
  switch (mt) {
    case KILN_VTA_MEM_UOP:
      return 4u;
    case KILN_VTA_MEM_WGT:
      return (size_t)c->block_out * c->block_in;
    case KILN_VTA_MEM_INP:
      return (size_t)c->batch * c->block_in;
    case KILN_VTA_MEM_ACC:
      return 4u * (size_t)c->batch * c->block_out;
    default:
      return (size_t)c->batch * c->block_out;
  }
}

static uint64_t depth(const kiln_vta_config *c, unsigned mt) {
  switch (mt) {
    case KILN_VTA_MEM_UOP:
      return c->uop_depth;
    case KILN_VTA_MEM_WGT:
      return c->wgt_depth;
    case KILN_VTA_MEM_INP:
      return c->inp_depth;
    default:
      return c->acc_depth;
  }
}

/* Check that DRAM elements first..last (rows of rb bytes) are inside the data part of the
 * window and clear of the instruction stream [insn_lo, insn_hi). */
typedef struct window {
  uint8_t *dram;
  uint64_t limit, insn_lo, insn_hi;
} window;

static int dram_ok(kiln_vta_fsim *s, const window *w, uint64_t first, uint64_t last,
                   size_t rb) {
  uint64_t lo = first * rb, hi = (last + 1u) * rb;
  if (hi > w->limit) {
    return fault(s, KILN_VTA_ERR_DRAM_RANGE, 0, last, w->limit);
  }
  if (lo < w->insn_hi && w->insn_lo < hi) {
    return fault(s, KILN_VTA_ERR_DRAM_RANGE, 1, last, w->insn_lo);
  }
  return KILN_VTA_OK;
}

/* ---- DMA ---------------------------------------------------------------------------------- */
static void put_row(kiln_vta_fsim *s, unsigned mt, uint64_t row, const uint8_t *src,
                    size_t rb) {
  size_t i;
  switch (mt) {
    case KILN_VTA_MEM_UOP:
      s->uop[row] = src != NULL ? rd32(src) : 0u;
      break;
    case KILN_VTA_MEM_ACC: {
      int32_t *dst = s->acc + row * (rb / 4u);
      for (i = 0; i < rb / 4u; ++i) {
        dst[i] = src != NULL ? s32(rd32(src + 4u * i)) : 0;
      }
      break;
    }
    default: {
      int8_t *dst = (mt == KILN_VTA_MEM_WGT ? s->wgt : s->inp) + row * rb;
      if (src != NULL) {
        memcpy(dst, src, rb);
      } else {
        memset(dst, 0, rb);
      }
    }
  }
}

static int load(kiln_vta_fsim *s, const window *w, const kiln_vta_insn *d) {
  const unsigned mt = d->memory_type;
  const size_t rb = row_bytes(&s->cfg, mt);
  const uint64_t h = (uint64_t)d->y_pad_top + d->y_size + d->y_pad_bottom;
  const uint64_t wd = (uint64_t)d->x_pad_left + d->x_size + d->x_pad_right;
  uint64_t y, x, row;
  int rc;
  if (d->sram_base + h * wd > depth(&s->cfg, mt)) {
    return fault(s, KILN_VTA_ERR_SRAM_RANGE, mt, d->sram_base + h * wd - 1u,
                 depth(&s->cfg, mt));
  }
  if (d->y_size && d->x_size) {
    uint64_t last = (uint64_t)d->dram_base + (uint64_t)(d->y_size - 1u) * d->x_stride +
                    d->x_size - 1u;
    rc = dram_ok(s, w, d->dram_base, last, rb);
    if (rc != KILN_VTA_OK) {
      return rc;
    }
    s->counters.v[KILN_VTA_CNT_BYTES_LOADED_UOP + (mt == KILN_VTA_MEM_UOP   ? 0
                                                   : mt == KILN_VTA_MEM_WGT ? 1
                                                   : mt == KILN_VTA_MEM_INP ? 2
                                                                            : 3)] +=
        (uint64_t)d->y_size * d->x_size * rb;
  }
  row = d->sram_base;
  for (y = 0; y < h; ++y) {
    int in_y = y >= d->y_pad_top && y < (uint64_t)d->y_pad_top + d->y_size;
    for (x = 0; x < wd; ++x, ++row) {
      if (in_y && x >= d->x_pad_left && x < (uint64_t)d->x_pad_left + d->x_size) {
        uint64_t e = d->dram_base + (y - d->y_pad_top) * d->x_stride + (x - d->x_pad_left);
        put_row(s, mt, row, w->dram + e * rb, rb);
      } else {
        put_row(s, mt, row, NULL, rb);
      }
    }
  }
  return KILN_VTA_OK;
}

static int store(kiln_vta_fsim *s, const window *w, const kiln_vta_insn *d) {
  const size_t rb = row_bytes(&s->cfg, KILN_VTA_MEM_OUT);
  const size_t per_row = (size_t)s->cfg.batch * s->cfg.block_out; /* = rb */
  const uint64_t n = (uint64_t)d->y_size * d->x_size;
  uint64_t y, x, row;
  size_t i;
  int rc;
  if (d->sram_base + n > s->cfg.acc_depth) {
    return fault(s, KILN_VTA_ERR_SRAM_RANGE, KILN_VTA_MEM_OUT, d->sram_base + n - 1u,
                 s->cfg.acc_depth);
  }
  if (n == 0) {
    return KILN_VTA_OK;
  }
  rc = dram_ok(s, w, d->dram_base,
               (uint64_t)d->dram_base + (uint64_t)(d->y_size - 1u) * d->x_stride + d->x_size - 1u,
               rb);
  if (rc != KILN_VTA_OK) {
    return rc;
  }
  row = d->sram_base;
  for (y = 0; y < d->y_size; ++y) {
    for (x = 0; x < d->x_size; ++x, ++row) {
      uint8_t *dst = w->dram + (d->dram_base + y * d->x_stride + x) * rb;
      const int32_t *src = s->acc + row * per_row;
      for (i = 0; i < per_row; ++i) {
        dst[i] = (uint8_t)((uint32_t)src[i] & 0xFFu); /* OUT mirrors ACC (hw/ISA.md 1) */
      }
    }
  }
  s->counters.v[KILN_VTA_CNT_BYTES_STORED_OUT] += n * rb;
  return KILN_VTA_OK;
}

/* ---- GEMM and ALU ------------------------------------------------------------------------- */
#define UOP_ACC(u) ((u) & 0x7FFu)
#define UOP_INP(u) (((u) >> 11) & 0x7FFu)
#define UOP_WGT(u) ((u) >> 22)

/* The largest index of an operand over the loop nest (all steps are non-negative). */
static uint64_t max_index(uint32_t max_uop, uint32_t io, uint32_t ii, uint32_t fo, uint32_t fi) {
  return max_uop + (uint64_t)(io - 1u) * fo + (uint64_t)(ii - 1u) * fi;
}

/* Range checks of a GEMM/ALU before any step runs (as fsim.py does). */
static int loop_checks(kiln_vta_fsim *s, const kiln_vta_insn *d, int alu) {
  const kiln_vta_config *c = &s->cfg;
  uint32_t u, ma = 0, ms = 0, mw = 0, any_wgt = 0;
  uint64_t steps;
  if (d->uop_bgn > d->uop_end || d->uop_end > c->uop_depth) {
    return fault(s, KILN_VTA_ERR_SRAM_RANGE, KILN_VTA_MEM_UOP, d->uop_end, c->uop_depth);
  }
  steps = (uint64_t)d->iter_out * d->iter_in * (d->uop_end - d->uop_bgn);
  if (steps > KILN_VTA_FSIM_MAX_STEPS) {
    return fault(s, KILN_VTA_ERR_STEPS, 0, steps, KILN_VTA_FSIM_MAX_STEPS);
  }
  for (u = d->uop_bgn; u < d->uop_end; ++u) {
    uint32_t w = s->uop[u];
    ma = UOP_ACC(w) > ma ? UOP_ACC(w) : ma;
    ms = UOP_INP(w) > ms ? UOP_INP(w) : ms;
    mw = UOP_WGT(w) > mw ? UOP_WGT(w) : mw;
    any_wgt |= UOP_WGT(w);
  }
  if (alu && any_wgt) {
    return fault(s, KILN_VTA_ERR_ALU_UOP, KILN_VTA_MEM_UOP, mw, 0);
  }
  if (steps == 0) {
    return KILN_VTA_OK;
  }
  {
    uint64_t a = max_index(ma, d->iter_out, d->iter_in, d->dst_factor_out, d->dst_factor_in);
    uint64_t src = max_index(ms, d->iter_out, d->iter_in, d->src_factor_out, d->src_factor_in);
    uint64_t wg = max_index(mw, d->iter_out, d->iter_in, d->wgt_factor_out, d->wgt_factor_in);
    if (a >= c->acc_depth) {
      return fault(s, KILN_VTA_ERR_SRAM_RANGE, KILN_VTA_MEM_ACC, a, c->acc_depth);
    }
    if (alu) {
      if (!d->use_imm && src >= c->acc_depth) {
        return fault(s, KILN_VTA_ERR_SRAM_RANGE, KILN_VTA_MEM_ACC, src, c->acc_depth);
      }
    } else if (!d->reset) {
      if (src >= c->inp_depth) {
        return fault(s, KILN_VTA_ERR_SRAM_RANGE, KILN_VTA_MEM_INP, src, c->inp_depth);
      }
      if (wg >= c->wgt_depth) {
        return fault(s, KILN_VTA_ERR_SRAM_RANGE, KILN_VTA_MEM_WGT, wg, c->wgt_depth);
      }
    }
  }
  return KILN_VTA_OK;
}

static int gemm(kiln_vta_fsim *s, const kiln_vta_insn *d) {
  const kiln_vta_config *c = &s->cfg;
  const size_t acc_row = (size_t)c->batch * c->block_out;
  const size_t inp_row = (size_t)c->batch * c->block_in;
  const size_t wgt_row = (size_t)c->block_out * c->block_in;
  uint32_t i, j, u, b, o, k;
  int rc = loop_checks(s, d, 0);
  if (rc != KILN_VTA_OK) {
    return rc;
  }
  for (i = 0; i < d->iter_out; ++i) {
    for (j = 0; j < d->iter_in; ++j) {
      for (u = d->uop_bgn; u < d->uop_end; ++u) {
        const uint32_t w = s->uop[u];
        int32_t *acc = s->acc + (UOP_ACC(w) + i * d->dst_factor_out + j * d->dst_factor_in) * acc_row;
        const int8_t *x, *wt;
        if (d->reset) {
          memset(acc, 0, acc_row * sizeof *acc);
          continue;
        }
        x = s->inp + (UOP_INP(w) + i * d->src_factor_out + j * d->src_factor_in) * inp_row;
        wt = s->wgt + (UOP_WGT(w) + i * d->wgt_factor_out + j * d->wgt_factor_in) * wgt_row;
        for (b = 0; b < c->batch; ++b) {
          for (o = 0; o < c->block_out; ++o) {
            const int8_t *xr = x + (size_t)b * c->block_in, *wr = wt + (size_t)o * c->block_in;
            int32_t sum = 0;
            for (k = 0; k < c->block_in; ++k) {
              sum += (int32_t)xr[k] * (int32_t)wr[k];
            }
            acc[(size_t)b * c->block_out + o] =
                s32((uint32_t)acc[(size_t)b * c->block_out + o] + (uint32_t)sum);
          }
        }
      }
    }
  }
  if (!d->reset) {
    uint64_t steps = (uint64_t)d->iter_out * d->iter_in * (d->uop_end - d->uop_bgn);
    s->counters.v[KILN_VTA_CNT_GEMM_STEPS] += steps;
    s->counters.v[KILN_VTA_CNT_MACS] += steps * c->batch * c->block_in * c->block_out;
  }
  return KILN_VTA_OK;
}

/* One ALU element (hw/ISA.md 2.3). */
static int32_t alu_elem(unsigned op, int32_t a, int32_t b) {
  switch (op) {
    case KILN_VTA_ALU_MIN:
      return a < b ? a : b;
    case KILN_VTA_ALU_MAX:
      return a > b ? a : b;
    case KILN_VTA_ALU_ADD:
      return s32((uint32_t)a + (uint32_t)b);
    case KILN_VTA_ALU_MUL:
      return s32((uint32_t)a * (uint32_t)b);
    default: { /* SHR: the low 6 bits of b as a signed shift; negative shifts left */
      int sh = (int)((uint32_t)b & 63u);
      if (sh >= 32) {
        sh -= 64;
      }
      if (sh >= 0) {
        return a >= 0 ? a >> sh : ~(~a >> sh); /* arithmetic shift, portably */
      }
      return -sh >= 32 ? 0 : s32((uint32_t)a << -sh);
    }
  }
}

static int alu(kiln_vta_fsim *s, const kiln_vta_insn *d) {
  const kiln_vta_config *c = &s->cfg;
  const size_t acc_row = (size_t)c->batch * c->block_out;
  uint32_t i, j, u;
  size_t e;
  int rc;
  if (!((c->alu_ops >> d->alu_op) & 1u)) {
    return fault(s, KILN_VTA_ERR_UNSUPPORTED, d->alu_op, d->alu_op, 0);
  }
  rc = loop_checks(s, d, 1);
  if (rc != KILN_VTA_OK) {
    return rc;
  }
  for (i = 0; i < d->iter_out; ++i) {
    for (j = 0; j < d->iter_in; ++j) {
      for (u = d->uop_bgn; u < d->uop_end; ++u) {
        const uint32_t w = s->uop[u];
        int32_t *a = s->acc + (UOP_ACC(w) + i * d->dst_factor_out + j * d->dst_factor_in) * acc_row;
        const int32_t *b =
            s->acc + (UOP_INP(w) + i * d->src_factor_out + j * d->src_factor_in) * acc_row;
        for (e = 0; e < acc_row; ++e) {
          a[e] = alu_elem(d->alu_op, a[e], d->use_imm ? d->imm : b[e]);
        }
      }
    }
  }
  s->counters.v[KILN_VTA_CNT_ALU_STEPS] +=
      (uint64_t)d->iter_out * d->iter_in * (d->uop_end - d->uop_bgn);
  return KILN_VTA_OK;
}

static int execute(kiln_vta_fsim *s, const window *w, uint32_t idx, const kiln_vta_insn *d) {
  static const int counter_of_op[5] = {KILN_VTA_CNT_INSN_LOAD, KILN_VTA_CNT_INSN_STORE,
                                       KILN_VTA_CNT_INSN_GEMM, KILN_VTA_CNT_INSN_FINISH,
                                       KILN_VTA_CNT_INSN_ALU};
  int rc = KILN_VTA_OK;
  s->counters.v[counter_of_op[d->opcode]] += 1u;
  switch (d->opcode) {
    case KILN_VTA_OP_LOAD:
      rc = load(s, w, d);
      break;
    case KILN_VTA_OP_STORE:
      rc = store(s, w, d);
      break;
    case KILN_VTA_OP_GEMM:
      rc = gemm(s, d);
      break;
    case KILN_VTA_OP_ALU:
      rc = alu(s, d);
      break;
    default:
      break;
  }
  if (rc != KILN_VTA_OK) {
    s->error.insn = idx;
    return rc;
  }
  if (s->order != NULL && s->order_len < s->order_cap) {
    s->order[s->order_len] = idx;
  }
  s->order_len += 1u;
  return KILN_VTA_OK;
}

/* ---- fetch, engines and token queues (toolchain/vta/tokens.py) ---------------------------- */
typedef struct engine {
  uint32_t *cmd; /* ring of cmd_queue_depth instruction indices */
  uint32_t head, count;
  int pushing;     /* the retiring instruction still has tokens to push */
  unsigned pending; /* queues it still has to push to */
  uint32_t current;
} engine;

typedef struct machine {
  kiln_vta_fsim *s;
  const window *w;
  const uint8_t *insns;
  uint32_t n, pc;
  uint32_t tokens[NQUEUES];
  engine eng[3];
} machine;

static int queue_index(unsigned bit) {
  return bit == KILN_VTA_Q_L2C ? 0 : bit == KILN_VTA_Q_C2L ? 1 : bit == KILN_VTA_Q_C2S ? 2 : 3;
}

static void decode_at(const machine *m, uint32_t idx, kiln_vta_insn *d) {
  /* the program was checked before the run and DMA cannot reach it: this cannot fail */
  (void)kiln_vta_decode(m->insns + (size_t)idx * KILN_VTA_INSN_BYTES, d, NULL);
}

static int fetch(machine *m) {
  int moved = 0;
  kiln_vta_insn d;
  while (m->pc < m->n) {
    engine *e;
    decode_at(m, m->pc, &d);
    e = &m->eng[kiln_vta_engine(&d)];
    if (e->count >= m->s->cfg.cmd_queue_depth) {
      break;
    }
    e->cmd[(e->head + e->count) % m->s->cfg.cmd_queue_depth] = m->pc;
    e->count += 1u;
    m->pc += 1u;
    moved = 1;
  }
  return moved;
}

/* Push what room allows; returns whether any token moved. */
static int push_pending(machine *m, engine *e) {
  unsigned left = 0, bit;
  for (bit = 1; bit <= KILN_VTA_Q_S2C; bit <<= 1) {
    if (e->pending & bit) {
      uint32_t *t = &m->tokens[queue_index(bit)];
      if (*t < m->s->cfg.token_queue_depth) {
        *t += 1u;
      } else {
        left |= bit;
      }
    }
  }
  {
    int moved = left != e->pending;
    e->pending = left;
    e->pushing = left != 0;
    return moved;
  }
}

/* Advance one engine by one phase; *moved tells whether anything changed. */
static int step(machine *m, engine *e, int *moved) {
  kiln_vta_insn d;
  unsigned pops, bit;
  uint32_t idx;
  int rc;
  if (e->pushing) {
    *moved |= push_pending(m, e);
    return KILN_VTA_OK;
  }
  if (e->count == 0) {
    return KILN_VTA_OK;
  }
  idx = e->cmd[e->head];
  decode_at(m, idx, &d);
  pops = kiln_vta_pops(&d);
  for (bit = 1; bit <= KILN_VTA_Q_S2C; bit <<= 1) {
    if ((pops & bit) && m->tokens[queue_index(bit)] == 0) {
      return KILN_VTA_OK;
    }
  }
  for (bit = 1; bit <= KILN_VTA_Q_S2C; bit <<= 1) {
    if (pops & bit) {
      m->tokens[queue_index(bit)] -= 1u;
    }
  }
  e->head = (e->head + 1u) % m->s->cfg.cmd_queue_depth;
  e->count -= 1u;
  rc = execute(m->s, m->w, idx, &d);
  if (rc != KILN_VTA_OK) {
    return rc;
  }
  *moved = 1;
  e->current = idx;
  e->pending = kiln_vta_pushes(&d);
  push_pending(m, e);
  return KILN_VTA_OK;
}

static uint32_t xorshift(uint32_t *state) {
  uint32_t x = *state;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  *state = x;
  return x;
}

static int deadlock(machine *m) {
  kiln_vta_fsim *s = m->s;
  int i;
  s->error.code = KILN_VTA_ERR_DEADLOCK;
  for (i = 0; i < 3; ++i) {
    engine *e = &m->eng[i];
    if (e->pushing) {
      s->error.state[i] = KILN_VTA_STATE_PUSH;
      s->error.blocked_insn[i] = e->current;
      s->error.queues[i] = (uint8_t)e->pending;
    } else if (e->count) {
      kiln_vta_insn d;
      unsigned pops, bit, empty = 0;
      s->error.state[i] = KILN_VTA_STATE_POP;
      s->error.blocked_insn[i] = e->cmd[e->head];
      decode_at(m, e->cmd[e->head], &d);
      pops = kiln_vta_pops(&d);
      for (bit = 1; bit <= KILN_VTA_Q_S2C; bit <<= 1) {
        if ((pops & bit) && m->tokens[queue_index(bit)] == 0) {
          empty |= bit;
        }
      }
      s->error.queues[i] = (uint8_t)empty;
    } else if (m->pc < m->n) {
      s->error.state[i] = KILN_VTA_STATE_FETCH;
      s->error.blocked_insn[i] = m->pc;
    } else {
      s->error.state[i] = KILN_VTA_STATE_FINISHED;
      s->error.blocked_insn[i] = KILN_VTA_NO_INSN;
    }
  }
  return KILN_VTA_ERR_DEADLOCK;
}

static int run_engines(machine *m) {
  uint32_t rng = m->s->seed;
  int ids[3] = {0, 1, 2};
  for (;;) {
    int moved = fetch(m), k, rc;
    if (m->s->seed != 0) { /* Fisher-Yates over the three engines */
      for (k = 2; k > 0; --k) {
        int r = (int)(xorshift(&rng) % (uint32_t)(k + 1)), t = ids[k];
        ids[k] = ids[r];
        ids[r] = t;
      }
    }
    for (k = 0; k < 3; ++k) {
      rc = step(m, &m->eng[ids[k]], &moved);
      if (rc != KILN_VTA_OK) {
        return rc;
      }
    }
    if (m->pc == m->n && !m->eng[0].count && !m->eng[1].count && !m->eng[2].count &&
        !m->eng[0].pushing && !m->eng[1].pushing && !m->eng[2].pushing) {
      return KILN_VTA_OK;
    }
    if (!moved) {
      return deadlock(m);
    }
  }
}

/* ---- entry points ------------------------------------------------------------------------- */
int kiln_vta_fsim_run(kiln_vta_fsim *s, uint8_t *dram, size_t dram_bytes, size_t insn_addr,
                      uint32_t insn_count) {
  const kiln_vta_config *c;
  window w;
  machine m;
  int rc, i;
  if (s == NULL) {
    return KILN_VTA_ERR_ARGUMENT;
  }
  c = &s->cfg;
  memset(&s->counters, 0, sizeof s->counters);
  memset(&s->error, 0, sizeof s->error);
  s->error.insn = KILN_VTA_NO_INSN;
  s->order_len = 0;
  if (s->acc == NULL || dram == NULL || (insn_addr & 15u) || insn_addr > dram_bytes ||
      (size_t)insn_count > (dram_bytes - insn_addr) / KILN_VTA_INSN_BYTES) {
    return fault(s, KILN_VTA_ERR_ARGUMENT, 0, 0, 0);
  }
  rc = kiln_vta_check_program(dram + insn_addr, insn_count, &s->error);
  if (rc != KILN_VTA_OK) {
    return rc;
  }
  /* reset: every buffer zero, every queue empty (hw/ISA.md section 4) */
  memset(s->acc, 0, 4u * (size_t)c->acc_depth * c->batch * c->block_out);
  memset(s->uop, 0, 4u * (size_t)c->uop_depth);
  memset(s->wgt, 0, (size_t)c->wgt_depth * c->block_out * c->block_in);
  memset(s->inp, 0, (size_t)c->inp_depth * c->batch * c->block_in);
  w.dram = dram;
  w.limit = s->dma_limit != 0 && s->dma_limit < dram_bytes ? s->dma_limit : dram_bytes;
  w.insn_lo = insn_addr;
  w.insn_hi = insn_addr + (uint64_t)insn_count * KILN_VTA_INSN_BYTES;
  memset(&m, 0, sizeof m);
  m.s = s;
  m.w = &w;
  m.insns = dram + insn_addr;
  m.n = insn_count;
  if (s->in_order) {
    uint32_t idx;
    for (idx = 0; idx < insn_count; ++idx) {
      kiln_vta_insn d;
      decode_at(&m, idx, &d);
      rc = execute(s, &w, idx, &d);
      if (rc != KILN_VTA_OK) {
        return rc;
      }
    }
  } else {
    for (i = 0; i < 3; ++i) {
      m.eng[i].cmd = s->cmd + (size_t)i * c->cmd_queue_depth;
    }
    rc = run_engines(&m);
    if (rc != KILN_VTA_OK) {
      return rc;
    }
  }
  s->counters.v[KILN_VTA_CNT_INSTRUCTIONS] = insn_count;
  return KILN_VTA_OK;
}

static int dev_run(void *self, uint8_t *dram, size_t dram_bytes, size_t insn_addr,
                   uint32_t insn_count) {
  return kiln_vta_fsim_run((kiln_vta_fsim *)self, dram, dram_bytes, insn_addr, insn_count);
}

static int dev_counters(void *self, kiln_vta_counters *out) {
  *out = ((kiln_vta_fsim *)self)->counters;
  return KILN_VTA_OK;
}

static int dev_error(void *self, kiln_vta_error *out) {
  *out = ((kiln_vta_fsim *)self)->error;
  return KILN_VTA_OK;
}

void kiln_vta_fsim_device(kiln_vta_fsim *sim, kiln_vta_device *dev) {
  memset(dev, 0, sizeof *dev);
  dev->name = "fsim";
  dev->self = sim;
  dev->run = dev_run;
  dev->read_counters = dev_counters;
  dev->read_error = dev_error;
}
