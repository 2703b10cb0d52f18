#include "io/device.h"

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
    case Device::kAuto: return "auto";
    case Device::kCpu: return "cpu";
    case Device::kCuda: return "cuda";
  }
  return "?";
}

Result<Device> ResolveDevice(Device requested) {
  if (requested == Device::kCpu) return Device::kCpu;
  std::string why;
  const bool ok = CudaAvailable(&why);
  if (requested == Device::kAuto) return ok ? Device::kCuda : Device::kCpu;
  if (!ok) return Unsupported("--device cuda: " + why);
  return Device::kCuda;
}

Result<Device> ResolveDevice(const std::string& option) {
  SEEDSTORE_ASSIGN_OR_RETURN(Device d, ParseDevice(option));
  return ResolveDevice(d);
}

Status FromKernel(const KernelStatus& s) {
  switch (s.code) {
    case KernelCode::kOk: return Status::Ok();
    case KernelCode::kInvalidArgument: return InvalidArgument(s.message);
    case KernelCode::kUnsupported: return Unsupported(s.message);
    case KernelCode::kCuda: return IoError(s.message);
  }
  return Internal(s.message);
}

namespace {

// Dense region -> device buffer in pieces of at most kPiece bytes (host staging buffer).
Status StageDense(const Catalog& c, size_t i, const Region& r, DeviceBuffer* d, CpuOptions o) {
  const TensorRecord& t = c.tensors()[i];
  std::vector<unsigned char> h(r.Count() * DTypeSize(t.dtype));
  SEEDSTORE_RETURN_IF_ERROR(c.Read(i, r, h.data(), o));
  SEEDSTORE_RETURN_IF_ERROR(FromKernel(DeviceBuffer::Allocate(h.size(), d)));
  return FromKernel(d->CopyFromHost(h.data(), h.size()));
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
  SEEDSTORE_RETURN_IF_ERROR(StageDense(c, i, r, &buf, o));
  SEEDSTORE_RETURN_IF_ERROR(
      FromKernel(FingerprintCuda(t.dtype, r, buf.data(), t.fp_seed(), nullptr, &f)));
  return f;
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
