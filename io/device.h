// Where work runs: `--device auto|cpu|cuda`. CUDA when built with kernels and a GPU exists.
#pragma once
#include <string>

#include "kernels/materialize.h"
#include "store/catalog.h"

namespace seedstore {

enum class Device { kAuto, kCpu, kCuda };

/// Parses "auto", "cpu" or "cuda"; the error names the value.
Result<Device> ParseDevice(const std::string& s);
const char* DeviceName(Device d);

/// auto -> cuda when CudaAvailable(), else cpu. cuda without a usable GPU -> kUnsupported
/// naming why ("seedstore was built without CUDA", "no CUDA-capable device is detected").
/// Resolving to cuda also binds the calling thread to the node-local GPU (BindNodeLocalGpu).
Result<Device> ResolveDevice(Device requested);
/// ParseDevice then ResolveDevice: what a `--device` option means.
Result<Device> ResolveDevice(const std::string& option);

/// Makes the calling thread's current CUDA device this process's GPU on its node:
/// DeviceForLocalRank(CurrentNodeLocalRank().rank, visible GPUs) (io/gpu_select.h), so that
/// the ranks of a node under mpirun spread over its GPUs instead of all using GPU 0; with more
/// ranks than GPUs they share (MPI-only work allows it; the NCCL backend refuses it). Outside
/// a launcher that is GPU 0. Returns the device. The current device is per thread: a thread
/// that launches kernels calls this (or ResolveDevice) itself. Errors: kUnsupported (no GPU,
/// no CUDA build), kIo.
Result<int> BindNodeLocalGpu();

/// Converts a kernel-layer status (kCuda errors become kIo).
Status FromKernel(const KernelStatus& s);

/// Fingerprint of region `r` of tensor `i` on device `d` (resolved). Lazy tensors on CUDA are
/// generated and hashed on the GPU without a buffer; dense tensors are read on the host and
/// copied to the device in bounded pieces before hashing there.
Result<Fingerprint> FingerprintOnDevice(Device d, const Catalog& c, size_t i, const Region& r,
                                        CpuOptions o = {});

/// Region `r` of tensor `i` into host memory `h_out`, computed on device `d` (resolved): on
/// CUDA, lazy tensors are generated on the GPU and copied back (bytes equal the CPU's, I2).
Status ReadOnDevice(Device d, const Catalog& c, size_t i, const Region& r, void* h_out,
                    CpuOptions o = {});

}  // namespace seedstore
