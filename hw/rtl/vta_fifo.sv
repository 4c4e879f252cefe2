// Synchronous first-word-fall-through FIFO.
//
// `rd_data` shows the oldest entry whenever `rd_valid` is high; `rd_en` pops it.
// A push and a pop may happen in the same cycle, also when the FIFO is full.
// Any DEPTH >= 1 works; `count` is the number of stored entries.
module vta_fifo #(
    parameter int WIDTH = 8,
    parameter int DEPTH = 4,
    localparam int AW = (DEPTH > 1) ? $clog2(DEPTH) : 1
) (
    input  logic             clk,
    input  logic             rst_n,
    input  logic             wr_en,
    input  logic [WIDTH-1:0] wr_data,
    output logic             wr_ready,
    input  logic             rd_en,
    output logic [WIDTH-1:0] rd_data,
    output logic             rd_valid,
    output logic [AW:0]      count
);
  logic [WIDTH-1:0] mem[DEPTH];
  logic [AW-1:0] wr_ptr, rd_ptr;

  wire do_rd = rd_en && rd_valid;
  wire do_wr = wr_en && (wr_ready || do_rd);

  assign rd_valid = count != 0;
  assign wr_ready = count != (AW + 1)'(DEPTH);
  assign rd_data = mem[rd_ptr];

  always_ff @(posedge clk) begin
    if (!rst_n) begin
      wr_ptr <= '0;
      rd_ptr <= '0;
      count  <= '0;
    end else begin
      if (do_wr) begin
        mem[wr_ptr] <= wr_data;
        wr_ptr <= (wr_ptr == AW'(DEPTH - 1)) ? '0 : wr_ptr + 1'b1;
      end
      if (do_rd) rd_ptr <= (rd_ptr == AW'(DEPTH - 1)) ? '0 : rd_ptr + 1'b1;
      count <= count + (AW + 1)'(do_wr) - (AW + 1)'(do_rd);
    end
  end
endmodule
