// The GEMM core: one micro-op step, BATCH x BLOCK_OUT dot products of length BLOCK_IN
// (hw/ISA.md 2.3): res[b][o] = wrap32(acc[b][o] + sum_k int8 inp[b][k] * int8 wgt[o][k]).
// Purely combinational; the compute engine registers around it.
module vta_gemm_core
  import vta_pkg::*;
(
    input  logic [ACC_BYTES*8-1:0] acc,
    input  logic [INP_BYTES*8-1:0] inp,
    input  logic [WGT_BYTES*8-1:0] wgt,
    output logic [ACC_BYTES*8-1:0] res
);
  for (genvar b = 0; b < BATCH; b++) begin : g_b
    for (genvar o = 0; o < BLOCK_OUT; o++) begin : g_o
      logic signed [31:0] sum;
      always_comb begin
        sum = $signed(acc[(b*BLOCK_OUT+o)*32+:32]);
        for (int k = 0; k < BLOCK_IN; k++) begin
          sum = sum + 32'($signed(inp[(b*BLOCK_IN+k)*8+:8]) * $signed(wgt[(o*BLOCK_IN+k)*8+:8]));
        end
      end
      assign res[(b*BLOCK_OUT+o)*32+:32] = sum;
    end
  end
endmodule
