/* Kiln accelerator driver: device interface, DRAM window, program loading, error codes.
 *
 * The accelerator (hw/ISA.md) fetches instructions from DRAM and moves data between DRAM and
 * its on-chip buffers.  Here "DRAM" is one window of caller-provided memory: every DRAM
 * address of the ISA is a byte offset into it (LOAD/STORE count in elements, hw/ISA.md 2.2).
 * The static memory plan places the data, weights and micro-ops in the window; the driver
 * copies the instruction stream there and asks a device to run it to FINISH.
 *
 * A device is a struct of function pointers (kiln_vta_device).  kiln_vta_fsim.h provides the
 * functional simulator; a port to an FPGA or to the Verilator RTL model fills in the same
 * struct (docs/vta.md, "The C driver and the device interface").
 *
 * Freestanding C99: stdint.h, stddef.h and string.h only; nothing allocates. */
#ifndef KILN_VTA_H
#define KILN_VTA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Return codes of every kiln_vta_* function (and of a device's run). */
#define KILN_VTA_OK 0
#define KILN_VTA_ERR_ARGUMENT 1     /* NULL pointer, bad config, misplaced program, short memory */
#define KILN_VTA_ERR_DECODE 2       /* bad opcode, memory type, ALU op, reserved bit or token flag */
#define KILN_VTA_ERR_FINISH 3       /* the program does not end with its only FINISH */
#define KILN_VTA_ERR_SRAM_RANGE 4   /* a buffer row or micro-op index outside its on-chip buffer */
#define KILN_VTA_ERR_DRAM_RANGE 5   /* a DMA outside the DRAM window or into the instructions */
#define KILN_VTA_ERR_ALU_UOP 6      /* an ALU micro-op with wgt_idx != 0 */
#define KILN_VTA_ERR_UNSUPPORTED 7  /* an ALU op the target does not offer */
#define KILN_VTA_ERR_DEADLOCK 8     /* no engine can move: token or command queue deadlock */
#define KILN_VTA_ERR_TIMEOUT 9      /* the device did not report done in time (hardware) */
#define KILN_VTA_ERR_DEVICE 10      /* a device-specific failure (bus error, model crashed) */
#define KILN_VTA_ERR_STEPS 11       /* a GEMM/ALU loop longer than a simulator runs (a corrupt one) */
#define KILN_VTA_ERR_COUNT 12

/* ISA constants (hw/ISA.md section 2). */
#define KILN_VTA_INSN_BYTES 16u
#define KILN_VTA_UOP_BYTES 4u
enum { KILN_VTA_OP_LOAD = 0, KILN_VTA_OP_STORE = 1, KILN_VTA_OP_GEMM = 2, KILN_VTA_OP_FINISH = 3,
       KILN_VTA_OP_ALU = 4 };
enum { KILN_VTA_MEM_UOP = 0, KILN_VTA_MEM_WGT = 1, KILN_VTA_MEM_INP = 2, KILN_VTA_MEM_ACC = 3,
       KILN_VTA_MEM_OUT = 4 };
enum { KILN_VTA_ALU_MIN = 0, KILN_VTA_ALU_MAX = 1, KILN_VTA_ALU_ADD = 2, KILN_VTA_ALU_SHR = 3,
       KILN_VTA_ALU_MUL = 4 };
enum { KILN_VTA_ENGINE_LOAD = 0, KILN_VTA_ENGINE_COMPUTE = 1, KILN_VTA_ENGINE_STORE = 2 };
/* Token queues, as bits of a mask. */
enum { KILN_VTA_Q_L2C = 1, KILN_VTA_Q_C2L = 2, KILN_VTA_Q_C2S = 4, KILN_VTA_Q_S2C = 8 };

/* The shape and sizes of the accelerator (targets/vta.yaml; depths in rows). */
typedef struct kiln_vta_config {
  uint32_t batch, block_in, block_out;
  uint32_t inp_depth, wgt_depth, acc_depth, uop_depth;
  uint32_t cmd_queue_depth, token_queue_depth;
  uint32_t alu_ops; /* bit n set: ALU op n is offered (1u << KILN_VTA_ALU_MIN ...) */
} kiln_vta_config;

/* Compile-time defaults: targets/vta.yaml (tests/vta/test_cfsim_build.py checks they agree).
 * Override with -DKILN_VTA_BLOCK_IN=32 and so on for another variant. */
#ifndef KILN_VTA_BATCH
#define KILN_VTA_BATCH 1
#endif
#ifndef KILN_VTA_BLOCK_IN
#define KILN_VTA_BLOCK_IN 16
#endif
#ifndef KILN_VTA_BLOCK_OUT
#define KILN_VTA_BLOCK_OUT 16
#endif
#ifndef KILN_VTA_INP_DEPTH
#define KILN_VTA_INP_DEPTH 2048
#endif
#ifndef KILN_VTA_WGT_DEPTH
#define KILN_VTA_WGT_DEPTH 1024
#endif
#ifndef KILN_VTA_ACC_DEPTH
#define KILN_VTA_ACC_DEPTH 2048
#endif
#ifndef KILN_VTA_UOP_DEPTH
#define KILN_VTA_UOP_DEPTH 8192
#endif
#ifndef KILN_VTA_CMD_QUEUE_DEPTH
#define KILN_VTA_CMD_QUEUE_DEPTH 64
#endif
#ifndef KILN_VTA_TOKEN_QUEUE_DEPTH
#define KILN_VTA_TOKEN_QUEUE_DEPTH 8
#endif
#ifndef KILN_VTA_ALU_OPS
#define KILN_VTA_ALU_OPS 0x1Fu /* MIN MAX ADD SHR MUL */
#endif

/* The configuration given by the KILN_VTA_* macros above. */
void kiln_vta_config_default(kiln_vta_config *cfg);
/* KILN_VTA_OK if the sizes are usable (non-zero, within the ISA's field widths). */
int kiln_vta_config_check(const kiln_vta_config *cfg);

/* Counters of a run (those of toolchain/vta/fsim.py, same names: kiln_vta_counter_name). */
enum {
  KILN_VTA_CNT_INSTRUCTIONS, KILN_VTA_CNT_INSN_LOAD, KILN_VTA_CNT_INSN_STORE,
  KILN_VTA_CNT_INSN_GEMM, KILN_VTA_CNT_INSN_FINISH, KILN_VTA_CNT_INSN_ALU,
  KILN_VTA_CNT_BYTES_LOADED_UOP, KILN_VTA_CNT_BYTES_LOADED_WGT, KILN_VTA_CNT_BYTES_LOADED_INP,
  KILN_VTA_CNT_BYTES_LOADED_ACC, KILN_VTA_CNT_BYTES_STORED_OUT, KILN_VTA_CNT_GEMM_STEPS,
  KILN_VTA_CNT_MACS, KILN_VTA_CNT_ALU_STEPS, KILN_VTA_NCOUNTERS
};
typedef struct kiln_vta_counters {
  uint64_t v[KILN_VTA_NCOUNTERS];
} kiln_vta_counters;
/* "instructions", "insn_LOAD", ... "alu_steps"; NULL outside 0..KILN_VTA_NCOUNTERS-1. */
const char *kiln_vta_counter_name(int index);

/* What was malformed, for KILN_VTA_ERR_DECODE (kiln_vta_error.what; .value holds the field). */
enum { KILN_VTA_BAD_OPCODE = 1, KILN_VTA_BAD_RESERVED = 2, KILN_VTA_BAD_MEMORY_TYPE = 3,
       KILN_VTA_BAD_ALU_OP = 4, KILN_VTA_BAD_TOKEN_FLAG = 5, KILN_VTA_BAD_STORE_PAD = 6 };

/* Where and why a run failed.  Fields that do not apply are 0 (insn: KILN_VTA_NO_INSN). */
#define KILN_VTA_NO_INSN 0xFFFFFFFFu
enum { KILN_VTA_STATE_FINISHED = 0, KILN_VTA_STATE_POP = 1, KILN_VTA_STATE_PUSH = 2,
       KILN_VTA_STATE_FETCH = 3 };
typedef struct kiln_vta_error {
  int code;
  uint32_t insn;    /* index of the failing instruction */
  uint32_t what;    /* buffer (KILN_VTA_MEM_*) or, for KILN_VTA_ERR_DECODE, KILN_VTA_BAD_* */
  uint64_t value;   /* the offending row / DRAM element / micro-op index */
  uint64_t limit;   /* what it had to stay below (buffer depth, DRAM elements) */
  /* KILN_VTA_ERR_DEADLOCK: per engine (load, compute, store) */
  uint8_t state[3];  /* KILN_VTA_STATE_*: finished, waiting to pop, to push, fetch stalled */
  uint8_t queues[3]; /* the queues it waits on (KILN_VTA_Q_* mask) */
  uint32_t blocked_insn[3]; /* the instruction it is blocked at (fetch: the stalled one) */
} kiln_vta_error;

/* ---- the device interface ------------------------------------------------------------ */
/* A device runs a program that is already in the DRAM window and reports its counters.
 * `self` is the device's own state (e.g. a kiln_vta_fsim).  Every function returns a
 * KILN_VTA_* code. */
typedef struct kiln_vta_device {
  const char *name;
  void *self;
  /* Execute insn_count instructions stored at byte insn_addr of dram[0..dram_bytes) and
   * return when FINISH has retired and the load/store engines are idle (or on an error).
   * The device starts from reset: buffers zero, queues empty. */
  int (*run)(void *self, uint8_t *dram, size_t dram_bytes, size_t insn_addr,
             uint32_t insn_count);
  /* Counters of the last run; a device without some counter reports 0 for it. */
  int (*read_counters)(void *self, kiln_vta_counters *out);
  /* Details of the last failed run (may be NULL: the driver then reports the code only). */
  int (*read_error)(void *self, kiln_vta_error *out);
  /* Cache maintenance around a run, NULL when the device sees the CPU's writes directly:
   * flush before the device reads [p, p+n), invalidate before the CPU reads what it wrote. */
  void (*flush)(void *self, const void *p, size_t n);
  void (*invalidate)(void *self, void *p, size_t n);
} kiln_vta_device;

/* ---- the driver ------------------------------------------------------------------------ */
typedef struct kiln_vta {
  const kiln_vta_device *dev;
  uint8_t *dram;     /* the DRAM window (caller memory; address 0 of the accelerator) */
  size_t dram_bytes;
  size_t insn_addr;  /* where the loaded program sits in the window */
  uint32_t insn_count;
  kiln_vta_error error; /* of the last failing call */
} kiln_vta;

/* Attach a device to a DRAM window of dram_bytes at dram (16-byte aligned). */
int kiln_vta_init(kiln_vta *vta, const kiln_vta_device *dev, void *dram, size_t dram_bytes);
/* Copy n bytes into / out of the window at byte offset `offset` (bounds-checked). */
int kiln_vta_write(kiln_vta *vta, size_t offset, const void *src, size_t n);
int kiln_vta_read(const kiln_vta *vta, size_t offset, void *dst, size_t n);
/* Write micro-op words (host integers) little-endian at byte `offset` (4-byte aligned). */
int kiln_vta_write_uops(kiln_vta *vta, size_t offset, const uint32_t *uops, size_t count);
/* Check insn_count encoded instructions and copy them to byte insn_addr (16-byte aligned)
 * of the window.  insns may already point there (nothing is copied then). */
int kiln_vta_load_program(kiln_vta *vta, const uint8_t *insns, uint32_t insn_count,
                          size_t insn_addr);
/* Run the loaded program to FINISH (flushing and invalidating the window around it). */
int kiln_vta_run(kiln_vta *vta);
/* Counters of the last run. */
int kiln_vta_read_counters(const kiln_vta *vta, kiln_vta_counters *out);
/* The counters of a program counted from its instructions alone (every one is static:
 * instructions by opcode, DMA bytes by buffer, GEMM steps, MACs, ALU steps), equal to what
 * the functional simulator counts when the program runs to FINISH.  For a device that counts
 * cycles instead (the RTL), so a run still reports what it moved and computed. */
int kiln_vta_program_counters(const kiln_vta_config *cfg, const uint8_t *insns,
                              uint32_t insn_count, kiln_vta_counters *out);
/* A one-line description of a KILN_VTA_* code. */
const char *kiln_vta_strerror(int code);

/* ---- instruction decoding (shared by the driver and the simulator) --------------------- */
typedef struct kiln_vta_insn {
  uint8_t opcode, pop_prev, pop_next, push_prev, push_next;
  /* LOAD / STORE */
  uint8_t memory_type, y_pad_top, y_pad_bottom, x_pad_left, x_pad_right;
  uint32_t sram_base, dram_base, y_size, x_size, x_stride;
  /* GEMM / ALU */
  uint8_t reset, alu_op, use_imm;
  int32_t imm;
  uint32_t uop_bgn, uop_end, iter_out, iter_in;
  uint32_t dst_factor_out, dst_factor_in, src_factor_out, src_factor_in;
  uint32_t wgt_factor_out, wgt_factor_in;
} kiln_vta_insn;

/* Decode the 16 little-endian bytes at p; KILN_VTA_ERR_DECODE for a malformed word
 * (invalid opcode, memory type or ALU op, a reserved bit set, a token flag the engine lacks,
 * STORE padding).  err (if not NULL) receives what (KILN_VTA_BAD_*) and the field value. */
int kiln_vta_decode(const uint8_t *p, kiln_vta_insn *out, kiln_vta_error *err);
/* The engine (KILN_VTA_ENGINE_*) that executes a decoded instruction. */
int kiln_vta_engine(const kiln_vta_insn *insn);
/* Queues (KILN_VTA_Q_* mask) a decoded instruction pops from / pushes to. */
unsigned kiln_vta_pops(const kiln_vta_insn *insn);
unsigned kiln_vta_pushes(const kiln_vta_insn *insn);
/* Decode a whole program and check that FINISH is its last and only FINISH; on failure the
 * error (if not NULL) names the instruction. */
int kiln_vta_check_program(const uint8_t *insns, uint32_t insn_count, kiln_vta_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KILN_VTA_H */
