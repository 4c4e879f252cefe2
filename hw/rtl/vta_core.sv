// The accelerator: fetch, load, compute and store engines, their command queues, the four
// dependency-token queues, the INP/WGT/OUT buffers (UOP and ACC live in compute), the DRAM
// port arbiter, the control interface and the performance counters.
//
// Control: pulse `start` with `insn_addr` / `insn_count`; `done` rises when compute has retired
// FINISH and fetch, load and store are idle with empty queues (hw/ISA.md 2.4). `deadlock`
// rises instead when, while running, no engine has made progress for STALL_LIMIT cycles.
module vta_core
  import vta_pkg::*;
#(
    parameter int STALL_LIMIT = 4096
) (
    input  logic                 clk,
    input  logic                 rst_n,
    input  logic                 sram_clear,
    input  logic                 start,
    input  logic [31:0]          insn_addr,
    input  logic [31:0]          insn_count,
    output logic                 done,
    output logic                 deadlock,
    // DRAM port
    output logic                 m_req_valid,
    input  logic                 m_req_ready,
    output logic [31:0]          m_req_addr,
    output logic [LEN_BITS-1:0]  m_req_len,
    input  logic                 m_resp_valid,
    input  logic [BUS_BITS-1:0]  m_resp_data,
    input  logic                 m_resp_last,
    output logic                 m_resp_ready,
    output logic                 m_wr_valid,
    input  logic                 m_wr_ready,
    output logic [31:0]          m_wr_addr,
    output logic [BUS_BITS-1:0]  m_wr_data,
    output logic [BUS_BYTES-1:0] m_wr_strb,
    output logic                 m_wr_last,
    input  logic                 m_wr_ack,
    // performance counters (cleared by start, counting while running)
    output logic [63:0]          cnt_cycles,
    output logic [63:0]          cnt_gemm,
    output logic [63:0]          cnt_alu,
    output logic [63:0]          cnt_load_busy,
    output logic [63:0]          cnt_compute_busy,
    output logic [63:0]          cnt_store_busy,
    output logic [63:0]          cnt_load_wait,
    output logic [63:0]          cnt_compute_wait,
    output logic [63:0]          cnt_store_wait,
    output logic [63:0]          cnt_rd_beats,
    output logic [63:0]          cnt_wr_beats,
    // status for diagnostics: engine states, queue heads and fill levels
    output logic [1:0]           ld_state,
    output logic [1:0]           cp_state,
    output logic [1:0]           st_state,
    output logic [31:0]          ld_head,
    output logic [31:0]          cp_head,
    output logic [31:0]          st_head,
    output logic [7:0]           ld_qcount,
    output logic [7:0]           cp_qcount,
    output logic [7:0]           st_qcount,
    output logic [7:0]           tok_l2c,
    output logic [7:0]           tok_c2l,
    output logic [7:0]           tok_c2s,
    output logic [7:0]           tok_s2c,
    output logic [31:0]          fetched
);
  localparam int CW = IDX_BITS + 128;
  localparam int QW = $clog2(CMD_QUEUE_DEPTH) + 1;

  logic running;

  // ---------------------------------------------------------------- fetch + command queues
  logic f_req_valid, f_req_ready, f_resp_valid, f_resp_ready, f_busy, f_active;
  logic [31:0] f_req_addr;
  logic [LEN_BITS-1:0] f_req_len;
  logic [BUS_BITS-1:0] rd_data;
  logic ld_push, cp_push, st_push, ld_room, cp_room, st_room;
  logic [CW-1:0] f_cmd, ld_cmd, cp_cmd, st_cmd;
  logic ld_valid, cp_valid, st_valid, ld_pop, cp_pop, st_pop;
  logic [QW-1:0] ld_cnt, cp_cnt, st_cnt;

  vta_fetch u_fetch (
      .clk, .rst_n, .start, .insn_addr, .insn_count,
      .req_valid(f_req_valid), .req_ready(f_req_ready), .req_addr(f_req_addr),
      .req_len(f_req_len), .resp_valid(f_resp_valid), .resp_data(rd_data),
      .resp_ready(f_resp_ready), .ld_valid(ld_push), .cp_valid(cp_push), .st_valid(st_push),
      .cmd(f_cmd), .ld_room, .cp_room, .st_room, .busy(f_busy), .active(f_active),
      .dispatched(fetched)
  );

  vta_fifo #(.WIDTH(CW), .DEPTH(CMD_QUEUE_DEPTH)) u_ldq (
      .clk, .rst_n, .wr_en(ld_push), .wr_data(f_cmd), .wr_ready(ld_room),
      .rd_en(ld_pop), .rd_data(ld_cmd), .rd_valid(ld_valid), .count(ld_cnt)
  );
  vta_fifo #(.WIDTH(CW), .DEPTH(CMD_QUEUE_DEPTH)) u_cpq (
      .clk, .rst_n, .wr_en(cp_push), .wr_data(f_cmd), .wr_ready(cp_room),
      .rd_en(cp_pop), .rd_data(cp_cmd), .rd_valid(cp_valid), .count(cp_cnt)
  );
  vta_fifo #(.WIDTH(CW), .DEPTH(CMD_QUEUE_DEPTH)) u_stq (
      .clk, .rst_n, .wr_en(st_push), .wr_data(f_cmd), .wr_ready(st_room),
      .rd_en(st_pop), .rd_data(st_cmd), .rd_valid(st_valid), .count(st_cnt)
  );

  // ---------------------------------------------------------------- token queues
  logic l2c_push, l2c_pop, c2l_push, c2l_pop, c2s_push, c2s_pop, s2c_push, s2c_pop;
  logic [7:0] n_l2c, n_c2l, n_c2s, n_s2c;
  localparam logic [7:0] TD = 8'(TOKEN_QUEUE_DEPTH);
  always_ff @(posedge clk) begin
    if (!rst_n || start) begin
      {n_l2c, n_c2l, n_c2s, n_s2c} <= '0;
    end else begin
      n_l2c <= n_l2c + 8'(l2c_push) - 8'(l2c_pop);
      n_c2l <= n_c2l + 8'(c2l_push) - 8'(c2l_pop);
      n_c2s <= n_c2s + 8'(c2s_push) - 8'(c2s_pop);
      n_s2c <= n_s2c + 8'(s2c_push) - 8'(s2c_pop);
    end
  end

  // ---------------------------------------------------------------- buffers
  logic inp_we, wgt_we, inp_re, wgt_re, out_re;
  logic [1:0] out_we;
  logic [INP_AW-1:0] inp_wa, inp_ra;
  logic [WGT_AW-1:0] wgt_wa, wgt_ra;
  logic [ACC_AW-1:0] out_ra;
  logic [1:0][ACC_AW-1:0] out_wa;
  logic [INP_BYTES*8-1:0] inp_wd, inp_rd;
  logic [WGT_BYTES*8-1:0] wgt_wd, wgt_rd;
  logic [OUT_BYTES*8-1:0] out_rd;
  logic [1:0][OUT_BYTES*8-1:0] out_wd;

  vta_sram #(.WIDTH(INP_BYTES * 8), .DEPTH(INP_DEPTH)) u_inp (
      .clk, .clear(sram_clear), .wr_en(inp_we), .wr_addr(inp_wa), .wr_data(inp_wd),
      .rd_en(inp_re), .rd_addr(inp_ra), .rd_data(inp_rd)
  );
  vta_sram #(.WIDTH(WGT_BYTES * 8), .DEPTH(WGT_DEPTH)) u_wgt (
      .clk, .clear(sram_clear), .wr_en(wgt_we), .wr_addr(wgt_wa), .wr_data(wgt_wd),
      .rd_en(wgt_re), .rd_addr(wgt_ra), .rd_data(wgt_rd)
  );
  vta_sram #(.WIDTH(OUT_BYTES * 8), .DEPTH(ACC_DEPTH), .NWRITE(2)) u_out (
      .clk, .clear(sram_clear), .wr_en(out_we), .wr_addr(out_wa), .wr_data(out_wd),
      .rd_en(out_re), .rd_addr(out_ra), .rd_data(out_rd)
  );

  // ---------------------------------------------------------------- engines
  logic l_req_valid, l_req_ready, l_resp_valid, l_resp_ready;
  logic c_req_valid, c_req_ready, c_resp_valid, c_resp_ready;
  logic [31:0] l_req_addr, c_req_addr;
  logic [LEN_BITS-1:0] l_req_len, c_req_len;
  logic ld_wait, cp_wait, st_wait, finish_retired, gemm_step, alu_step;

  vta_load u_load (
      .clk, .rst_n, .cmd_valid(ld_valid), .cmd_insn(ld_cmd[127:0]), .cmd_pop(ld_pop),
      .c2l_avail(n_c2l != 0), .l2c_room(n_l2c < TD), .c2l_pop, .l2c_push,
      .req_valid(l_req_valid), .req_ready(l_req_ready), .req_addr(l_req_addr),
      .req_len(l_req_len), .resp_valid(l_resp_valid), .resp_data(rd_data),
      .resp_ready(l_resp_ready), .inp_wr_en(inp_we), .inp_wr_addr(inp_wa),
      .inp_wr_data(inp_wd), .wgt_wr_en(wgt_we), .wgt_wr_addr(wgt_wa), .wgt_wr_data(wgt_wd),
      .state(ld_state), .token_wait(ld_wait)
  );

  vta_compute u_compute (
      .clk, .rst_n, .sram_clear, .cmd_valid(cp_valid), .cmd_insn(cp_cmd[127:0]),
      .cmd_pop(cp_pop), .l2c_avail(n_l2c != 0), .s2c_avail(n_s2c != 0),
      .c2l_room(n_c2l < TD), .c2s_room(n_c2s < TD), .l2c_pop, .s2c_pop, .c2l_push, .c2s_push,
      .req_valid(c_req_valid), .req_ready(c_req_ready), .req_addr(c_req_addr),
      .req_len(c_req_len), .resp_valid(c_resp_valid), .resp_data(rd_data),
      .resp_ready(c_resp_ready), .inp_rd_en(inp_re), .inp_rd_addr(inp_ra),
      .inp_rd_data(inp_rd), .wgt_rd_en(wgt_re), .wgt_rd_addr(wgt_ra), .wgt_rd_data(wgt_rd),
      .out_wr_en(out_we), .out_wr_addr(out_wa), .out_wr_data(out_wd), .finish_retired,
      .state(cp_state), .token_wait(cp_wait), .gemm_step, .alu_step
  );

  vta_store u_store (
      .clk, .rst_n, .cmd_valid(st_valid), .cmd_insn(st_cmd[127:0]), .cmd_pop(st_pop),
      .c2s_avail(n_c2s != 0), .s2c_room(n_s2c < TD), .c2s_pop, .s2c_push,
      .out_rd_en(out_re), .out_rd_addr(out_ra), .out_rd_data(out_rd),
      .wr_valid(m_wr_valid), .wr_ready(m_wr_ready), .wr_addr(m_wr_addr), .wr_data(m_wr_data),
      .wr_strb(m_wr_strb), .wr_last(m_wr_last), .wr_ack(m_wr_ack), .state(st_state),
      .token_wait(st_wait)
  );

  // ---------------------------------------------------------------- DRAM read arbitration
  vta_mem_arb #(.N(3)) u_arb (
      .clk, .rst_n,
      .req_valid({c_req_valid, l_req_valid, f_req_valid}),
      .req_ready({c_req_ready, l_req_ready, f_req_ready}),
      .req_addr({c_req_addr, l_req_addr, f_req_addr}),
      .req_len({c_req_len, l_req_len, f_req_len}),
      .resp_valid({c_resp_valid, l_resp_valid, f_resp_valid}), .resp_data(rd_data),
      .resp_ready({c_resp_ready, l_resp_ready, f_resp_ready}),
      .m_req_valid, .m_req_ready, .m_req_addr, .m_req_len, .m_resp_valid, .m_resp_data,
      .m_resp_last, .m_resp_ready
  );

  // ---------------------------------------------------------------- control, counters
  wire ld_idle = ld_state == ST_IDLE && !ld_valid;
  wire st_idle = st_state == ST_IDLE && !st_valid;
  wire all_done = finish_retired && ld_idle && st_idle && !f_busy;
  wire progress = f_active || ld_state == ST_EXEC || cp_state == ST_EXEC ||
                  st_state == ST_EXEC || m_resp_valid;
  logic [31:0] stall;

  always_ff @(posedge clk) begin
    if (!rst_n) begin
      running <= 1'b0;
      done <= 1'b0;
      deadlock <= 1'b0;
      stall <= '0;
    end else if (start) begin
      running <= 1'b1;
      done <= 1'b0;
      deadlock <= 1'b0;
      stall <= '0;
      {cnt_cycles, cnt_gemm, cnt_alu, cnt_load_busy, cnt_compute_busy, cnt_store_busy,
       cnt_load_wait, cnt_compute_wait, cnt_store_wait, cnt_rd_beats, cnt_wr_beats} <= '0;
    end else if (running) begin
      stall <= progress ? '0 : stall + 1;
      if (all_done) begin
        running <= 1'b0;
        done <= 1'b1;
      end else if (stall >= STALL_LIMIT) begin
        running <= 1'b0;
        deadlock <= 1'b1;
      end
      cnt_cycles <= cnt_cycles + 1;
      cnt_gemm <= cnt_gemm + 64'(gemm_step);
      cnt_alu <= cnt_alu + 64'(alu_step);
      cnt_load_busy <= cnt_load_busy + 64'(ld_state == ST_EXEC);
      cnt_compute_busy <= cnt_compute_busy + 64'(cp_state == ST_EXEC);
      cnt_store_busy <= cnt_store_busy + 64'(st_state == ST_EXEC);
      cnt_load_wait <= cnt_load_wait + 64'(ld_wait);
      cnt_compute_wait <= cnt_compute_wait + 64'(cp_wait);
      cnt_store_wait <= cnt_store_wait + 64'(st_wait);
      cnt_rd_beats <= cnt_rd_beats + 64'(m_resp_valid && m_resp_ready);
      cnt_wr_beats <= cnt_wr_beats + 64'(m_wr_valid && m_wr_ready);
    end
  end

  assign ld_head = ld_cmd[CW-1:128];
  assign cp_head = cp_cmd[CW-1:128];
  assign st_head = st_cmd[CW-1:128];
  assign ld_qcount = 8'(ld_cnt);
  assign cp_qcount = 8'(cp_cnt);
  assign st_qcount = 8'(st_cnt);
  assign {tok_l2c, tok_c2l, tok_c2s, tok_s2c} = {n_l2c, n_c2l, n_c2s, n_s2c};
endmodule
