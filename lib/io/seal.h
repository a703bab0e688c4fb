// seal.h — a SHA-256 "seal" over a safetensors file's content (its metadata and every tensor's
// name, shape and values), kept in its own metadata under kSealKey, so that one flipped bit
// anywhere in a run file is found before the file is trusted (docs/cli.md, durability).
//
// The digest covers, in this order: each metadata entry but the seal (std::map order) as
// u64 length + key bytes, u64 length + value bytes; then each tensor in file order as u64 length +
// name, u64 rank, each dim (i64), the values as little-endian f64 (what the reader returns: an F32
// file's values after widening). A file whose metadata names a sealed format must carry a seal:
// a flip in the seal's key cannot make a sealed file read as an unsealed one.
#pragma once
#include <map>
#include <string>

#include "io/safetensors.h"

namespace gr {

inline constexpr const char* kSealKey = "gradrun.sha256";

std::string seal_digest(const StTensorList& tensors, const std::map<std::string, std::string>& metadata);
std::string seal_digest(const SafetensorsFile& f);

// write_safetensors (F64) with metadata[kSealKey] = the digest.
void write_sealed_safetensors(const std::string& path, const StTensorList& tensors, std::map<std::string, std::string> metadata);

// Checks f's seal: InputError(path, "__metadata__", ...) when it disagrees, or when it is absent
// and `required`. Returns whether the file was sealed.
bool check_seal(const SafetensorsFile& f, const std::string& path, bool required);

// read_safetensors + check_seal: a seal is required when the metadata's format names a sealed
// gradrun weights file (gradrun-weights-*): weights, best weights, init.safetensors.
SafetensorsFile read_sealed_weights(const std::string& path);

}  // namespace gr
