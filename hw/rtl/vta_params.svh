// Generated from targets/vta.yaml by `python -m toolchain.vta.rtl --params`; do not edit.
localparam int BATCH = 1;
localparam int BLOCK_IN = 16;
localparam int BLOCK_OUT = 16;
localparam int INP_DEPTH = 2048;
localparam int WGT_DEPTH = 1024;
localparam int ACC_DEPTH = 2048;
localparam int UOP_DEPTH = 8192;
localparam int CMD_QUEUE_DEPTH = 64;
localparam int TOKEN_QUEUE_DEPTH = 8;
localparam int BUS_BYTES = 16;
