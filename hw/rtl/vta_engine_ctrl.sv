// Token protocol of one engine around its datapath (hw/ISA.md section 3):
// wait for the command's pop tokens, start the datapath, wait for it, push the command's
// tokens, retire the command. With everything available an instruction costs one cycle of
// control overhead on top of its datapath time.
module vta_engine_ctrl
  import vta_pkg::*;
(
    input  logic       clk,
    input  logic       rst_n,
    input  logic       cmd_valid,
    input  deps_t      deps,
    input  logic       prev_avail,  // a token is waiting in the queue from the previous engine
    input  logic       next_avail,  // ... from the next engine
    input  logic       prev_room,  // the queue to the previous engine has room
    input  logic       next_room,  // ... to the next engine
    output logic       pop_prev,
    output logic       pop_next,
    output logic       push_prev,
    output logic       push_next,
    output logic       start,
    input  logic       exec_done,
    output logic       cmd_pop,
    output logic [1:0] state,
    output logic       token_wait  // blocked on a token queue this cycle
);
  wire pops_ok = (!deps.pop_prev || prev_avail) && (!deps.pop_next || next_avail);
  wire push_ok = (!deps.push_prev || prev_room) && (!deps.push_next || next_room);
  wire want_pop = (state == ST_IDLE && cmd_valid) || state == ST_POP;
  wire go = want_pop && pops_ok;
  wire finish = (state == ST_EXEC && exec_done) || state == ST_PUSH;
  wire retire = finish && push_ok;

  assign start = go;
  assign pop_prev = go && deps.pop_prev;
  assign pop_next = go && deps.pop_next;
  assign push_prev = retire && deps.push_prev;
  assign push_next = retire && deps.push_next;
  assign cmd_pop = retire;
  assign token_wait = (want_pop && !pops_ok) || (finish && !push_ok);

  always_ff @(posedge clk) begin
    if (!rst_n) state <= ST_IDLE;
    else if (go) state <= ST_EXEC;
    else if (want_pop) state <= ST_POP;
    else if (retire) state <= ST_IDLE;
    else if (finish) state <= ST_PUSH;
  end
endmodule
