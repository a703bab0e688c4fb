// sha256.h — SHA-256 (FIPS 180-4): spec hashes, weight digests in run receipts, device module
// cache keys. In lib/tensor, the lowest layer, so every layer above can use the one copy.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace gr {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  std::string hex();  // finishes; lowercase hex of the 32-byte digest

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t used_ = 0;
  uint64_t total_ = 0;
};

inline std::string sha256_hex(std::string_view s) {
  Sha256 h;
  h.update(s);
  return h.hex();
}

}  // namespace gr
