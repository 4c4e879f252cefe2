// Store engine: STORE from the OUT buffer to DRAM (hw/ISA.md 2.2), with the token protocol
// of vta_engine_ctrl (pops c2s with pop_prev, pushes s2c with push_prev).
module vta_store
  import vta_pkg::*;
(
    input  logic                 clk,
    input  logic                 rst_n,
    input  logic                 cmd_valid,
    input  logic [127:0]         cmd_insn,
    output logic                 cmd_pop,
    input  logic                 c2s_avail,
    input  logic                 s2c_room,
    output logic                 c2s_pop,
    output logic                 s2c_push,
    output logic                 out_rd_en,
    output logic [ACC_AW-1:0]    out_rd_addr,
    input  logic [OUT_BYTES*8-1:0] out_rd_data,
    output logic                 wr_valid,
    input  logic                 wr_ready,
    output logic [31:0]          wr_addr,
    output logic [BUS_BITS-1:0]  wr_data,
    output logic [BUS_BYTES-1:0] wr_strb,
    output logic                 wr_last,
    input  logic                 wr_ack,
    output logic [1:0]           state,
    output logic                 token_wait
);
  logic start, done, busy, pop_next_unused, push_next_unused;

  vta_engine_ctrl u_ctrl (
      .clk, .rst_n, .cmd_valid, .deps(insn_deps(cmd_insn)),
      .prev_avail(c2s_avail), .next_avail(1'b0), .prev_room(s2c_room), .next_room(1'b0),
      .pop_prev(c2s_pop), .pop_next(pop_next_unused), .push_prev(s2c_push),
      .push_next(push_next_unused), .start, .exec_done(done), .cmd_pop, .state, .token_wait
  );

  vta_store_dma #(.ELEM_BYTES(OUT_BYTES), .AW(ACC_AW)) u_dma (
      .clk, .rst_n, .start, .cmd(decode_mem(cmd_insn)), .busy, .done,
      .rd_en(out_rd_en), .rd_addr(out_rd_addr), .rd_data(out_rd_data),
      .wr_valid, .wr_ready, .wr_addr, .wr_data, .wr_strb, .wr_last, .wr_ack
  );

  logic unused;
  assign unused = ^{busy, pop_next_unused, push_next_unused};
endmodule
