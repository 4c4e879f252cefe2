// Unit-test harness for the generic blocks: a FIFO of non-power-of-two depth and the DRAM
// timing model with its ports exposed (tests/hw/cocotb_units.py drives them).
module tb_units (
    input  logic         clk,
    input  logic         rst_n,
    // FIFO, 8 bits x 5
    input  logic         f_wr_en,
    input  logic [7:0]   f_wr_data,
    output logic         f_wr_ready,
    input  logic         f_rd_en,
    output logic [7:0]   f_rd_data,
    output logic         f_rd_valid,
    output logic [3:0]   f_count,
    // DRAM model, 16-byte bus
    input  logic [31:0]  latency,
    input  logic [31:0]  bw16,
    input  logic         backdoor_load,
    input  logic         backdoor_dump,
    input  logic         rd_req_valid,
    output logic         rd_req_ready,
    input  logic [31:0]  rd_req_addr,
    input  logic [15:0]  rd_req_len,
    output logic         rd_resp_valid,
    output logic [127:0] rd_resp_data,
    output logic         rd_resp_last,
    input  logic         rd_resp_ready,
    input  logic         wr_valid,
    output logic         wr_ready,
    input  logic [31:0]  wr_addr,
    input  logic [127:0] wr_data,
    input  logic [15:0]  wr_strb,
    input  logic         wr_last,
    output logic         wr_ack,
    output logic         dram_idle
);
  vta_fifo #(.WIDTH(8), .DEPTH(5)) u_fifo (
      .clk, .rst_n, .wr_en(f_wr_en), .wr_data(f_wr_data), .wr_ready(f_wr_ready),
      .rd_en(f_rd_en), .rd_data(f_rd_data), .rd_valid(f_rd_valid), .count(f_count)
  );
  kiln_dram_model #(.BUS_BYTES(16), .LEN_BITS(16)) u_dram (
      .clk, .rst_n, .latency, .bw16, .backdoor_load, .backdoor_dump, .rd_req_valid,
      .rd_req_ready, .rd_req_addr, .rd_req_len, .rd_resp_valid, .rd_resp_data, .rd_resp_last,
      .rd_resp_ready, .wr_valid, .wr_ready, .wr_addr, .wr_data, .wr_strb, .wr_last, .wr_ack,
      .idle(dram_idle)
  );
endmodule
