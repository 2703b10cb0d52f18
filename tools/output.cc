#include "tools/output.h"

#include <cstdio>
#include <cstring>
#include <string>

#include "store/spec.h"

namespace seedstore::cli {
namespace {

const char* NpyDescr(DType t) {
  switch (t) {
    case DType::kF32: return "<f4";
    case DType::kF64: return "<f8";
    case DType::kF16: return "<f2";
    case DType::kBF16: return "<u2";
    case DType::kU8: return "|u1";
    case DType::kU16: return "<u2";
    case DType::kU32: return "<u4";
    case DType::kU64: return "<u8";
    case DType::kI8: return "|i1";
    case DType::kI16: return "<i2";
    case DType::kI32: return "<i4";
    case DType::kI64: return "<i8";
    case DType::kBool: return "|b1";
  }
  return "|u1";
}

std::string ElementText(DType t, const unsigned char* p) {
  char buf[64];
  switch (t) {
    case DType::kF32: { float v; std::memcpy(&v, p, 4); std::snprintf(buf, sizeof buf, "%.9g", v); break; }
    case DType::kF64: { double v; std::memcpy(&v, p, 8); std::snprintf(buf, sizeof buf, "%.17g", v); break; }
    case DType::kBF16: { uint16_t v; std::memcpy(&v, p, 2); std::snprintf(buf, sizeof buf, "%.9g", BF16ToF32(v)); break; }
    case DType::kF16: { uint16_t v; std::memcpy(&v, p, 2); std::snprintf(buf, sizeof buf, "%.9g", F16ToF32(v)); break; }
    case DType::kU8: case DType::kBool: std::snprintf(buf, sizeof buf, "%u", p[0]); break;
    case DType::kU16: { uint16_t v; std::memcpy(&v, p, 2); std::snprintf(buf, sizeof buf, "%u", v); break; }
    case DType::kU32: { uint32_t v; std::memcpy(&v, p, 4); std::snprintf(buf, sizeof buf, "%u", v); break; }
    case DType::kU64: { unsigned long long v; std::memcpy(&v, p, 8); std::snprintf(buf, sizeof buf, "%llu", v); break; }
    case DType::kI8: std::snprintf(buf, sizeof buf, "%d", static_cast<int8_t>(p[0])); break;
    case DType::kI16: { int16_t v; std::memcpy(&v, p, 2); std::snprintf(buf, sizeof buf, "%d", v); break; }
    case DType::kI32: { int32_t v; std::memcpy(&v, p, 4); std::snprintf(buf, sizeof buf, "%d", v); break; }
    case DType::kI64: { long long v; std::memcpy(&v, p, 8); std::snprintf(buf, sizeof buf, "%lld", v); break; }
  }
  return buf;
}

}  // namespace

Status WriteArray(const std::string& path, const std::string& format, DType dtype,
                  const std::vector<uint64_t>& shape, const void* bytes, size_t n) {
  const bool to_stdout = path.empty() || path == "-";
  std::FILE* f = to_stdout ? stdout : std::fopen(path.c_str(), "wb");
  if (!f) return IoError("cannot open output '" + path + "' for writing");
  std::string head;
  if (format == "npy") {
    std::string dict = std::string("{'descr': '") + NpyDescr(dtype) + "', 'fortran_order': False, 'shape': (";
    for (size_t i = 0; i < shape.size(); ++i) dict += std::to_string(shape[i]) + (shape.size() == 1 ? "," : (i + 1 < shape.size() ? ", " : ""));
    dict += "), }";
    size_t total = 10 + dict.size() + 1;
    const size_t pad = (64 - total % 64) % 64;
    dict.append(pad, ' ');
    dict.push_back('\n');
    head = std::string("\x93NUMPY\x01\x00", 8);
    head.push_back(static_cast<char>(dict.size() & 0xFF));
    head.push_back(static_cast<char>(dict.size() >> 8));
    head += dict;
  }
  bool ok = std::fwrite(head.data(), 1, head.size(), f) == head.size();
  if (format == "text") {
    const int es = DTypeSize(dtype);
    const auto* p = static_cast<const unsigned char*>(bytes);
    for (size_t i = 0; ok && i < n; i += es) {
      const std::string s = ElementText(dtype, p + i) + "\n";
      ok = std::fwrite(s.data(), 1, s.size(), f) == s.size();
    }
  } else {
    ok = ok && std::fwrite(bytes, 1, n, f) == n;
  }
  ok = (std::fflush(f) == 0) && ok;
  if (!to_stdout) ok = (std::fclose(f) == 0) && ok;
  if (!ok) return IoError("writing output '" + (to_stdout ? std::string("<stdout>") : path) + "' failed");
  return Status::Ok();
}

std::string CountText(uint64_t n) {
  char buf[32];
  if (n >= 1000000000ull) std::snprintf(buf, sizeof buf, "%.3g B", n / 1e9);
  else if (n >= 1000000ull) std::snprintf(buf, sizeof buf, "%.4g M", n / 1e6);
  else if (n >= 1000ull) std::snprintf(buf, sizeof buf, "%.3g K", n / 1e3);
  else std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(n));
  return buf;
}

}  // namespace seedstore::cli
