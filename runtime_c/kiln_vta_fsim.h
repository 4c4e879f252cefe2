/* Kiln accelerator functional simulator in C: bit-exact with toolchain/vta/fsim.py.
 *
 * It executes the instruction stream of hw/ISA.md against the DRAM window: 2-D LOAD/STORE
 * with padding, GEMM with reset and micro-op loops, the five ALU ops (immediate and tensor),
 * FINISH, and — unless in_order is set — fetch, the three in-order engines and the four
 * dependency-token queues with the target's command- and token-queue depths, so a program
 * whose tokens deadlock returns KILN_VTA_ERR_DEADLOCK instead of hanging.  Counters are those
 * of the Python simulator.  Nothing allocates: the on-chip buffers live in memory the caller
 * gives to kiln_vta_fsim_init (KILN_VTA_FSIM_MEM_BYTES of it).
 *
 *   static kiln_vta_fsim sim;
 *   static uint32_t sim_mem[KILN_VTA_FSIM_DEFAULT_MEM_BYTES / 4];
 *   kiln_vta_config cfg;  kiln_vta_device dev;  kiln_vta vta;
 *   kiln_vta_config_default(&cfg);
 *   kiln_vta_fsim_init(&sim, &cfg, sim_mem, sizeof sim_mem);
 *   kiln_vta_fsim_device(&sim, &dev);
 *   kiln_vta_init(&vta, &dev, dram, dram_bytes);      then load_program, run (kiln_vta.h) */
#ifndef KILN_VTA_FSIM_H
#define KILN_VTA_FSIM_H

#include "kiln_vta.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of memory the simulator needs for a configuration: ACC (int32 rows), UOP, three
 * command queues (uint32 each), WGT and INP (int8 rows). */
#define KILN_VTA_FSIM_MEM_BYTES(batch, block_in, block_out, inp_depth, wgt_depth, acc_depth, \
                                uop_depth, cmd_queue_depth)                                   \
  (4u * (size_t)(acc_depth) * (batch) * (block_out) + 4u * (size_t)(uop_depth) +              \
   12u * (size_t)(cmd_queue_depth) + (size_t)(wgt_depth) * (block_out) * (block_in) +        \
   (size_t)(inp_depth) * (batch) * (block_in))
#define KILN_VTA_FSIM_DEFAULT_MEM_BYTES                                                     \
  KILN_VTA_FSIM_MEM_BYTES(KILN_VTA_BATCH, KILN_VTA_BLOCK_IN, KILN_VTA_BLOCK_OUT,             \
                          KILN_VTA_INP_DEPTH, KILN_VTA_WGT_DEPTH, KILN_VTA_ACC_DEPTH,         \
                          KILN_VTA_UOP_DEPTH, KILN_VTA_CMD_QUEUE_DEPTH)

/* Micro-op steps one GEMM/ALU may execute (KILN_VTA_ERR_STEPS above), as in fsim.py: the
 * loop fields allow 16383 x 16383 x 8192 steps, hours of simulation for a corrupt word. */
#define KILN_VTA_FSIM_MAX_STEPS (1u << 24)

typedef struct kiln_vta_fsim {
  kiln_vta_config cfg;
  /* Options (set after kiln_vta_fsim_init; all 0 by default). */
  int in_order;      /* 1: run in program order ignoring tokens (fsim.py's plain mode) */
  uint32_t seed;     /* 0: engines take turns load, compute, store (the order of fsim.py's
                        token mode without a seed); otherwise a random turn order per round */
  size_t dma_limit;  /* DMA must stay below this byte of the window (0: the whole window) */
  uint32_t *order;   /* if not NULL, receives the index of each executed instruction */
  uint32_t order_cap, order_len;
  /* State (private). */
  int32_t *acc;
  uint32_t *uop;
  uint32_t *cmd;
  int8_t *wgt;
  int8_t *inp;
  kiln_vta_counters counters;
  kiln_vta_error error;
} kiln_vta_fsim;

/* Bytes of memory needed for cfg (0 if cfg is unusable). */
size_t kiln_vta_fsim_mem_bytes(const kiln_vta_config *cfg);
/* Set up a simulator for cfg in mem (4-byte aligned, kiln_vta_fsim_mem_bytes(cfg) bytes). */
int kiln_vta_fsim_init(kiln_vta_fsim *sim, const kiln_vta_config *cfg, void *mem,
                       size_t mem_bytes);
/* Fill dev with the simulator's device functions (dev->self = sim). */
void kiln_vta_fsim_device(kiln_vta_fsim *sim, kiln_vta_device *dev);
/* Run directly, without the driver (the device's run function). */
int kiln_vta_fsim_run(kiln_vta_fsim *sim, uint8_t *dram, size_t dram_bytes, size_t insn_addr,
                      uint32_t insn_count);

#ifdef __cplusplus
}
#endif

#endif /* KILN_VTA_FSIM_H */
