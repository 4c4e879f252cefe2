// Compute engine: LOAD UOP / LOAD ACC, GEMM, ALU and FINISH (hw/ISA.md 2.2-2.4).
//
// GEMM and ALU run the micro-op loop nest as a three-stage pipeline that starts one step per
// cycle:  A) loop counters -> micro-op read,  B) micro-op -> ACC/INP/WGT row indices -> buffer
// reads,  C) BATCH x BLOCK_IN x BLOCK_OUT MACs (or the ALU op) -> ACC/OUT write. A step's
// ACC read is issued one cycle before the previous step's write lands, so stage C forwards
// the previous write when the rows match; that keeps the loop's sequential semantics.
//
// Paired mode: accumulator resets (GEMM reset) and ALU ops with an immediate read and write
// only their destination row. When such an instruction has one micro-op and an odd inner
// destination factor, two consecutive inner steps touch an even and an odd row, so the
// pipeline runs them together (two ACC/OUT write ports = an even and an odd bank): requant
// and reset loops take half the cycles, which matters because they run on the same engine
// as the GEMMs.
module vta_compute
  import vta_pkg::*;
(
    input  logic                clk,
    input  logic                rst_n,
    input  logic                sram_clear,
    // the command at the head of the compute queue (held until retired)
    input  logic                cmd_valid,
    input  logic [127:0]        cmd_insn,
    output logic                cmd_pop,
    // dependency tokens
    input  logic                l2c_avail,
    input  logic                s2c_avail,
    input  logic                c2l_room,
    input  logic                c2s_room,
    output logic                l2c_pop,
    output logic                s2c_pop,
    output logic                c2l_push,
    output logic                c2s_push,
    // DRAM read client (micro-op and accumulator loads)
    output logic                req_valid,
    input  logic                req_ready,
    output logic [31:0]         req_addr,
    output logic [LEN_BITS-1:0] req_len,
    input  logic                resp_valid,
    input  logic [BUS_BITS-1:0] resp_data,
    output logic                resp_ready,
    // INP / WGT buffer reads, OUT buffer writes
    output logic                inp_rd_en,
    output logic [INP_AW-1:0]   inp_rd_addr,
    input  logic [INP_BYTES*8-1:0] inp_rd_data,
    output logic                wgt_rd_en,
    output logic [WGT_AW-1:0]   wgt_rd_addr,
    input  logic [WGT_BYTES*8-1:0] wgt_rd_data,
    output logic [1:0]          out_wr_en,  // two ports: an even and an odd row
    output logic [1:0][ACC_AW-1:0] out_wr_addr,
    output logic [1:0][OUT_BYTES*8-1:0] out_wr_data,
    // status
    output logic                finish_retired,
    output logic [1:0]          state,
    output logic                token_wait,
    output logic                gemm_step,  // a non-reset GEMM step this cycle
    output logic                alu_step
);
  localparam int AB = ACC_BYTES * 8;

  wire [2:0] opc = insn_opcode(cmd_insn);
  wire mem_insn_t mi = decode_mem(cmd_insn);
  wire loop_insn_t li = decode_loop(cmd_insn);
  logic start, exec_done;

  vta_engine_ctrl u_ctrl (
      .clk, .rst_n, .cmd_valid, .deps(insn_deps(cmd_insn)),
      .prev_avail(l2c_avail), .next_avail(s2c_avail), .prev_room(c2l_room), .next_room(c2s_room),
      .pop_prev(l2c_pop), .pop_next(s2c_pop), .push_prev(c2l_push), .push_next(c2s_push),
      .start, .exec_done, .cmd_pop, .state, .token_wait
  );

  wire is_load = opc == OP_LOAD;
  wire is_loop = opc == OP_GEMM || opc == OP_ALU;
  wire start_uop = start && is_load && mi.mem_type == MEM_UOP;
  wire start_acc = start && is_load && mi.mem_type == MEM_ACC;
  wire start_loop = start && is_loop;
  wire start_other = start && !start_uop && !start_acc && !start_loop;

  always_ff @(posedge clk) begin
    if (!rst_n) finish_retired <= 1'b0;
    else if (cmd_pop && opc == OP_FINISH) finish_retired <= 1'b1;
  end

  // ---------------------------------------------------------------- micro-op / acc loads
  logic uop_busy, uop_done, uop_wr_en, acc_busy, acc_done, acc_dma_wr_en;
  logic [UOP_AW-1:0] uop_wr_addr;
  logic [31:0] uop_wr_data;
  logic [ACC_AW-1:0] acc_dma_wr_addr;
  logic [AB-1:0] acc_dma_wr_data;
  logic u_req_valid, a_req_valid, u_resp_ready, a_resp_ready;
  logic [31:0] u_req_addr, a_req_addr;
  logic [LEN_BITS-1:0] u_req_len, a_req_len;

  vta_load_dma #(.ELEM_BYTES(UOP_BYTES), .AW(UOP_AW)) u_uop_dma (
      .clk, .rst_n, .start(start_uop), .cmd(mi), .busy(uop_busy), .done(uop_done),
      .req_valid(u_req_valid), .req_ready(req_ready && u_req_valid), .req_addr(u_req_addr),
      .req_len(u_req_len), .resp_valid, .resp_data, .resp_ready(u_resp_ready),
      .wr_en(uop_wr_en), .wr_addr(uop_wr_addr), .wr_data(uop_wr_data)
  );
  vta_load_dma #(.ELEM_BYTES(ACC_BYTES), .AW(ACC_AW)) u_acc_dma (
      .clk, .rst_n, .start(start_acc), .cmd(mi), .busy(acc_busy), .done(acc_done),
      .req_valid(a_req_valid), .req_ready(req_ready && !u_req_valid), .req_addr(a_req_addr),
      .req_len(a_req_len), .resp_valid, .resp_data, .resp_ready(a_resp_ready),
      .wr_en(acc_dma_wr_en), .wr_addr(acc_dma_wr_addr), .wr_data(acc_dma_wr_data)
  );
  assign req_valid = u_req_valid || a_req_valid;
  assign req_addr = u_req_valid ? u_req_addr : a_req_addr;
  assign req_len = u_req_valid ? u_req_len : a_req_len;
  assign resp_ready = uop_busy ? u_resp_ready : a_resp_ready;

  // ---------------------------------------------------------------- loop (stage A)
  loop_insn_t  lq;
  logic        a_active;
  logic [13:0] li_i, li_j;
  logic [12:0] li_u;
  logic [31:0] dst_o, src_o, wgt_o, dst_c, src_c, wgt_c;  // outer-row and current offsets
  wire last_u = 14'(li_u) == lq.uop_end - 1'b1;
  logic        paired;  // this instruction runs inner steps two at a time
  wire two = paired && 32'(li_j) + 1 < 32'(lq.iter_in);  // a second step exists in this row
  wire last_j = (two ? li_j + 1'b1 : li_j) == lq.iter_in - 1'b1;
  wire last_i = li_i == lq.iter_out - 1'b1;

  logic [UOP_AW-1:0] uop_rd_addr;
  logic [31:0] uop_rd_data;
  assign uop_rd_addr = UOP_AW'(li_u);

  vta_sram #(.WIDTH(32), .DEPTH(UOP_DEPTH)) u_uop (
      .clk, .clear(sram_clear), .wr_en(uop_wr_en), .wr_addr(uop_wr_addr), .wr_data(uop_wr_data),
      .rd_en(a_active), .rd_addr(uop_rd_addr), .rd_data(uop_rd_data)
  );

  logic is_alu_q;
  always_ff @(posedge clk) if (start_loop) is_alu_q <= opc == OP_ALU;
  logic [ACC_AW-1:0] b_a, b_s;
  logic [1:0][AB-1:0] acc_rd_data;
  logic [1:0] acc_wr_en;
  logic [1:0][ACC_AW-1:0] acc_wr_addr;
  logic [1:0][AB-1:0] acc_wr_data;
  logic [AB-1:0] c_result, c_result2;

  // stage B and C registers (x2: the second step of a pair)
  logic        b_valid, b_last, b_two, c_valid, c_last, c_two, c_reset, c_alu;
  logic [31:0] b_dst, b_src, b_wgt;
  logic [ACC_AW-1:0] c_a, c_s, c_a2;
  logic [1:0]  wb_valid;
  logic [1:0][ACC_AW-1:0] wb_addr;
  logic [1:0][AB-1:0] wb_data;

  always_ff @(posedge clk) begin
    if (!rst_n) begin
      a_active <= 1'b0;
      b_valid <= 1'b0;
      c_valid <= 1'b0;
      wb_valid <= '0;
    end else begin
      b_valid <= a_active;
      b_two <= a_active && two;
      b_last <= a_active && last_u && last_j && last_i;
      b_dst <= dst_c;
      b_src <= src_c;
      b_wgt <= wgt_c;
      if (start_loop) begin
        lq <= li;
        paired <= ((opc == OP_GEMM && li.reset) || (opc == OP_ALU && li.use_imm)) &&
                  li.uop_end == 14'(li.uop_bgn) + 14'd1 && li.dst_factor_in[0];
        a_active <= 14'(li.uop_bgn) < li.uop_end && li.iter_out != 0 && li.iter_in != 0;
        li_i <= '0;
        li_j <= '0;
        li_u <= li.uop_bgn;
        {dst_o, src_o, wgt_o, dst_c, src_c, wgt_c} <= '0;
      end else if (a_active) begin
        if (!last_u) begin
          li_u <= li_u + 1'b1;
        end else begin
          li_u <= lq.uop_bgn;
          if (!last_j) begin
            li_j <= li_j + (two ? 14'd2 : 14'd1);
            dst_c <= dst_c + (32'(lq.dst_factor_in) << two);
            src_c <= src_c + (32'(lq.src_factor_in) << two);
            wgt_c <= wgt_c + (32'(lq.wgt_factor_in) << two);
          end else begin
            li_j <= '0;
            li_i <= li_i + 1'b1;
            dst_o <= dst_o + 32'(lq.dst_factor_out);
            src_o <= src_o + 32'(lq.src_factor_out);
            wgt_o <= wgt_o + 32'(lq.wgt_factor_out);
            dst_c <= dst_o + 32'(lq.dst_factor_out);
            src_c <= src_o + 32'(lq.src_factor_out);
            wgt_c <= wgt_o + 32'(lq.wgt_factor_out);
            if (last_i) a_active <= 1'b0;
          end
        end
      end
      // stage B -> C
      c_valid <= b_valid;
      c_last <= b_last;
      c_reset <= lq.reset && !is_alu_q;
      c_alu <= is_alu_q;
      c_two <= b_two;
      c_a <= b_a;
      c_s <= b_s;
      c_a2 <= b_a2;
      // stage C -> write-back registers used for forwarding
      wb_valid <= {c_valid && c_two, c_valid};
      wb_addr <= {c_a2, c_a};
      wb_data <= {c_result2, c_result};
    end
  end


  // ---------------------------------------------------------------- stage B: indices, reads
  wire [31:0] b_a32 = 32'(uop_acc(uop_rd_data)) + b_dst;
  wire [31:0] b_s32 = 32'(uop_inp(uop_rd_data)) + b_src;
  wire [31:0] b_w32 = 32'(uop_wgt(uop_rd_data)) + b_wgt;
  assign b_a = ACC_AW'(b_a32);
  assign b_s = ACC_AW'(b_s32);
  wire [ACC_AW-1:0] b_a2 = b_a + ACC_AW'(lq.dst_factor_in);
  assign inp_rd_en = b_valid && !is_alu_q;
  assign inp_rd_addr = INP_AW'(b_s32);
  assign wgt_rd_en = b_valid && !is_alu_q;
  assign wgt_rd_addr = WGT_AW'(b_w32);


  // port 1 reads the ALU's source row, or a pair's second destination row
  vta_sram #(.WIDTH(AB), .DEPTH(ACC_DEPTH), .NREAD(2), .NWRITE(2)) u_acc (
      .clk, .clear(sram_clear), .wr_en(acc_wr_en), .wr_addr(acc_wr_addr), .wr_data(acc_wr_data),
      .rd_en({b_valid && (is_alu_q || b_two), b_valid}), .rd_addr({b_two ? b_a2 : b_s, b_a}),
      .rd_data(acc_rd_data)
  );

  // ---------------------------------------------------------------- stage C: MACs / ALU
  function automatic logic [AB-1:0] fwd(input logic [ACC_AW-1:0] row, input logic [AB-1:0] rd);
    // the newest write of `row` from the previous cycle, else the buffer's data
    if (wb_valid[1] && wb_addr[1] == row) return wb_data[1];
    if (wb_valid[0] && wb_addr[0] == row) return wb_data[0];
    return rd;
  endfunction
  wire [AB-1:0] op_a = fwd(c_a, acc_rd_data[0]);
  wire [AB-1:0] op_b = fwd(c_two ? c_a2 : c_s, acc_rd_data[1]);
  logic [AB-1:0] gemm_res, alu_res, alu_res2;

  vta_gemm_core u_gemm (.acc(op_a), .inp(inp_rd_data), .wgt(wgt_rd_data), .res(gemm_res));
  vta_alu_core u_alu (
      .op(lq.alu_op), .use_imm(lq.use_imm), .imm(lq.imm), .a(op_a), .b(op_b), .res(alu_res)
  );
  // second lane of a pair: always the immediate form
  vta_alu_core u_alu2 (
      .op(lq.alu_op), .use_imm(1'b1), .imm(lq.imm), .a(op_b), .b(op_b), .res(alu_res2)
  );
  assign c_result = c_reset ? '0 : (c_alu ? alu_res : gemm_res);
  assign c_result2 = c_reset ? '0 : alu_res2;

  assign acc_wr_en = {c_valid && c_two, c_valid || acc_dma_wr_en};
  assign acc_wr_addr = {c_a2, c_valid ? c_a : acc_dma_wr_addr};
  assign acc_wr_data = {c_result2, c_valid ? c_result : acc_dma_wr_data};
  assign out_wr_en = acc_wr_en;
  assign out_wr_addr = acc_wr_addr;
  always_comb begin
    for (int w = 0; w < 2; w++) begin
      for (int e = 0; e < BATCH * BLOCK_OUT; e++) begin
        out_wr_data[w][e*8+:8] = acc_wr_data[w][e*32+:8];
      end
    end
  end

  assign gemm_step = c_valid && !c_alu && !c_reset;
  assign alu_step = c_valid && c_alu;  // counts cycles: a pair is one cycle

  // ---------------------------------------------------------------- completion
  logic other_done;
  always_ff @(posedge clk) begin
    if (!rst_n) other_done <= 1'b0;
    else other_done <= start_other || (start_loop && !(14'(li.uop_bgn) < li.uop_end &&
                                                        li.iter_out != 0 && li.iter_in != 0));
  end
  assign exec_done = uop_done || acc_done || other_done || (c_valid && c_last);

  logic unused;
  assign unused = ^{uop_busy, acc_busy, acc_dma_wr_en && c_valid, b_a32[31:ACC_AW],
                    b_s32[31:ACC_AW], b_w32[31:WGT_AW], mi.y_pad_top};
endmodule
