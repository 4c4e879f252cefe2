// Simulation harness: the accelerator (vta_core) on the DRAM timing model.
// Everything a test bench or `toolchain.vta.rtl.run_rtl` drives or reads is a port here.
module vta_sim_top
  import vta_pkg::*;
(
    input  logic        clk,
    input  logic        rst_n,
    input  logic        sram_clear,
    input  logic        backdoor_load,
    input  logic        backdoor_dump,
    input  logic [31:0] dram_latency,
    input  logic [31:0] dram_bw16,
    input  logic        start,
    input  logic [31:0] insn_addr,
    input  logic [31:0] insn_count,
    output logic        done,
    output logic        deadlock,
    output logic [63:0] cnt_cycles,
    output logic [63:0] cnt_gemm,
    output logic [63:0] cnt_alu,
    output logic [63:0] cnt_load_busy,
    output logic [63:0] cnt_compute_busy,
    output logic [63:0] cnt_store_busy,
    output logic [63:0] cnt_load_wait,
    output logic [63:0] cnt_compute_wait,
    output logic [63:0] cnt_store_wait,
    output logic [63:0] cnt_rd_beats,
    output logic [63:0] cnt_wr_beats,
    output logic [1:0]  ld_state,
    output logic [1:0]  cp_state,
    output logic [1:0]  st_state,
    output logic [31:0] ld_head,
    output logic [31:0] cp_head,
    output logic [31:0] st_head,
    output logic [7:0]  ld_qcount,
    output logic [7:0]  cp_qcount,
    output logic [7:0]  st_qcount,
    output logic [7:0]  tok_l2c,
    output logic [7:0]  tok_c2l,
    output logic [7:0]  tok_c2s,
    output logic [7:0]  tok_s2c,
    output logic [31:0] fetched,
    output logic        dram_idle
);
  logic m_req_valid, m_req_ready, m_resp_valid, m_resp_last, m_resp_ready;
  logic m_wr_valid, m_wr_ready, m_wr_last, m_wr_ack;
  logic [31:0] m_req_addr, m_wr_addr;
  logic [LEN_BITS-1:0] m_req_len;
  logic [BUS_BITS-1:0] m_resp_data, m_wr_data;
  logic [BUS_BYTES-1:0] m_wr_strb;

  vta_core u_core (.*);

  kiln_dram_model #(.BUS_BYTES(BUS_BYTES), .LEN_BITS(LEN_BITS)) u_dram (
      .clk, .rst_n, .latency(dram_latency), .bw16(dram_bw16), .backdoor_load, .backdoor_dump,
      .rd_req_valid(m_req_valid), .rd_req_ready(m_req_ready), .rd_req_addr(m_req_addr),
      .rd_req_len(m_req_len), .rd_resp_valid(m_resp_valid), .rd_resp_data(m_resp_data),
      .rd_resp_last(m_resp_last), .rd_resp_ready(m_resp_ready), .wr_valid(m_wr_valid),
      .wr_ready(m_wr_ready), .wr_addr(m_wr_addr), .wr_data(m_wr_data), .wr_strb(m_wr_strb),
      .wr_last(m_wr_last), .wr_ack(m_wr_ack), .idle(dram_idle)
  );
endmodule
