// gr_ops_elementwise.h — every elementwise op of the table behind one signature:
//   gr_ew_<stem>::fwd(a, b, s)   ::bwd_a(g, a, b, y, s)   ::bwd_b(g, a, b, y, s)  (binary only)
// generated from gr_op_table.h over the scalar definitions of gr_ops_scalar.h. The CPU tape's
// loops, the per-node device kernels and the host dispatch use these; the fused and emitted code
// text calls the gr_<stem>_* functions directly with the same arguments (lib/grad/op_render.h).
#pragma once
#include "gr_op_table.h"
#include "gr_ops_scalar.h"

GR_OP_TABLE(GR_EW_STRUCT)
