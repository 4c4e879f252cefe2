// The tensor ALU: one micro-op step over BATCH x BLOCK_OUT int32 lanes (hw/ISA.md 2.3).
// MIN/MAX signed; ADD/MUL wrap to 32 bits; SHR takes the low 6 bits of B as a signed shift:
// >= 0 shifts right arithmetically, < 0 shifts left (by 32 gives 0). Combinational.
module vta_alu_core
  import vta_pkg::*;
(
    input  logic [2:0]             op,
    input  logic                   use_imm,
    input  logic [15:0]            imm,
    input  logic [ACC_BYTES*8-1:0] a,
    input  logic [ACC_BYTES*8-1:0] b,
    output logic [ACC_BYTES*8-1:0] res
);
  for (genvar e = 0; e < BATCH * BLOCK_OUT; e++) begin : g_e
    wire signed [31:0] x = $signed(a[e*32+:32]);
    wire signed [31:0] y = use_imm ? 32'($signed(imm)) : $signed(b[e*32+:32]);
    wire [5:0] sh = y[5:0];
    wire [5:0] lsh = 6'd0 - sh;  // 1..32 when sh is negative
    logic signed [31:0] r;
    always_comb begin
      unique case (op)
        ALU_MIN: r = (x < y) ? x : y;
        ALU_MAX: r = (x > y) ? x : y;
        ALU_ADD: r = x + y;
        ALU_SHR: r = sh[5] ? (lsh == 6'd32 ? 32'sd0 : x <<< lsh[4:0]) : x >>> sh[4:0];
        ALU_MUL: r = x * y;
        default: r = x;
      endcase
    end
    assign res[e*32+:32] = r;
  end
endmodule
