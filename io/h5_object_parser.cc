#include "io/h5_object_parser.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "io/h5_handle.h"

namespace seedstore {

namespace {

// Bob Jenkins' lookup3 hashlittle() over bytes, initial value 0 (HDF5's metadata checksum).
uint32_t Lookup3(const unsigned char* k, size_t length) {
  auto rot = [](uint32_t x, int r) { return (x << r) | (x >> (32 - r)); };
  uint32_t a, b, c;
  a = b = c = 0xdeadbeefu + static_cast<uint32_t>(length);
  auto word = [&](const unsigned char* p, size_t n) {  // n <= 4 little-endian bytes
    uint32_t w = 0;
    for (size_t q = 0; q < n; ++q) w |= static_cast<uint32_t>(p[q]) << (8 * q);
    return w;
  };
  while (length > 12) {
    a += word(k, 4);
    b += word(k + 4, 4);
    c += word(k + 8, 4);
    a -= c;
    a ^= rot(c, 4);
    c += b;
    b -= a;
    b ^= rot(a, 6);
    a += c;
    c -= b;
    c ^= rot(b, 8);
    b += a;
    a -= c;
    a ^= rot(c, 16);
    c += b;
    b -= a;
    b ^= rot(a, 19);
    a += c;
    c -= b;
    c ^= rot(b, 4);
    b += a;
    length -= 12;
    k += 12;
  }
  if (length == 0) return c;
  a += word(k, std::min<size_t>(length, 4));
  if (length > 4) b += word(k + 4, std::min<size_t>(length - 4, 4));
  if (length > 8) c += word(k + 8, length - 8);
  c ^= b;
  c -= rot(b, 14);
  a ^= c;
  a -= rot(c, 11);
  b ^= a;
  b -= rot(a, 25);
  c ^= b;
  c -= rot(b, 16);
  a ^= c;
  a -= rot(c, 4);
  b ^= a;
  b -= rot(a, 14);
  c ^= b;
  c -= rot(b, 24);
  return c;
}

// Little-endian unsigned integer of n <= 8 bytes.
uint64_t LE(const unsigned char* p, size_t n) {
  uint64_t v = 0;
  for (size_t q = 0; q < n; ++q) v |= static_cast<uint64_t>(p[q]) << (8 * q);
  return v;
}

}  // namespace

// Empty when dataset `dset` of the open HDF5 file `f` (stored at `file`) can be opened safely:
// its layout is not virtual, or the global heap object holding its mappings is intact; else
// what is wrong.
std::string SafeToOpen(const std::string& file, hid_t f, const std::string& dset) {
  Hid fcpl(H5Fget_create_plist(f), H5Pclose);
  size_t sa = 0, ss = 0;
  hsize_t ub = 0;
  if (fcpl.get() < 0 || H5Pget_sizes(fcpl.get(), &sa, &ss) < 0 ||
      H5Pget_userblock(fcpl.get(), &ub) < 0 || sa == 0 || sa > 8 || ss == 0 || ss > 8)
    return "the file's address sizes cannot be read";
  H5O_info_t info;
  if (H5Oget_info_by_name2(f, dset.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT) < 0)
    return "its object header cannot be read";
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "the file cannot be read";
  struct stat st;
  const uint64_t size = ::fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  std::vector<unsigned char> buf;
  // Bytes [addr, addr + n) of the file (addresses are relative to the user block's end).
  auto read = [&](uint64_t addr, uint64_t n) -> bool {
    if (addr > size || n > size || addr + ub > size - n) return false;
    buf.resize(n);
    return ::pread(fd, buf.data(), n, static_cast<off_t>(addr + ub)) == static_cast<ssize_t>(n);
  };
  const std::string why = [&]() -> std::string {
    // The object header's chunks (the first, then continuations), each checksummed: find the
    // layout message.
    std::vector<std::pair<uint64_t, uint64_t>> chunks;  // (address, length) of continuations
    uint64_t heap_addr = 0, heap_index = 0;
    bool found = false, virtual_layout = false;
    // Version 2 ("OHDR"; checksummed chunks, continuations "OCHK") or version 1 (no checksums;
    // 8-byte aligned messages with 8-byte headers).
    if (!read(info.addr, 16)) return "its object header is truncated";
    const bool v2 = std::memcmp(buf.data(), "OHDR", 4) == 0 && buf[4] == 2;
    if (!v2 && buf[0] != 1) return "its object header is of an unknown version";
    const unsigned flags = v2 ? buf[5] : 0;
    const uint64_t fixed = v2 ? 6 + ((flags & 0x20) ? 16 : 0) + ((flags & 0x10) ? 4 : 0) : 16;
    const size_t width = v2 ? size_t{1} << (flags & 3) : 0;
    if (!read(info.addr, fixed + width)) return "its object header is truncated";
    const uint64_t len0 = v2 ? LE(buf.data() + fixed, width) : LE(buf.data() + 8, 4);
    const size_t msg_hdr = v2 ? ((flags & 0x04) ? 6 : 4) : 8;
    // Walks the chunk in buf: its messages from `from` (to its checksum, which must match).
    auto walk = [&](uint64_t from) -> std::string {
      if (buf.size() < from + (v2 ? 4 : 0)) return "its object header is truncated";
      const size_t end = buf.size() - (v2 ? 4 : 0);
      if (v2 && Lookup3(buf.data(), end) != LE(buf.data() + end, 4))
        return "its object header's checksum differs";
      for (size_t p = from; p + msg_hdr <= end;) {
        const unsigned type = v2 ? buf[p] : static_cast<unsigned>(LE(buf.data() + p, 2));
        const size_t n = LE(buf.data() + p + (v2 ? 1 : 2), 2);
        const size_t body = p + msg_hdr;
        if (body + n > end) return "an object header message runs past its chunk";
        if (type == 0x10 && n >= sa + ss)  // continuation
          chunks.push_back({LE(buf.data() + body, sa), LE(buf.data() + body + sa, ss)});
        if (type == 0x08) {  // layout: version 3 or 4, class (3: virtual)
          if (n < 2) return "its layout message is truncated";
          virtual_layout = buf[body] >= 3 && buf[body + 1] == 3;
          found = true;
          if (!virtual_layout) return "";
          if (buf[body] != 4 || n < 2 + sa + 4) return "its virtual layout message is malformed";
          heap_addr = LE(buf.data() + body + 2, sa);
          heap_index = LE(buf.data() + body + 2 + sa, 4);
          return "";
        }
        p = body + n;
      }
      return "";
    };
    if (!read(info.addr, fixed + width + len0 + (v2 ? 4 : 0)))
      return "its object header is truncated";
    if (std::string e = walk(fixed + width); !e.empty()) return e;
    for (size_t c = 0; c < chunks.size() && !found; ++c) {
      if (c >= 64) return "its object header has too many chunks";
      if (!read(chunks[c].first, chunks[c].second) ||
          (v2 && (buf.size() < 8 || std::memcmp(buf.data(), "OCHK", 4) != 0)))
        return "an object header continuation is not one";
      if (std::string e = walk(v2 ? 4 : 0); !e.empty()) return e;
    }
    if (!found) return "its object header has no layout message";
    if (!virtual_layout) return "";
    // The heap collection: header (signature, version 1, its size), then objects (index,
    // reference count, reserved, size, data padded to 8 bytes); index 0 is the free space.
    const uint64_t hdr = (8 + ss + 7) / 8 * 8, obj_hdr = (8 + ss + 7) / 8 * 8;
    if (!read(heap_addr, 8 + ss) || std::memcmp(buf.data(), "GCOL", 4) != 0 || buf[4] != 1)
      return "its mappings' global heap collection is not one";
    const uint64_t coll = LE(buf.data() + 8, ss);
    if (coll < hdr || coll > (uint64_t{1} << 32) || !read(heap_addr, coll))
      return "its mappings' global heap collection is truncated";
    for (uint64_t p = hdr; p + obj_hdr <= coll;) {
      const uint64_t idx = LE(buf.data() + p, 2), n = LE(buf.data() + p + 8, ss);
      const uint64_t need = idx == 0 ? n : obj_hdr + (n + 7) / 8 * 8;
      if (need < obj_hdr || need > coll - p)
        return "its mappings' global heap collection is damaged";
      if (idx == heap_index) {
        if (n < 5) return "its mappings' heap object is too short";
        const unsigned char* d = buf.data() + p + obj_hdr;
        if (Lookup3(d, n - 4) != LE(d + n - 4, 4))
          return "its mappings' checksum differs (damaged)";
        return "";
      }
      if (idx == 0) break;  // the free space ends the objects
      p += need;
    }
    return "its mappings' heap object is missing";
  }();
  ::close(fd);
  return why;
}

}  // namespace seedstore
