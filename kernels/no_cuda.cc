// Launchers of a build without CUDA: every entry point reports kUnsupported, so the CLI can
// say "seedstore was built without CUDA" for --device cuda and fall back for --device auto.
#include "kernels/materialize.h"

namespace seedstore {
namespace {
constexpr const char* kNoCuda =
    "seedstore was built without CUDA (nvcc not found at configure time, or "
    "-DSEEDSTORE_CUDA=OFF); use --device cpu";
KernelStatus NoCuda() { return KernelStatus{KernelCode::kUnsupported, kNoCuda}; }
}  // namespace

bool CudaBuilt() { return false; }
int CudaDeviceCount(std::string* why) {
  if (why) *why = kNoCuda;
  return 0;
}
bool CudaAvailable(std::string* why) { return CudaDeviceCount(why) > 0; }
KernelStatus CudaUseDevice(int) { return NoCuda(); }

KernelStatus MaterializeCuda(const SamplerParams&, const Region&, void*, void*) { return NoCuda(); }
KernelStatus FingerprintCuda(DType, const Region&, const void*, uint64_t, void*, Fingerprint*) {
  return NoCuda();
}
KernelStatus FingerprintCudaAsync(DType, const Region&, const void*, uint64_t, void*, uint64_t*) {
  return NoCuda();
}
KernelStatus MaterializeFingerprintCuda(const SamplerParams&, const Region&, void*, uint64_t, void*,
                                        Fingerprint*) {
  return NoCuda();
}
KernelStatus MaterializeFingerprintCudaAsync(const SamplerParams&, const Region&, void*, uint64_t,
                                             void*, uint64_t*) {
  return NoCuda();
}

KernelStatus StageToDevice(const std::vector<size_t>&, const StageFill&, void*, void*) {
  return NoCuda();
}

DeviceBuffer::~DeviceBuffer() = default;
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  d_ = o.d_;
  bytes_ = o.bytes_;
  o.d_ = nullptr;
  o.bytes_ = 0;
  return *this;
}
KernelStatus DeviceBuffer::Allocate(size_t bytes, DeviceBuffer* out) {
  *out = DeviceBuffer();
  if (bytes == 0) return KernelStatus{};
  return NoCuda();
}
KernelStatus DeviceBuffer::Fill(int) { return bytes_ == 0 ? KernelStatus{} : NoCuda(); }
KernelStatus DeviceBuffer::CopyToHost(void*, size_t bytes, size_t) const {
  return bytes == 0 ? KernelStatus{} : NoCuda();
}
KernelStatus DeviceBuffer::CopyFromHost(const void*, size_t bytes, size_t) {
  return bytes == 0 ? KernelStatus{} : NoCuda();
}

KernelStatus Threefry2x32Cuda(size_t, const uint32_t*, uint32_t*) { return NoCuda(); }
KernelStatus Philox4x32Cuda(size_t, const uint32_t*, uint32_t*) { return NoCuda(); }
KernelStatus HashElementCuda(size_t, const uint64_t*, const uint64_t*, uint64_t, Fingerprint*) {
  return NoCuda();
}

}  // namespace seedstore
