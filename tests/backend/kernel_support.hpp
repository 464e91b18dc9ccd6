// Helpers for the backend tests: a shared cpu backend, hand-built parameter lists (the
// signature parser is tested in tests/annotation) and GsLaunch builders.
#pragma once

#include <array>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "backend/device.hpp"
#include "gridspan/core/config.hpp"

namespace gridspan::test {

inline Config backend_test_config() {
  Config c = Config::from_env();
  c.cpu_devices = 2;
  c.cpu_threads = 2;
  return c;
}

/// One backend for the whole test binary, so kernels compile once per run.
inline backend::Backend& cpu_backend() {
  static std::unique_ptr<backend::Backend> b = backend::make_cpu_backend(backend_test_config());
  return *b;
}

/// A device for kernels run directly on the test's thread.
inline backend::Device& any_device() {
  return *cpu_backend().devices().at(0);
}

inline ParamInfo array_param(const std::string& name, int rank, DType t, bool is_const = false) {
  ParamInfo p;
  p.name = name;
  p.is_array = true;
  p.rank = rank;
  p.is_const = is_const;
  p.dtype = t;
  return p;
}

inline ParamInfo scalar_param(const std::string& name, DType t) {
  ParamInfo p;
  p.name = name;
  p.dtype = t;
  return p;
}

using Box = std::array<int64_t, 3>;

/// A chunk holding [lo, lo + extent) of an array, with declared region [rlo, rhi).
inline GsArrayArg array_arg(void* data, int rank, Box lo, Box extent, Box rlo, Box rhi,
                            int elem_size, int mode = GS_READWRITE, int op = GS_ADD) {
  GsArrayArg a{};
  a.data = data;
  for (int i = 0; i < 3; ++i) {
    a.lo[i] = lo[i];
    a.extent[i] = extent[i];
    a.region_lo[i] = rlo[i];
    a.region_hi[i] = rhi[i];
  }
  a.rank = rank;
  a.mode = mode;
  a.op = op;
  a.elem_size = elem_size;
  return a;
}

/// The whole chunk is the declared region.
inline GsArrayArg chunk_arg(void* data, int rank, Box lo, Box extent, int elem_size,
                            int mode = GS_READWRITE, int op = GS_ADD) {
  return array_arg(data, rank, lo, extent, lo,
                   Box{lo[0] + extent[0], lo[1] + extent[1], lo[2] + extent[2]}, elem_size, mode,
                   op);
}

/// A superblock's launch description; arrays and scalars indexed by parameter.
struct LaunchDesc {
  std::vector<GsArrayArg> arrays;
  std::vector<const void*> scalars;
  GsLaunch launch{};

  LaunchDesc(std::size_t params, Box block_lo, Box block_hi, std::array<uint32_t, 3> block_dim,
             std::array<uint32_t, 3> grid_dim)
      : arrays(params), scalars(params, nullptr) {
    for (int i = 0; i < 3; ++i) {
      launch.block_lo[i] = block_lo[i];
      launch.block_hi[i] = block_hi[i];
      launch.block_dim[i] = block_dim[i];
      launch.grid_dim[i] = grid_dim[i];
    }
  }
  const GsLaunch& get(GsCheckState* check = nullptr) {
    launch.num_params = static_cast<int32_t>(arrays.size());
    launch.arrays = arrays.data();
    launch.scalars = scalars.data();
    launch.check = check;
    return launch;
  }
};

/// Runs `desc` with `kernel` on one of `device`'s executors; `done` gets the result.
inline void run_on(backend::Device& device, const backend::CompiledKernel& kernel, LaunchDesc& desc,
                   std::promise<void>& done) {
  device.submit([&kernel, &desc, &device] { kernel.run(desc.get(), device); },
                [&done](std::exception_ptr e) {
                  if (e)
                    done.set_exception(e);
                  else
                    done.set_value();
                },
                {});
}

}  // namespace gridspan::test
