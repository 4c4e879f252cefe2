// 2-D strided DMA from DRAM into an on-chip buffer with zero padding (hw/ISA.md 2.2, LOAD).
//
// Two halves run concurrently: the *issuer* sends one read burst (or several, at most MAX_BURST
// beats each) per block row as fast as the memory port accepts them, so DRAM latency is paid
// once per instruction, not once per row; the *writer* walks the H x W padded destination in
// order, writing one buffer row per cycle: zeros at pad positions, the next DRAM element at
// data positions. Elements of E >= BUS_BYTES bytes are assembled from E/BUS_BYTES beats;
// smaller elements (micro-ops) are picked lane by lane out of a beat, starting at the lane the
// row's DRAM address falls on. The writer consumes every beat it is sent, so a load never
// stalls the shared in-order response path for long, and the issuer keeps at most
// MAX_OUTSTANDING beats in flight, so fetch and the other engines' requests are not queued
// behind a whole tile's worth of this load's bursts.
module vta_load_dma
  import vta_pkg::*;
#(
    parameter int ELEM_BYTES = 16,
    parameter int AW = 11,
    parameter int MAX_BURST = 64,
    // beats requested but not yet received: enough to cover the bandwidth-delay product
    // (2 KiB on a 16-byte bus), small enough that the shared in-order DRAM queue never holds
    // more than ~MAX_OUTSTANDING beats ahead of another engine's request
    parameter int MAX_OUTSTANDING = 128,
    localparam int EB = ELEM_BYTES * 8
) (
    input  logic                clk,
    input  logic                rst_n,
    input  logic                start,
    input  mem_insn_t           cmd,
    output logic                busy,
    output logic                done,
    // DRAM read client
    output logic                req_valid,
    input  logic                req_ready,
    output logic [31:0]         req_addr,
    output logic [LEN_BITS-1:0] req_len,
    input  logic                resp_valid,
    input  logic [BUS_BITS-1:0] resp_data,
    output logic                resp_ready,
    // buffer write port (whole rows)
    output logic                wr_en,
    output logic [AW-1:0]       wr_addr,
    output logic [EB-1:0]       wr_data
);
  localparam bit WIDE = ELEM_BYTES >= BUS_BYTES;
  localparam int CH = WIDE ? ELEM_BYTES / BUS_BYTES : 1;  // beats per element
  localparam int L = WIDE ? 1 : BUS_BYTES / ELEM_BYTES;  // elements per beat
  localparam int LGL = (L > 1) ? $clog2(L) : 1;
  localparam int CHW = (CH > 1) ? $clog2(CH) : 1;

  // ---------------------------------------------------------------- issuer
  logic        iss_active;
  logic [15:0] iss_rows_left;
  logic [31:0] iss_row_addr;  // element address of the row being issued
  logic [31:0] iss_beats;  // beats of the current row not yet requested
  logic [47:0] iss_byte;  // byte address of the next burst

  function automatic logic [31:0] row_beats(input logic [31:0] ea, input logic [15:0] xs);
    if (WIDE) return 32'(xs) * CH;
    else return 32'(((ea + 32'(xs) - 1) >> LGL) - (ea >> LGL) + 1);
  endfunction
  function automatic logic [47:0] row_byte(input logic [31:0] ea);
    if (WIDE) return 48'(ea) * ELEM_BYTES;
    else return 48'(ea >> LGL) * BUS_BYTES;
  endfunction

  wire [31:0] burst = (iss_beats > MAX_BURST) ? MAX_BURST : iss_beats;
  logic [31:0] outstanding;
  assign req_valid = iss_active && outstanding + burst <= MAX_OUTSTANDING;
  assign req_addr = iss_byte[31:0];
  assign req_len = LEN_BITS'(burst);
  wire [31:0] next_row_addr = iss_row_addr + 32'(cmd_q.x_stride);

  // ---------------------------------------------------------------- writer
  mem_insn_t   cmd_q;
  logic        w_active;
  logic [31:0] w_left;  // destination rows still to write
  logic [31:0] w_y, w_x, w_width;
  logic [31:0] w_row_addr;  // DRAM element address of the current data row
  logic [AW-1:0] w_ptr;
  logic [LGL-1:0] lane;
  logic [CHW-1:0] chunk;
  logic [EB-1:0] asm_q;

  wire in_y = (w_y >= 32'(cmd_q.y_pad_top)) && (w_y < 32'(cmd_q.y_pad_top) + 32'(cmd_q.y_size));
  wire in_x = (w_x >= 32'(cmd_q.x_pad_left)) &&
              (w_x < 32'(cmd_q.x_pad_left) + 32'(cmd_q.x_size));
  wire is_data = w_active && in_y && in_x;
  wire row_last_elem = (w_x == 32'(cmd_q.x_pad_left) + 32'(cmd_q.x_size) - 1);
  wire elem_done = is_data && resp_valid && (WIDE ? (32'(chunk) == CH - 1) : 1'b1);
  wire advance = w_active && (!is_data || elem_done);

  assign resp_ready = is_data && (WIDE ? 1'b1 : (32'(lane) == L - 1 || row_last_elem));
  assign wr_en = advance;
  assign wr_addr = w_ptr;
  if (WIDE) begin : g_wide
    always_comb begin
      wr_data = asm_q;
      wr_data[EB-1-:BUS_BITS] = resp_data;
      if (!is_data) wr_data = '0;
    end
    always_ff @(posedge clk) begin
      if (is_data && resp_valid && !elem_done) asm_q[32'(chunk)*BUS_BITS+:BUS_BITS] <= resp_data;
    end
  end else begin : g_narrow
    assign wr_data = is_data ? resp_data[32'(lane)*EB+:EB] : '0;
    assign asm_q = '0;
  end

  assign busy = iss_active || w_active;

  wire [31:0] h = 32'(cmd.y_pad_top) + 32'(cmd.y_size) + 32'(cmd.y_pad_bottom);
  wire [31:0] wd = 32'(cmd.x_pad_left) + 32'(cmd.x_size) + 32'(cmd.x_pad_right);

  always_ff @(posedge clk) begin
    if (!rst_n) begin
      iss_active <= 1'b0;
      outstanding <= '0;
      w_active <= 1'b0;
      done <= 1'b0;
      chunk <= '0;
      lane <= '0;
    end else begin
      done <= 1'b0;
      outstanding <= outstanding + (req_valid && req_ready ? burst : 32'd0) -
                     32'(resp_valid && resp_ready);
      if (start) begin
        cmd_q <= cmd;
        iss_active <= cmd.y_size != 0 && cmd.x_size != 0;
        iss_rows_left <= cmd.y_size;
        iss_row_addr <= cmd.dram_base;
        iss_beats <= row_beats(cmd.dram_base, cmd.x_size);
        iss_byte <= row_byte(cmd.dram_base);
        w_active <= h * wd != 0;
        done <= h * wd == 0;
        w_left <= h * wd;
        w_y <= '0;
        w_x <= '0;
        w_width <= wd;
        w_row_addr <= cmd.dram_base;
        w_ptr <= AW'(cmd.sram_base);
        lane <= LGL'(cmd.dram_base);
        chunk <= '0;
      end else begin
        // issuer
        if (req_valid && req_ready) begin
          if (iss_beats == burst) begin
            iss_rows_left <= iss_rows_left - 1'b1;
            iss_active <= iss_rows_left != 16'd1;
            iss_row_addr <= next_row_addr;
            iss_beats <= row_beats(next_row_addr, cmd_q.x_size);
            iss_byte <= row_byte(next_row_addr);
          end else begin
            iss_beats <= iss_beats - burst;
            iss_byte <= iss_byte + 48'(burst) * BUS_BYTES;
          end
        end
        // writer
        if (is_data && resp_valid && WIDE && !elem_done) chunk <= chunk + 1'b1;
        if (advance) begin
          chunk <= '0;
          w_ptr <= w_ptr + 1'b1;
          w_left <= w_left - 1;
          if (w_left == 1) begin
            w_active <= 1'b0;
            done <= 1'b1;
          end
          if (w_x == w_width - 1) begin
            w_x <= '0;
            w_y <= w_y + 1;
          end else begin
            w_x <= w_x + 1;
          end
          if (is_data) begin
            if (row_last_elem) begin
              w_row_addr <= w_row_addr + 32'(cmd_q.x_stride);
              lane <= LGL'(w_row_addr + 32'(cmd_q.x_stride));
            end else begin
              lane <= lane + 1'b1;
            end
          end
        end
      end
    end
  end

  logic unused;
  assign unused = ^{cmd_q, asm_q};
endmodule
