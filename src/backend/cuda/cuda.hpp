// The cuda backend's internals: GPUs through the driver API (loaded at run time), kernels
// compiled with NVRTC to cubins for each GPU's architecture. Only src/backend/ and the
// backend tests include this; it needs no CUDA header.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/device.hpp"

namespace gridspan::backend::cuda {

/// Every GPU (the first `config.gpus` when that is set), or null with `why` filled when the
/// driver, a GPU or NVRTC is missing.
std::unique_ptr<Backend> make_cuda_backend(const Config& config, std::string& why);

/// The wrapper translation unit NVRTC compiles for `kernel` (exposed for tests).
std::string generate_wrapper(const KernelSource& kernel);
/// The source of the backend's own kernels (fills and reductions between chunks).
std::string builtins_source();

/// How many superblocks the parts entry of a kernel with these parameters takes in one
/// launch (GRIDSPAN_CUDA_PARTS in abi.h; 0: it has none).
int parts_capacity(const std::vector<ParamInfo>& params);

/// The built-in kernels as a cubin for `arch` (cached like user kernels).
std::string builtin_cubin(int arch, const std::string& cache_dir);
/// Compiles `kernel`'s wrapper with NVRTC to a cubin for compute capability `arch` (90 for
/// sm_90), through the disk cache in `cache_dir` (empty: the default folder). Needs NVRTC,
/// no GPU. Throws CompileError with NVRTC's log against the user's line numbers.
std::string compile_cubin(const KernelSource& kernel, int arch, const std::string& cache_dir);

/// Compiles a whole translation unit (which may include <gridspan/device/kernel.hpp>) with the
/// options user kernels get, through the same cache: for programs that launch kernels
/// themselves, such as the benchmarks' plain-CUDA baselines.
std::string compile_program(const std::string& source, const std::string& name, int arch,
                            const std::string& cache_dir);

namespace detail {
/// How many times this process has run NVRTC: tests use it to see cache hits.
long nvrtc_invocations();
}  // namespace detail

}  // namespace gridspan::backend::cuda
