// Fetch: reads `insn_count` 16-byte instructions from DRAM at `insn_addr` and dispatches each,
// in program order, to the command queue of its engine (hw/ISA.md section 1):
// LOAD INP/WGT -> load; STORE -> store; LOAD UOP/ACC, GEMM, ALU, FINISH -> compute.
// Reads are issued only for instructions the fetch buffer has room for, so a full command
// queue never stalls the shared DRAM response path (which would block other engines' loads).
module vta_fetch
  import vta_pkg::*;
#(
    parameter int BUF = 16,  // fetch buffer, instructions
    parameter int CHUNK = 8  // instructions per read burst
) (
    input  logic                clk,
    input  logic                rst_n,
    input  logic                start,
    input  logic [31:0]         insn_addr,
    input  logic [31:0]         insn_count,
    // DRAM read client
    output logic                req_valid,
    input  logic                req_ready,
    output logic [31:0]         req_addr,
    output logic [LEN_BITS-1:0] req_len,
    input  logic                resp_valid,
    input  logic [BUS_BITS-1:0] resp_data,
    output logic                resp_ready,
    // dispatch: {instruction index, instruction}
    output logic                ld_valid,
    output logic                cp_valid,
    output logic                st_valid,
    output logic [IDX_BITS+127:0] cmd,
    input  logic                ld_room,
    input  logic                cp_room,
    input  logic                st_room,
    output logic                busy,
    output logic                active,  // requesting, receiving or dispatching
    output logic [31:0]         dispatched
);
  localparam int BPI = INSN_BYTES / BUS_BYTES;  // beats per instruction (bus <= 128 bits)
  localparam int BW = (BPI > 1) ? $clog2(BPI) : 1;

  logic [31:0] addr, to_request, inflight;
  logic [BW-1:0] beat;
  logic [127:0] asm_q, insn;
  logic [$clog2(BUF):0] count;
  logic buf_valid, buf_ready;

  wire [31:0] space = BUF - 32'(count) - inflight;
  wire [31:0] want = (to_request > CHUNK) ? CHUNK : to_request;
  assign req_valid = to_request != 0 && space >= want;
  assign req_addr = addr;
  assign req_len = LEN_BITS'(want * BPI);
  assign resp_ready = 1'b1;

  wire insn_done = resp_valid && 32'(beat) == BPI - 1;
  logic [127:0] full;
  logic dispatch;
  if (BPI == 1) begin : g_one
    assign full = resp_data;
    always_ff @(posedge clk) asm_q <= '0;
  end else begin : g_multi
    assign full = {resp_data, asm_q[127-:128-BUS_BITS]};
    always_ff @(posedge clk) if (resp_valid) asm_q <= {resp_data, asm_q[127:BUS_BITS]};
  end

  vta_fifo #(.WIDTH(128), .DEPTH(BUF)) u_buf (
      .clk, .rst_n, .wr_en(insn_done), .wr_data(full), .wr_ready(buf_ready),
      .rd_en(dispatch), .rd_data(insn), .rd_valid(buf_valid), .count
  );

  // routing
  wire [2:0] opc = insn_opcode(insn);
  wire [2:0] mt = insn[9:7];
  wire to_load = opc == OP_LOAD && (mt == MEM_INP || mt == MEM_WGT);
  wire to_store = opc == OP_STORE;
  wire to_compute = !to_load && !to_store;
  wire room = to_load ? ld_room : (to_store ? st_room : cp_room);
  assign dispatch = buf_valid && room;
  assign ld_valid = dispatch && to_load;
  assign st_valid = dispatch && to_store;
  assign cp_valid = dispatch && to_compute;
  assign cmd = {dispatched, insn};
  assign busy = to_request != 0 || inflight != 0 || buf_valid;
  assign active = req_valid || inflight != 0 || dispatch;

  always_ff @(posedge clk) begin
    if (!rst_n) begin
      to_request <= '0;
      inflight <= '0;
      beat <= '0;
      dispatched <= '0;
    end else if (start) begin
      addr <= insn_addr;
      to_request <= insn_count;
      dispatched <= '0;
    end else begin
      inflight <= inflight + (req_valid && req_ready ? want : 32'd0) - 32'(insn_done);
      if (req_valid && req_ready) begin
        to_request <= to_request - want;
        addr <= addr + want * INSN_BYTES;
      end
      if (resp_valid) begin
        beat <= insn_done ? '0 : beat + 1'b1;
      end
      if (dispatch) dispatched <= dispatched + 1;
    end
  end

  logic unused;
  assign unused = ^{buf_ready, asm_q};
endmodule
