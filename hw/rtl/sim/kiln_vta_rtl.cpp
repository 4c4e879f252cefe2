// The Verilator RTL model as a kiln_vta_device: see kiln_vta_rtl.h.
//
// The reset/start/wait sequence is the one toolchain/vta/rtl.py plays from cocotb.  The DRAM
// model's DPI functions (declared in kiln_dram_model.sv) are defined here over the window of
// the running device instead of kiln_dram.cpp's file-backed image; do not link both.
#include <cstdint>
#include <cstring>
#include <memory>

#include "Vvta_sim_top.h"
#include "kiln_vta_rtl.h"
#include "svdpi.h"
#include "verilated.h"

namespace {
uint8_t* g_dram = nullptr;  // the window of the run in progress
size_t g_bytes = 0;
bool g_wild_write = false;  // the model wrote outside the window

void tick(Vvta_sim_top* top, VerilatedContext* ctx) {
  top->clk = 0;
  top->eval();
  ctx->timeInc(1);
  top->clk = 1;
  top->eval();
  ctx->timeInc(1);
}

// Engine state of the RTL (0 idle, 1 waiting for tokens, 2 executing, 3 waiting to push)
// in the words of kiln_vta_error.
void explain_stall(const Vvta_sim_top* top, const uint8_t* insns, uint32_t count,
                   kiln_vta_error* err) {
  const uint32_t states[3] = {top->ld_state, top->cp_state, top->st_state};
  const uint32_t heads[3] = {top->ld_head, top->cp_head, top->st_head};
  const uint32_t queued[3] = {top->ld_qcount, top->cp_qcount, top->st_qcount};
  const uint32_t tokens[4] = {top->tok_l2c, top->tok_c2l, top->tok_c2s, top->tok_s2c};
  for (int e = 0; e < 3; ++e) {
    kiln_vta_insn d;
    const bool known = heads[e] < count &&
                       kiln_vta_decode(insns + 16u * heads[e], &d, nullptr) == KILN_VTA_OK;
    err->blocked_insn[e] = heads[e];
    err->queues[e] = 0;
    if (states[e] == 1 || (states[e] == 0 && queued[e] > 0)) {
      err->state[e] = KILN_VTA_STATE_POP;
      unsigned pops = known ? kiln_vta_pops(&d) : 0u;
      for (int q = 0; q < 4; ++q) {
        if ((pops >> q & 1u) && tokens[q] == 0) err->queues[e] |= static_cast<uint8_t>(1u << q);
      }
    } else if (states[e] == 3) {
      err->state[e] = KILN_VTA_STATE_PUSH;
      err->queues[e] = static_cast<uint8_t>(known ? kiln_vta_pushes(&d) : 0u);
    } else if (top->fetched < count) {
      err->state[e] = KILN_VTA_STATE_FETCH;
      err->blocked_insn[e] = top->fetched;
    } else {
      err->state[e] = KILN_VTA_STATE_FINISHED;
      err->blocked_insn[e] = KILN_VTA_NO_INSN;
    }
  }
}

int rtl_run(void* self, uint8_t* dram, size_t dram_bytes, size_t insn_addr,
            uint32_t insn_count) {
  auto* rtl = static_cast<kiln_vta_rtl*>(self);
  std::memset(rtl->hw, 0, sizeof rtl->hw);
  std::memset(&rtl->error, 0, sizeof rtl->error);
  rtl->error.insn = KILN_VTA_NO_INSN;
  if (dram == nullptr || insn_addr > 0xFFFFFFFFu || rtl->latency < 1 || rtl->bw16 < 1) {
    return rtl->error.code = KILN_VTA_ERR_ARGUMENT;
  }
  int rc = kiln_vta_check_program(dram + insn_addr, insn_count, &rtl->error);
  if (rc != KILN_VTA_OK) return rc;
  g_dram = dram;
  g_bytes = dram_bytes;
  g_wild_write = false;
  auto ctx = std::make_unique<VerilatedContext>();
  auto top = std::make_unique<Vvta_sim_top>(ctx.get());
  top->rst_n = 0;
  top->start = 0;
  top->sram_clear = 1;
  top->backdoor_load = 1;  // a no-op here: the window already holds the image
  top->backdoor_dump = 0;
  top->dram_latency = rtl->latency;
  top->dram_bw16 = rtl->bw16;
  top->insn_addr = static_cast<uint32_t>(insn_addr);
  top->insn_count = insn_count;
  tick(top.get(), ctx.get());
  tick(top.get(), ctx.get());
  top->backdoor_load = 0;
  top->sram_clear = 0;
  top->rst_n = 1;
  tick(top.get(), ctx.get());
  top->start = 1;
  tick(top.get(), ctx.get());
  top->start = 0;
  uint64_t cycles = 0;
  while (!top->done && !top->deadlock && cycles < rtl->timeout_cycles) {
    tick(top.get(), ctx.get());
    ++cycles;
  }
  const QData counts[KILN_VTA_RTL_NCOUNTERS] = {
      top->cnt_cycles, top->cnt_gemm, top->cnt_alu, top->cnt_load_busy,
      top->cnt_compute_busy, top->cnt_store_busy, top->cnt_load_wait,
      top->cnt_compute_wait, top->cnt_store_wait, top->cnt_rd_beats, top->cnt_wr_beats};
  for (int i = 0; i < KILN_VTA_RTL_NCOUNTERS; ++i) rtl->hw[i] = counts[i];
  if (!top->done) {
    rc = top->deadlock ? KILN_VTA_ERR_DEADLOCK : KILN_VTA_ERR_TIMEOUT;
    explain_stall(top.get(), dram + insn_addr, insn_count, &rtl->error);
  } else if (g_wild_write) {
    rc = KILN_VTA_ERR_DRAM_RANGE;
  }
  top->final();
  g_dram = nullptr;
  g_bytes = 0;
  rtl->error.code = rc;
  return rc;
}

int rtl_counters(void* self, kiln_vta_counters* out) {
  std::memset(out, 0, sizeof *out);
  (void)self;  // the RTL counts cycles, not the simulator's events: see kiln_vta_rtl.hw
  return KILN_VTA_OK;
}

int rtl_error(void* self, kiln_vta_error* out) {
  *out = static_cast<kiln_vta_rtl*>(self)->error;
  return KILN_VTA_OK;
}
}  // namespace

extern "C" void kiln_vta_rtl_device(kiln_vta_rtl* rtl, kiln_vta_device* dev) {
  std::memset(dev, 0, sizeof *dev);
  dev->name = "rtl";
  dev->self = rtl;
  dev->run = rtl_run;
  dev->read_counters = rtl_counters;
  dev->read_error = rtl_error;
}

// ---- the DRAM model's DPI functions, over the window --------------------------------------
extern "C" void kiln_dram_load() {}
extern "C" void kiln_dram_dump() {}
extern "C" long long kiln_dram_size() { return static_cast<long long>(g_bytes); }

extern "C" void kiln_dram_read(long long addr, int nbytes, svBitVecVal* data) {
  const int words = (nbytes + 3) / 4;
  for (int w = 0; w < words; ++w) data[w] = 0;
  for (int i = 0; i < nbytes; ++i) {
    const uint64_t a = static_cast<uint64_t>(addr) + static_cast<uint64_t>(i);
    const uint32_t b = a < g_bytes ? g_dram[a] : 0u;
    data[i / 4] |= b << (8 * (i % 4));
  }
}

extern "C" void kiln_dram_write(long long addr, int nbytes, const svBitVecVal* data,
                                const svBitVecVal* strb) {
  for (int i = 0; i < nbytes; ++i) {
    if (!((strb[i / 32] >> (i % 32)) & 1u)) continue;
    const uint64_t a = static_cast<uint64_t>(addr) + static_cast<uint64_t>(i);
    if (a >= g_bytes) {
      g_wild_write = true;
      continue;
    }
    g_dram[a] = static_cast<uint8_t>(data[i / 4] >> (8 * (i % 4)));
  }
}
