// 2-D strided DMA from the OUT buffer to DRAM (hw/ISA.md 2.2, STORE).
//
// OUT rows are read in order (one per cycle, a few in flight into a small FIFO) and written
// as BUS_BYTES beats. Elements wider than the bus take several beats; narrower ones take one
// beat with a byte strobe. Each block row is one write burst; the store is done when every
// burst has been acknowledged, so a token pushed after it orders the data before later reads.
module vta_store_dma
  import vta_pkg::*;
#(
    parameter int ELEM_BYTES = 16,
    parameter int AW = 11,
    localparam int EB = ELEM_BYTES * 8
) (
    input  logic                 clk,
    input  logic                 rst_n,
    input  logic                 start,
    input  mem_insn_t            cmd,
    output logic                 busy,
    output logic                 done,
    // buffer read port (data one cycle after the address)
    output logic                 rd_en,
    output logic [AW-1:0]        rd_addr,
    input  logic [EB-1:0]        rd_data,
    // DRAM write client
    output logic                 wr_valid,
    input  logic                 wr_ready,
    output logic [31:0]          wr_addr,
    output logic [BUS_BITS-1:0]  wr_data,
    output logic [BUS_BYTES-1:0] wr_strb,
    output logic                 wr_last,
    input  logic                 wr_ack
);
  localparam bit WIDE = ELEM_BYTES >= BUS_BYTES;
  localparam int CH = WIDE ? ELEM_BYTES / BUS_BYTES : 1;
  localparam int L = WIDE ? 1 : BUS_BYTES / ELEM_BYTES;
  localparam int LGL = (L > 1) ? $clog2(L) : 1;
  localparam int CHW = (CH > 1) ? $clog2(CH) : 1;
  localparam int FD = 4;

  mem_insn_t   cmd_q;
  logic        r_active;
  logic [31:0] r_left, r_x;
  logic [31:0] r_row_addr;
  logic [AW-1:0] r_ptr;
  logic        inflight;  // a read issued last cycle, its data arrives now
  logic [32:0] inflight_tag;  // {row end, element address}
  logic [31:0] acks_due;
  logic        running;  // from start until done

  logic              f_valid;
  logic [EB+32:0]    f_head;
  logic [$clog2(FD):0] f_count;
  logic [CHW-1:0]    chunk;
  logic              f_wr_ready;

  wire f_room = 32'(f_count) + 32'(inflight) < FD;
  assign rd_en = r_active && f_room;
  assign rd_addr = r_ptr;

  wire [31:0]   h_ea = f_head[31:0];
  wire          h_row_end = f_head[32];
  wire [EB-1:0] h_data = f_head[EB+32:33];
  wire          beat_last = WIDE ? (32'(chunk) == CH - 1) : 1'b1;
  wire          f_pop = wr_valid && wr_ready && beat_last;

  vta_fifo #(.WIDTH(EB + 33), .DEPTH(FD)) u_buf (
      .clk, .rst_n, .wr_en(inflight), .wr_data({rd_data, inflight_tag}), .wr_ready(f_wr_ready),
      .rd_en(f_pop), .rd_data(f_head), .rd_valid(f_valid), .count(f_count)
  );

  assign wr_valid = f_valid;
  assign wr_last = beat_last && h_row_end;
  if (WIDE) begin : g_wide
    assign wr_addr = 32'(h_ea * ELEM_BYTES + 32'(chunk) * BUS_BYTES);
    assign wr_data = h_data[32'(chunk)*BUS_BITS+:BUS_BITS];
    assign wr_strb = '1;
  end else begin : g_narrow
    assign wr_addr = 32'((h_ea >> LGL) * BUS_BYTES);
    assign wr_data = {L{h_data}};
    assign wr_strb = BUS_BYTES'({ELEM_BYTES{1'b1}}) << (32'(h_ea[LGL-1:0]) * ELEM_BYTES);
  end

  wire ack_sent = wr_valid && wr_ready && wr_last;
  assign busy = running;

  always_ff @(posedge clk) begin
    if (!rst_n) begin
      r_active <= 1'b0;
      inflight <= 1'b0;
      acks_due <= '0;
      chunk <= '0;
      done <= 1'b0;
    end else begin
      inflight <= rd_en;
      acks_due <= acks_due + 32'(ack_sent) - 32'(wr_ack);
      done <= 1'b0;
      if (wr_valid && wr_ready) chunk <= beat_last ? '0 : chunk + 1'b1;
      if (start) begin
        cmd_q <= cmd;
        r_active <= cmd.y_size != 0 && cmd.x_size != 0;
        r_left <= 32'(cmd.y_size) * 32'(cmd.x_size);
        r_x <= '0;
        r_row_addr <= cmd.dram_base;
        r_ptr <= AW'(cmd.sram_base);
      end else if (rd_en) begin
        inflight_tag <= {r_x == 32'(cmd_q.x_size) - 1, r_row_addr + r_x};
        r_ptr <= r_ptr + 1'b1;
        r_left <= r_left - 1;
        r_active <= r_left != 1;
        if (r_x == 32'(cmd_q.x_size) - 1) begin
          r_x <= '0;
          r_row_addr <= r_row_addr + 32'(cmd_q.x_stride);
        end else begin
          r_x <= r_x + 1;
        end
      end
      if (running && !done && !r_active && !inflight && !f_valid && acks_due == 32'(wr_ack))
        done <= 1'b1;
    end
  end

  always_ff @(posedge clk) begin
    if (!rst_n) running <= 1'b0;
    else if (start) running <= 1'b1;
    else if (done) running <= 1'b0;
  end

  logic unused;
  assign unused = ^{cmd_q, f_wr_ready};
endmodule
