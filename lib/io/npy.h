// npy.h — read NumPy .npy arrays and .npz archives (np.save / np.savez / np.savez_compressed).
//
// .npy: the magic "\x93NUMPY", version 1.0, 2.0 or 3.0, a Python-literal header
//   {'descr': '<f8', 'fortran_order': False, 'shape': (3, 4), }
// then the raw elements. dtypes read (each converted to double): <f8 <f4 <i8 <i4 <i2 |i1 |u1 <u2
// <u4 <u8 |b1 (bools read as 0/1). Any other dtype (big-endian, float16, complex, strings,
// objects, structured) is refused by name. An i8/u8 value with no exact double is refused rather
// than rounded. fortran_order: True is converted to row-major; a 0-d array reads as shape [1];
// zero-size dims and rank > 8 are refused (gradrun tensors need every dim >= 1); the data must be
// exactly shape × itemsize bytes.
//
// .npz: a zip archive of .npy members. STORED (np.savez) and DEFLATE (np.savez_compressed)
// members are read via the central directory (ZIP64 records included, which np.savez writes), and
// each member's CRC-32 is checked. Every member must be a .npy file; names must be unique.
// Tensors come back in archive order (np.savez's keyword order) named without ".npy" — the names
// np.load(...)[name] uses.
//
// Errors: IoError when the file cannot be read; otherwise InputError(file, place, what) with place
// "header" / "data" for a .npy file, "zip" for archive structure, and "<member>" or
// "<member>: header" / "<member>: data" inside an archive.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors.h"  // NamedTensor
#include "tensor/tensor.h"

namespace gr {

Tensor read_npy(const std::string& path);
std::vector<NamedTensor> read_npz(const std::string& path);

// The same, from bytes already in memory; `path` is only used in messages. `descr` / `descrs`
// (optional) receive each array's numpy dtype string as stored (e.g. "<f8", "<i8"), in result
// order, for callers that accept fewer dtypes than the reader converts (weights: floats only).
Tensor parse_npy(std::string_view bytes, const std::string& path, std::string* descr = nullptr);
std::vector<NamedTensor> parse_npz(std::string_view bytes, const std::string& path,
                                   std::vector<std::string>* descrs = nullptr);

}  // namespace gr
