// Shares the one DRAM read port among N clients (round robin on requests). The DRAM answers
// in order, so a FIFO of granted client ids routes each response burst back to its client.
module vta_mem_arb
  import vta_pkg::*;
#(
    parameter int N = 3,
    parameter int OUTSTANDING = 64,
    localparam int IW = (N > 1) ? $clog2(N) : 1
) (
    input  logic                        clk,
    input  logic                        rst_n,
    input  logic [N-1:0]                req_valid,
    output logic [N-1:0]                req_ready,
    input  logic [N-1:0][31:0]          req_addr,
    input  logic [N-1:0][LEN_BITS-1:0]  req_len,
    output logic [N-1:0]                resp_valid,
    output logic [BUS_BITS-1:0]         resp_data,
    input  logic [N-1:0]                resp_ready,
    // to the DRAM
    output logic                        m_req_valid,
    input  logic                        m_req_ready,
    output logic [31:0]                 m_req_addr,
    output logic [LEN_BITS-1:0]         m_req_len,
    input  logic                        m_resp_valid,
    input  logic [BUS_BITS-1:0]         m_resp_data,
    input  logic                        m_resp_last,
    output logic                        m_resp_ready
);
  logic [IW-1:0] last_grant, grant;
  logic          found;
  logic          ord_ready, ord_valid;
  logic [IW-1:0] ord_head;
  logic [$clog2(OUTSTANDING):0] ord_count;

  always_comb begin
    grant = last_grant;
    found = 1'b0;
    for (int k = 1; k <= N; k++) begin
      automatic logic [IW-1:0] c = IW'((32'(last_grant) + k) % N);
      if (!found && req_valid[c]) begin
        grant = c;
        found = 1'b1;
      end
    end
  end

  assign m_req_valid = found && ord_ready;
  assign m_req_addr = req_addr[grant];
  assign m_req_len = req_len[grant];
  wire granted = m_req_valid && m_req_ready;
  always_comb begin
    req_ready = '0;
    req_ready[grant] = granted;
  end

  vta_fifo #(.WIDTH(IW), .DEPTH(OUTSTANDING)) u_order (
      .clk, .rst_n, .wr_en(granted), .wr_data(grant), .wr_ready(ord_ready),
      .rd_en(m_resp_valid && m_resp_ready && m_resp_last), .rd_data(ord_head),
      .rd_valid(ord_valid), .count(ord_count)
  );

  assign resp_data = m_resp_data;
  always_comb begin
    resp_valid = '0;
    resp_valid[ord_head] = m_resp_valid && ord_valid;
  end
  assign m_resp_ready = ord_valid && resp_ready[ord_head];

  always_ff @(posedge clk) begin
    if (!rst_n) last_grant <= IW'(N - 1);
    else if (granted) last_grant <= grant;
  end

  logic unused;
  assign unused = ^ord_count;
endmodule
