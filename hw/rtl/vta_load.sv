// Load engine: LOAD INP and LOAD WGT (hw/ISA.md 2.2) into the input and weight buffers,
// with the token protocol of vta_engine_ctrl (pops c2l with pop_next, pushes l2c with
// push_next).
module vta_load
  import vta_pkg::*;
(
    input  logic                clk,
    input  logic                rst_n,
    input  logic                cmd_valid,
    input  logic [127:0]        cmd_insn,
    output logic                cmd_pop,
    input  logic                c2l_avail,
    input  logic                l2c_room,
    output logic                c2l_pop,
    output logic                l2c_push,
    output logic                req_valid,
    input  logic                req_ready,
    output logic [31:0]         req_addr,
    output logic [LEN_BITS-1:0] req_len,
    input  logic                resp_valid,
    input  logic [BUS_BITS-1:0] resp_data,
    output logic                resp_ready,
    output logic                inp_wr_en,
    output logic [INP_AW-1:0]   inp_wr_addr,
    output logic [INP_BYTES*8-1:0] inp_wr_data,
    output logic                wgt_wr_en,
    output logic [WGT_AW-1:0]   wgt_wr_addr,
    output logic [WGT_BYTES*8-1:0] wgt_wr_data,
    output logic [1:0]          state,
    output logic                token_wait
);
  wire mem_insn_t mi = decode_mem(cmd_insn);
  logic start, inp_done, wgt_done, inp_busy, wgt_busy, pop_prev_unused, push_prev_unused;
  logic i_req_valid, w_req_valid, i_resp_ready, w_resp_ready;
  logic [31:0] i_req_addr, w_req_addr;
  logic [LEN_BITS-1:0] i_req_len, w_req_len;
  wire is_wgt = mi.mem_type == MEM_WGT;

  vta_engine_ctrl u_ctrl (
      .clk, .rst_n, .cmd_valid, .deps(insn_deps(cmd_insn)),
      .prev_avail(1'b0), .next_avail(c2l_avail), .prev_room(1'b0), .next_room(l2c_room),
      .pop_prev(pop_prev_unused), .pop_next(c2l_pop), .push_prev(push_prev_unused),
      .push_next(l2c_push), .start, .exec_done(inp_done || wgt_done), .cmd_pop, .state,
      .token_wait
  );

  vta_load_dma #(.ELEM_BYTES(INP_BYTES), .AW(INP_AW)) u_inp (
      .clk, .rst_n, .start(start && !is_wgt), .cmd(mi), .busy(inp_busy), .done(inp_done),
      .req_valid(i_req_valid), .req_ready(req_ready && i_req_valid), .req_addr(i_req_addr),
      .req_len(i_req_len), .resp_valid, .resp_data, .resp_ready(i_resp_ready),
      .wr_en(inp_wr_en), .wr_addr(inp_wr_addr), .wr_data(inp_wr_data)
  );
  vta_load_dma #(.ELEM_BYTES(WGT_BYTES), .AW(WGT_AW)) u_wgt (
      .clk, .rst_n, .start(start && is_wgt), .cmd(mi), .busy(wgt_busy), .done(wgt_done),
      .req_valid(w_req_valid), .req_ready(req_ready && !i_req_valid), .req_addr(w_req_addr),
      .req_len(w_req_len), .resp_valid, .resp_data, .resp_ready(w_resp_ready),
      .wr_en(wgt_wr_en), .wr_addr(wgt_wr_addr), .wr_data(wgt_wr_data)
  );
  assign req_valid = i_req_valid || w_req_valid;
  assign req_addr = i_req_valid ? i_req_addr : w_req_addr;
  assign req_len = i_req_valid ? i_req_len : w_req_len;
  assign resp_ready = inp_busy ? i_resp_ready : w_resp_ready;

  logic unused;
  assign unused = ^{wgt_busy, pop_prev_unused, push_prev_unused};
endmodule
