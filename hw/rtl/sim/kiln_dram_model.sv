// Simulation-only DRAM timing model behind the accelerator's memory port.
//
// Timing, both run-time inputs so one Verilator build serves every setting:
//   latency : a read request accepted in cycle t returns its first beat in cycle t + latency;
//             a write burst is acknowledged `latency` cycles after its last beat is accepted.
//   bw16    : sustained bandwidth in 1/16 bytes per cycle, shared by reads and writes. Each beat
//             (BUS_BYTES bytes) spends BUS_BYTES*16 credits; credits grow by bw16 a cycle and
//             saturate at two beats, so an idle port cannot save up for a long burst.
// Requests are pipelined (up to QDEPTH outstanding) and answered in order. Contents live in
// C++ (kiln_dram.cpp); `backdoor_load` / `backdoor_dump` copy them from / to files.
module kiln_dram_model #(
    parameter int BUS_BYTES = 8,
    parameter int LEN_BITS  = 16,
    parameter int QDEPTH    = 64,
    localparam int BUS_BITS = BUS_BYTES * 8
) (
    input  logic                clk,
    input  logic                rst_n,
    input  logic [31:0]         latency,
    input  logic [31:0]         bw16,
    input  logic                backdoor_load,
    input  logic                backdoor_dump,
    // read requests (byte address aligned to BUS_BYTES, length in beats, >= 1)
    input  logic                rd_req_valid,
    output logic                rd_req_ready,
    input  logic [31:0]         rd_req_addr,
    input  logic [LEN_BITS-1:0] rd_req_len,
    output logic                rd_resp_valid,
    output logic [BUS_BITS-1:0] rd_resp_data,
    output logic                rd_resp_last,
    input  logic                rd_resp_ready,
    // writes, one beat per handshake, a burst ends with wr_last
    input  logic                wr_valid,
    output logic                wr_ready,
    input  logic [31:0]         wr_addr,
    input  logic [BUS_BITS-1:0] wr_data,
    input  logic [BUS_BYTES-1:0] wr_strb,
    input  logic                wr_last,
    output logic                wr_ack,
    output logic                idle
);
  import "DPI-C" function void kiln_dram_load();
  import "DPI-C" function void kiln_dram_dump();
  import "DPI-C" function void kiln_dram_read(input longint addr, input int nbytes,
                                              output bit [BUS_BITS-1:0] data);
  import "DPI-C" function void kiln_dram_write(input longint addr, input int nbytes,
                                               input bit [BUS_BITS-1:0] data,
                                               input bit [BUS_BYTES-1:0] strb);

  localparam int QW = 32 + LEN_BITS + 64;
  localparam logic [31:0] COST = 32'(BUS_BYTES * 16);

  logic [63:0] now;
  logic [31:0] credit;
  logic        prio_write;

  // ---- read request queue: {addr, len, ready_time}
  logic          rq_valid, rq_ready, rd_go, rd_pop;
  logic [QW-1:0] rq_head;
  logic [$clog2(QDEPTH):0] rq_count;
  wire  [63:0]   ready_time = now + 64'(latency) - 64'd1;
  vta_fifo #(.WIDTH(QW), .DEPTH(QDEPTH)) u_rq (
      .clk, .rst_n,
      .wr_en(rd_req_valid && rd_req_ready), .wr_data({rd_req_addr, rd_req_len, ready_time}),
      .wr_ready(rq_ready), .rd_en(rd_pop), .rd_data(rq_head), .rd_valid(rq_valid),
      .count(rq_count)
  );
  assign rd_req_ready = rq_ready;

  wire [31:0]         h_addr = rq_head[QW-1-:32];
  wire [LEN_BITS-1:0] h_len  = rq_head[64+:LEN_BITS];
  wire [63:0]         h_time = rq_head[63:0];
  logic [LEN_BITS-1:0] beat;

  // ---- write acknowledgements: time at which each burst is acknowledged
  logic        aq_valid, aq_ready;
  logic [63:0] aq_head;
  logic [$clog2(QDEPTH):0] aq_count;
  wire  acc_wr = wr_valid && wr_ready;
  vta_fifo #(.WIDTH(64), .DEPTH(QDEPTH)) u_aq (
      .clk, .rst_n, .wr_en(acc_wr && wr_last), .wr_data(ready_time), .wr_ready(aq_ready),
      .rd_en(aq_valid && now >= aq_head), .rd_data(aq_head), .rd_valid(aq_valid),
      .count(aq_count)
  );

  wire out_free  = !rd_resp_valid || rd_resp_ready;
  wire has_cred  = credit >= COST;
  wire rd_want   = rq_valid && now >= h_time && out_free;
  assign rd_go   = rd_want && has_cred && !(prio_write && wr_valid && aq_ready);
  assign rd_pop  = rd_go && (beat == h_len - 1'b1);
  assign wr_ready = has_cred && aq_ready && !(rd_want && !prio_write);
  assign idle = !rq_valid && !aq_valid && !rd_resp_valid;

  wire [31:0] spent = (rd_go || acc_wr) ? COST : 32'd0;
  wire [31:0] grown = credit - spent + bw16;

  always_ff @(posedge clk) begin
    logic [BUS_BITS-1:0] rd_word;
    if (backdoor_load) kiln_dram_load();
    if (backdoor_dump) kiln_dram_dump();
    if (!rst_n) begin
      now <= '0;
      credit <= COST;
      beat <= '0;
      prio_write <= 1'b0;
      rd_resp_valid <= 1'b0;
      rd_resp_last <= 1'b0;
      wr_ack <= 1'b0;
    end else begin
      now <= now + 64'd1;
      credit <= (grown > 2 * COST) ? 2 * COST : grown;
      wr_ack <= aq_valid && now >= aq_head;
      if (rd_go || acc_wr) prio_write <= rd_go;
      if (out_free) rd_resp_valid <= 1'b0;
      if (rd_go) begin
        kiln_dram_read(64'(h_addr) + 64'(beat) * BUS_BYTES, BUS_BYTES, rd_word);
        rd_resp_data <= rd_word;
        rd_resp_valid <= 1'b1;
        rd_resp_last <= rd_pop;
        beat <= rd_pop ? '0 : beat + 1'b1;
      end
      if (acc_wr) kiln_dram_write(64'(wr_addr), BUS_BYTES, wr_data, wr_strb);
    end
  end

  logic unused;
  assign unused = ^{rq_count, aq_count};
endmodule
