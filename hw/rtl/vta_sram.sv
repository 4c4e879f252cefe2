// On-chip buffer: NWRITE synchronous write ports and NREAD synchronous read ports (data valid
// one cycle after the address; a read of the row being written returns the old contents).
// With two write ports the users only ever write an even and an odd row together, so the
// buffer maps onto two single-write-port banks (even / odd rows).
// `clear` zeroes the whole buffer in one cycle; only the simulation harness drives it (the
// ISA starts every program with zeroed buffers), a chip would tie it low.
module vta_sram #(
    parameter int WIDTH = 128,
    parameter int DEPTH = 256,
    parameter int NREAD = 1,
    parameter int NWRITE = 1,
    localparam int AW = (DEPTH > 1) ? $clog2(DEPTH) : 1
) (
    input  logic                        clk,
    input  logic                        clear,
    input  logic [NWRITE-1:0]             wr_en,
    input  logic [NWRITE-1:0][AW-1:0]     wr_addr,
    input  logic [NWRITE-1:0][WIDTH-1:0]  wr_data,
    input  logic [NREAD-1:0]            rd_en,
    input  logic [NREAD-1:0][AW-1:0]    rd_addr,
    output logic [NREAD-1:0][WIDTH-1:0] rd_data
);
  logic [WIDTH-1:0] mem[DEPTH];

  always_ff @(posedge clk) begin
    if (clear) begin
      for (int r = 0; r < DEPTH; r++) mem[r] <= '0;
    end else begin
      for (int w = 0; w < NWRITE; w++) begin
        if (wr_en[w]) mem[wr_addr[w]] <= wr_data[w];
      end
    end
  end

  for (genvar p = 0; p < NREAD; p++) begin : g_rd
    always_ff @(posedge clk) begin
      if (rd_en[p]) rd_data[p] <= mem[rd_addr[p]];
    end
  end
endmodule
