// Shapes (from the generated vta_params.svh) and the instruction layout of hw/ISA.md.
//
// vta_params.svh is written by `python -m toolchain.vta.rtl --params` from targets/vta.yaml;
// the copy in hw/rtl/ is the default configuration (a test keeps it in sync), and a build for
// another configuration puts its own copy first on the include path.
// Waiver: not every module uses every shape parameter, and each decode function reads
// only its own bits of the 128-bit instruction.
/* verilator lint_off UNUSEDPARAM */
/* verilator lint_off UNUSEDSIGNAL */
package vta_pkg;
  `include "vta_params.svh"

  // ---- derived sizes (hw/ISA.md section 1)
  localparam int INP_BYTES = BATCH * BLOCK_IN;
  localparam int WGT_BYTES = BLOCK_OUT * BLOCK_IN;
  localparam int ACC_BYTES = 4 * BATCH * BLOCK_OUT;
  localparam int OUT_BYTES = BATCH * BLOCK_OUT;
  localparam int UOP_BYTES = 4;
  localparam int INSN_BYTES = 16;
  localparam int BUS_BITS = BUS_BYTES * 8;
  localparam int INP_AW = $clog2(INP_DEPTH);
  localparam int WGT_AW = $clog2(WGT_DEPTH);
  localparam int ACC_AW = $clog2(ACC_DEPTH);
  localparam int UOP_AW = $clog2(UOP_DEPTH);
  localparam int LEN_BITS = 16;  // DRAM burst length field, in beats
  localparam int IDX_BITS = 32;  // instruction index carried with each command (diagnostics)

  // ---- header (section 2.1)
  localparam logic [2:0] OP_LOAD = 3'd0, OP_STORE = 3'd1, OP_GEMM = 3'd2, OP_FINISH = 3'd3,
                         OP_ALU = 3'd4;
  localparam logic [2:0] MEM_UOP = 3'd0, MEM_WGT = 3'd1, MEM_INP = 3'd2, MEM_ACC = 3'd3,
                         MEM_OUT = 3'd4;
  localparam logic [2:0] ALU_MIN = 3'd0, ALU_MAX = 3'd1, ALU_ADD = 3'd2, ALU_SHR = 3'd3,
                         ALU_MUL = 3'd4;

  typedef struct packed {
    logic pop_prev;
    logic pop_next;
    logic push_prev;
    logic push_next;
  } deps_t;

  function automatic logic [2:0] insn_opcode(input logic [127:0] i);
    return i[2:0];
  endfunction
  function automatic deps_t insn_deps(input logic [127:0] i);
    return '{pop_prev: i[3], pop_next: i[4], push_prev: i[5], push_next: i[6]};
  endfunction

  // ---- LOAD / STORE (section 2.2)
  typedef struct packed {
    logic [2:0]  mem_type;
    logic [15:0] sram_base;
    logic [31:0] dram_base;
    logic [15:0] y_size;
    logic [15:0] x_size;
    logic [15:0] x_stride;
    logic [3:0]  y_pad_top;
    logic [3:0]  y_pad_bottom;
    logic [3:0]  x_pad_left;
    logic [3:0]  x_pad_right;
  } mem_insn_t;

  function automatic mem_insn_t decode_mem(input logic [127:0] i);
    mem_insn_t m;
    m.mem_type = i[9:7];
    m.sram_base = i[25:10];
    m.dram_base = i[57:26];
    m.y_size = i[73:58];
    m.x_size = i[89:74];
    m.x_stride = i[105:90];
    m.y_pad_top = i[109:106];
    m.y_pad_bottom = i[113:110];
    m.x_pad_left = i[117:114];
    m.x_pad_right = i[121:118];
    return m;
  endfunction

  // ---- GEMM / ALU (section 2.3)
  typedef struct packed {
    logic        reset;
    logic [12:0] uop_bgn;
    logic [13:0] uop_end;
    logic [13:0] iter_out;
    logic [13:0] iter_in;
    logic [10:0] dst_factor_out;
    logic [10:0] dst_factor_in;
    logic [10:0] src_factor_out;
    logic [10:0] src_factor_in;
    logic [9:0]  wgt_factor_out;
    logic [9:0]  wgt_factor_in;
    logic [2:0]  alu_op;
    logic        use_imm;
    logic [15:0] imm;
  } loop_insn_t;

  function automatic loop_insn_t decode_loop(input logic [127:0] i);
    loop_insn_t l;
    l.reset = i[7];
    l.uop_bgn = i[20:8];
    l.uop_end = i[34:21];
    l.iter_out = i[48:35];
    l.iter_in = i[62:49];
    l.dst_factor_out = i[73:63];
    l.dst_factor_in = i[84:74];
    l.src_factor_out = i[95:85];
    l.src_factor_in = i[106:96];
    l.wgt_factor_out = i[116:107];
    l.wgt_factor_in = i[126:117];
    l.alu_op = i[109:107];
    l.use_imm = i[110];
    l.imm = i[126:111];
    return l;
  endfunction

  // micro-op fields
  function automatic logic [10:0] uop_acc(input logic [31:0] u);
    return u[10:0];
  endfunction
  function automatic logic [10:0] uop_inp(input logic [31:0] u);
    return u[21:11];
  endfunction
  function automatic logic [9:0] uop_wgt(input logic [31:0] u);
    return u[31:22];
  endfunction

  // engine states reported for counters and deadlock diagnostics
  localparam logic [1:0] ST_IDLE = 2'd0, ST_POP = 2'd1, ST_EXEC = 2'd2, ST_PUSH = 2'd3;
endpackage
/* verilator lint_on UNUSEDSIGNAL */
/* verilator lint_on UNUSEDPARAM */
