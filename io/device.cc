#include "io/device.h"

#include "io/gpu_select.h"

#include <algorithm>
#include <vector>

namespace seedstore {

Result<Device> ParseDevice(const std::string& s) {
  if (s == "auto") return Device::kAuto;
  if (s == "cpu") return Device::kCpu;
  if (s == "cuda") return Device::kCuda;
  return InvalidArgument("--device '" + s + "': expected auto, cpu or cuda");
}

const char* DeviceName(Device d) {
  switch (d) {
    case Device::kAuto:
      return "auto";
    case Device::kCpu:
      return "cpu";
    case Device::kCuda:
      return "cuda";
  }
  return "?";
}

Result<Device> ResolveDevice(Device requested) {
  if (requested == Device::kCpu) return Device::kCpu;
  std::string why;
  const bool ok = CudaAvailable(&why);
  if (requested == Device::kAuto && !ok) return Device::kCpu;
  if (!ok) return Unsupported("--device cuda: " + why);
  SEEDSTORE_RETURN_IF_ERROR(BindNodeLocalGpu().status());
  return Device::kCuda;
}

Result<int> BindNodeLocalGpu() {
  std::string why;
  const int n = CudaDeviceCount(&why);
  if (n <= 0) return Unsupported("no CUDA device: " + why);
  const NodeLocalRank local = CurrentNodeLocalRank();
  SEEDSTORE_ASSIGN_OR_RETURN(const int device, DeviceForLocalRank(local.rank, n));
  SEEDSTORE_RETURN_IF_ERROR(FromKernel(CudaUseDevice(device)));
  return device;
}

Result<Device> ResolveDevice(const std::string& option) {
  SEEDSTORE_ASSIGN_OR_RETURN(Device d, ParseDevice(option));
  return ResolveDevice(d);
}

Status FromKernel(const KernelStatus& s) {
  switch (s.code) {
    case KernelCode::kOk:
      return Status::Ok();
    case KernelCode::kInvalidArgument:
      return InvalidArgument(s.message);
    case KernelCode::kUnsupported:
      return Unsupported(s.message);
    case KernelCode::kCuda:
      return IoError(s.message);
  }
  return Internal(s.message);
}

namespace {

// Dense region -> device memory d_dst (r.Count() elements) through pinned, overlapped
// staging. A box is cut into slabs of whole leading-dim slices (a flat range into sub-ranges)
// of about kPiece bytes, each read from the store while the previous one is copied.
Status StageDense(const Catalog& c, size_t i, const Region& r, void* d_dst, void* stream,
                  CpuOptions o) {
  constexpr uint64_t kPiece = 8u << 20;
  const TensorRecord& t = c.tensors()[i];
  const uint64_t es = DTypeSize(t.dtype), total = r.Count() * es;
  if (total == 0) return Status::Ok();
  // Sub-regions in box-linear order, each contiguous in the output.
  std::vector<Region> parts;
  if (r.flat || r.rank == 0) {
    const uint64_t step = std::max<uint64_t>(1, kPiece / es);
    for (uint64_t b = r.flat ? r.begin : 0, e = r.flat ? r.end : 1; b < e; b += step) {
      Region p = r;
      if (r.flat) {
        p.begin = b;
        p.end = std::min(e, b + step);
      }
      parts.push_back(p);
    }
  } else {
    const uint64_t slice = r.Count() / (r.stop[0] - r.start[0]) * es;  // one leading index
    const uint64_t rows = std::max<uint64_t>(1, kPiece / std::max<uint64_t>(1, slice));
    for (uint64_t a = r.start[0]; a < r.stop[0]; a += rows) {
      Region p = r;
      p.start[0] = a;
      p.stop[0] = std::min(r.stop[0], a + rows);
      parts.push_back(p);
    }
  }
  std::vector<size_t> sizes;
  for (const Region& p : parts) sizes.push_back(p.Count() * es);
  size_t next = 0;
  const StageFill fill = [&](size_t, size_t, void* h, std::string* error) {
    const Status st = c.Read(i, parts[next++], h, o);
    if (!st.ok()) *error = st.ToString();
    return st.ok();
  };
  return FromKernel(StageToDevice(sizes, fill, d_dst, stream));
}
}  // namespace

Result<Fingerprint> FingerprintOnDevice(Device d, const Catalog& c, size_t i, const Region& r,
                                        CpuOptions o) {
  if (d != Device::kCuda) return c.FingerprintRegion(i, r, o);
  const TensorRecord& t = c.tensors()[i];
  Fingerprint f;
  if (t.lazy) {
    SEEDSTORE_RETURN_IF_ERROR(t.lazy->CheckRegion(r));
    SEEDSTORE_RETURN_IF_ERROR(FromKernel(
        MaterializeFingerprintCuda(t.lazy->params, r, nullptr, t.lazy->fp_seed, nullptr, &f)));
    return f;
  }
  DeviceBuffer buf;
  SEEDSTORE_RETURN_IF_ERROR(
      FromKernel(DeviceBuffer::Allocate(r.Count() * DTypeSize(t.dtype), &buf)));
  SEEDSTORE_RETURN_IF_ERROR(StageDense(c, i, r, buf.data(), nullptr, o));
  return FingerprintDeviceBuffer(t, r, buf.data(), nullptr);
}

Result<Fingerprint> FingerprintDeviceBuffer(const TensorRecord& t, const Region& r,
                                            const void* d_data, void* stream) {
  // In the record's fingerprint frame (a piece of a larger tensor hashes global indices).
  Fingerprint f;
  const auto* p = static_cast<const unsigned char*>(d_data);
  for (const Region& g : t.FrameRegions(r)) {
    Fingerprint part;
    SEEDSTORE_RETURN_IF_ERROR(
        FromKernel(FingerprintCuda(t.dtype, g, p, t.fp_seed(), stream, &part)));
    f.Add(part);
    p += g.Count() * DTypeSize(t.dtype);
  }
  return f;
}

Status ReadIntoDevice(const Catalog& c, size_t i, const Region& r, void* d_out, void* stream,
                      CpuOptions o) {
  const TensorRecord& t = c.tensors()[i];
  SEEDSTORE_RETURN_IF_ERROR(CheckRegionIn(t, r));
  if (!CudaBuilt())
    return Unsupported("tensor " + Quoted(t.name) + ": seedstore was built without CUDA");
  if (r.Count() == 0) return Status::Ok();
  if (t.lazy) return FromKernel(MaterializeCuda(t.lazy->params, r, d_out, stream));
  return StageDense(c, i, r, d_out, stream, o).WithContext("tensor " + Quoted(t.name));
}

Status ReadOnDevice(Device d, const Catalog& c, size_t i, const Region& r, void* h_out,
                    CpuOptions o) {
  const TensorRecord& t = c.tensors()[i];
  if (d != Device::kCuda || !t.lazy) return c.Read(i, r, h_out, o);
  SEEDSTORE_RETURN_IF_ERROR(t.lazy->CheckRegion(r));
  const size_t bytes = r.Count() * DTypeSize(t.dtype);
  DeviceBuffer buf;
  SEEDSTORE_RETURN_IF_ERROR(FromKernel(DeviceBuffer::Allocate(bytes, &buf)));
  SEEDSTORE_RETURN_IF_ERROR(FromKernel(MaterializeCuda(t.lazy->params, r, buf.data(), nullptr)));
  return FromKernel(buf.CopyToHost(h_out, bytes));
}

}  // namespace seedstore
