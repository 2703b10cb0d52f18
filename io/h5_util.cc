#include "io/h5_util.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "io/atomic_file.h"
#include "io/h5_handle.h"
#include "io/store_format.h"

namespace seedstore {

// The HDF5 file type of a dtype (bfloat16 as uint16, bool as uint8: see seedstore.dtype).
Hid StorageType(DType d) {
  switch (d) {
    case DType::kF32:
      return Hid(H5Tcopy(H5T_IEEE_F32LE), H5Tclose);
    case DType::kF64:
      return Hid(H5Tcopy(H5T_IEEE_F64LE), H5Tclose);
    case DType::kF16: {
      // IEEE binary16 as h5py defines it (numpy float16).
      hid_t t = H5Tcopy(H5T_IEEE_F32LE);
      H5Tset_fields(t, 15, 10, 5, 0, 10);
      H5Tset_size(t, 2);
      H5Tset_ebias(t, 15);
      return Hid(t, H5Tclose);
    }
    case DType::kBF16:
    case DType::kU16:
      return Hid(H5Tcopy(H5T_STD_U16LE), H5Tclose);
    case DType::kU8:
    case DType::kBool:
      return Hid(H5Tcopy(H5T_STD_U8LE), H5Tclose);
    case DType::kU32:
      return Hid(H5Tcopy(H5T_STD_U32LE), H5Tclose);
    case DType::kU64:
      return Hid(H5Tcopy(H5T_STD_U64LE), H5Tclose);
    case DType::kI8:
      return Hid(H5Tcopy(H5T_STD_I8LE), H5Tclose);
    case DType::kI16:
      return Hid(H5Tcopy(H5T_STD_I16LE), H5Tclose);
    case DType::kI32:
      return Hid(H5Tcopy(H5T_STD_I32LE), H5Tclose);
    case DType::kI64:
      return Hid(H5Tcopy(H5T_STD_I64LE), H5Tclose);
  }
  return Hid();
}

Result<bool> StoredLinkExists(hid_t f, const std::string& path, const std::string& where) {
  for (size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
    const std::string p = path.substr(0, end);
    H5L_info_t info;
    if (H5Lget_info(f, p.c_str(), &info, H5P_DEFAULT) < 0) {
      // Absent (the common failure), or a group whose links HDF5 cannot read.
      H5ErrorText();
      const htri_t e = H5Lexists(f, p.c_str(), H5P_DEFAULT);
      if (e < 0) return H5ReadFailure(where + ": looking up '" + p + "'");
      if (e == 0) return false;
      return H5ReadFailure(where + ": reading the link '" + p + "'");
    }
    if (info.type != H5L_TYPE_HARD)
      return StoreStatus(StoreError::kBadLayout,
                         where + ": '" + p + "' is " +
                             (info.type == H5L_TYPE_EXTERNAL ? "an external" : "a soft") +
                             " link; seedstore reads only objects stored in the file itself");
    if (end == std::string::npos) return true;
  }
}

// Whether an HDF5 type stores `d` bit for bit as seedstore reads it: class, size, byte order
// and sign, and every bit in use -- an IEEE float's sign, exponent and mantissa fields and
// bias (a 2-byte float with 8 exponent bits is not float16), an integer's full precision at
// offset 0 (a 16-bit integer inside 4 bytes is not an int32).
bool TypeMatches(hid_t t, DType d) {
  const H5T_class_t c = H5Tget_class(t);
  const size_t size = static_cast<size_t>(DTypeSize(d));
  if (H5Tget_size(t) != size) return false;
  if (H5Tget_order(t) != H5T_ORDER_LE && size > 1) return false;
  if (H5Tget_precision(t) != 8 * size || H5Tget_offset(t) != 0) return false;
  if (c == H5T_FLOAT) {
    // (sign position, exponent position and bits, mantissa position and bits, bias) of IEEE.
    struct Ieee {
      size_t spos, epos, esize, mpos, msize, ebias;
    };
    Ieee want;
    switch (d) {
      case DType::kF16:
        want = {15, 10, 5, 0, 10, 15};
        break;
      case DType::kF32:
        want = {31, 23, 8, 0, 23, 127};
        break;
      case DType::kF64:
        want = {63, 52, 11, 0, 52, 1023};
        break;
      default:
        return false;
    }
    Ieee got;
    if (H5Tget_fields(t, &got.spos, &got.epos, &got.esize, &got.mpos, &got.msize) < 0) return false;
    got.ebias = H5Tget_ebias(t);
    return got.spos == want.spos && got.epos == want.epos && got.esize == want.esize &&
           got.mpos == want.mpos && got.msize == want.msize && got.ebias == want.ebias;
  }
  switch (d) {
    case DType::kF32:
    case DType::kF64:
    case DType::kF16:
      return false;
    case DType::kBF16:
    case DType::kBool:
    case DType::kU8:
    case DType::kU16:
    case DType::kU32:
    case DType::kU64:
      return c == H5T_INTEGER && H5Tget_sign(t) == H5T_SGN_NONE;
    default:
      return c == H5T_INTEGER && H5Tget_sign(t) == H5T_SGN_2;
  }
}

Status WriteU64Attr(hid_t obj, const char* name, const std::vector<uint64_t>& v, bool scalar) {
  const hsize_t n = v.size();
  Hid space(scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr), H5Sclose);
  Hid a(H5Acreate2(obj, name, H5T_STD_U64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a.ok() || H5Awrite(a.get(), H5T_NATIVE_UINT64, v.data()) < 0)
    return SEEDSTORE_H5_ERROR(std::string("writing attribute '") + name + "'");
  return Status::Ok();
}

Status WriteI32Attr(hid_t obj, const char* name, int32_t v) {
  Hid space(H5Screate(H5S_SCALAR), H5Sclose);
  Hid a(H5Acreate2(obj, name, H5T_STD_I32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a.ok() || H5Awrite(a.get(), H5T_NATIVE_INT32, &v) < 0)
    return SEEDSTORE_H5_ERROR(std::string("writing attribute '") + name + "'");
  return Status::Ok();
}

// Opens an attribute; missing-attribute when absent. `where` names the object.
Result<Hid> OpenAttr(hid_t obj, const char* name, const std::string& where) {
  const htri_t e = H5Aexists(obj, name);
  if (e < 0) return H5ReadFailure(where + ": checking attribute '" + name + "'");
  if (e == 0)
    return StoreStatus(StoreError::kMissingAttribute,
                       where + ": attribute '" + name + "' is missing");
  Hid a(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  if (!a.ok()) return H5ReadFailure(where + ": opening attribute '" + name + "'");
  return a;
}

Result<std::vector<uint64_t>> ReadU64Attr(hid_t obj, const char* name, const std::string& where) {
  SEEDSTORE_ASSIGN_OR_RETURN(Hid a, OpenAttr(obj, name, where));
  Hid ft(H5Aget_type(a.get()), H5Tclose);
  Hid sp(H5Aget_space(a.get()), H5Sclose);
  if (H5Tget_class(ft.get()) != H5T_INTEGER)
    return Corrupt(where + ": attribute '" + name + "' is not an integer");
  const hssize_t n = H5Sget_simple_extent_npoints(sp.get());
  if (n < 0 || n > 1024) return Corrupt(where + ": attribute '" + name + "' has a bad size");
  std::vector<uint64_t> v(static_cast<size_t>(n));
  if (n > 0 && H5Aread(a.get(), H5T_NATIVE_UINT64, v.data()) < 0)
    return H5ReadFailure(where + ": reading attribute '" + name + "'");
  return v;
}

bool LooksLikeHdf5(const std::string& path) {
  if (!NotARegularFile(path).empty()) return false;  // a pipe would block, and cannot seek
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  for (uint64_t off = 0; off < (1ull << 40); off = off ? off * 2 : 512) {
    unsigned char b[8];
    f.seekg(static_cast<std::streamoff>(off));
    if (!f.read(reinterpret_cast<char*>(b), 8)) return false;
    if (std::memcmp(b, sig, 8) == 0) return true;
  }
  return false;
}

Result<std::string> ReadStringAttr(int64_t obj, const char* name, const std::string& where) {
  SEEDSTORE_ASSIGN_OR_RETURN(Hid a, OpenAttr(obj, name, where));
  Hid ft(H5Aget_type(a.get()), H5Tclose);
  Hid sp(H5Aget_space(a.get()), H5Sclose);
  if (H5Tget_class(ft.get()) != H5T_STRING || H5Sget_simple_extent_npoints(sp.get()) != 1)
    return Corrupt(where + ": attribute '" + name + "' is not a string");
  if (H5Tis_variable_str(ft.get()) > 0) {
    Hid mt(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mt.get(), H5T_VARIABLE);
    H5Tset_cset(mt.get(), H5Tget_cset(ft.get()));
    char* p = nullptr;
    if (H5Aread(a.get(), mt.get(), &p) < 0)
      return H5ReadFailure(where + ": reading attribute '" + name + "'");
    std::string s = p ? p : "";
    H5free_memory(p);
    return s;
  }
  const size_t n = H5Tget_size(ft.get());
  std::string s(n, '\0');
  if (H5Aread(a.get(), ft.get(), s.data()) < 0)
    return H5ReadFailure(where + ": reading attribute '" + name + "'");
  s.resize(std::strlen(s.c_str()));
  return s;
}

Result<std::vector<uint64_t>> ReadU64ArrayAttr(int64_t obj, const char* name,
                                               const std::string& where) {
  H5Guard g;
  return ReadU64Attr(obj, name, where);
}

bool H5TypeStores(int64_t type, DType d) {
  H5Guard g;
  return TypeMatches(type, d);
}

std::string Hex64(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016" PRIx64, v);
  return b;
}

Status WriteStringAttr(int64_t obj, const char* name, const std::string& value) {
  Hid type(H5Tcopy(H5T_C_S1), H5Tclose);
  const std::string v = value.empty() ? std::string(1, '\0') : value;
  H5Tset_size(type.get(), v.size());
  H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  Hid space(H5Screate(H5S_SCALAR), H5Sclose);
  Hid a(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a.ok() || H5Awrite(a.get(), type.get(), v.data()) < 0)
    return SEEDSTORE_H5_ERROR(std::string("writing attribute '") + name + "'");
  return Status::Ok();
}

}  // namespace seedstore
