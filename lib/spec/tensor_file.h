// tensor_file.h — parameter inits and consts from tensor files (docs/spec.md, "Weights from files"):
//
//   "init": {"file": PATH, "tensor": NAME, "transpose": true}      (params, dense layers' W and b)
//   "consts": {"c": {"file": PATH, "tensor": NAME, "shape": [...]}}  (shape optional: the file's)
//
// PATH is relative to the spec's folder and names a .safetensors file (F64 or F32 tensors), a .npy
// array ("<f8" or "<f4"; "tensor" may be left out, and when given must be the file's stem — the
// name data.npy uses) or an .npz archive (a member, without ".npy"). Integer, bool and half
// tensors are refused: a weight that was stored as integers is almost always the wrong tensor.
// "transpose": true swaps the two axes of a 2-D tensor — PyTorch's nn.Linear keeps weight as
// [out, in] while gradrun's matmul weights are [in, out].
//
// The parser only reads the keys (read_file_init / read_file_const); load_tensor_files() then
// reads every file once, fills the values, and records each file's SHA-256 in spec.tensor_files.
// Every problem — a missing or unreadable file, a missing tensor, a dtype, a rank that cannot be
// transposed — is an InputError at the init's or const's JSON pointer naming the file and tensor.
// The shape of an init is checked against its parameter by check_file_init (resolve_program: a
// dense layer's W shape is only known there).
#pragma once
#include <string>

#include "spec/json_reader.h"
#include "spec/spec.h"
#include "tensor/shape.h"

namespace gr {

// The keys of a file init ({"file", "tensor", "transpose"}); values come later.
InitSpec read_file_init(const JsonAt& j);
// The keys of a file const ({"file", "tensor", "transpose", "shape"}) into `c`.
void read_file_const(const JsonAt& j, ConstSpec& c);
// Reads every file named by an init or const of `spec` (params, dense layers, consts).
void load_tensor_files(Spec& spec);
// Frees the values of every "values" init (inline or from a file) and every const, once a Model has
// copied them to its tape (gradrun train), so a fine-tune's frozen base is held once, not three
// times. The spec keeps names, shapes, files and digests; building a Model from it again is refused.
void release_tensor_values(Spec& spec);
// A file init's tensor must have exactly the parameter's shape (no-op for other inits).
void check_file_init(const Spec& spec, const InitSpec& init, const Shape& shape, const std::string& param);

}  // namespace gr
