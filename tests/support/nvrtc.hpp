// Compiling generated kernels for a GPU without one: each KernelDef through NVRTC for sm_90
// (by way of the kernel cache, GRIDSPAN_CACHE_DIR, so NVRTC runs for new sources only).
#pragma once

#ifdef GRIDSPAN_HAVE_CUDA

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "annotation/signature.hpp"
#include "backend/cuda/cuda.hpp"
#include "gridspan/gridspan.hpp"

namespace gridspan::test {

/// Every one of `defs` compiles to an sm_90 cubin (an ELF image); a machine without NVRTC
/// skips the test.
inline void expect_compile_for_sm90(const std::vector<KernelDef>& defs) {
  const std::string cache = Config::from_env().cache_dir;
  for (const KernelDef& def : defs) {
    backend::KernelSource k;
    k.name = def.function();
    k.source = def.source();
    k.params = annotation::parse_signature(k.source, k.name);
    k.max_threads = def.max_threads();
    k.min_blocks = def.min_blocks();
    try {
      const std::string image = backend::cuda::compile_cubin(k, 90, cache);
      EXPECT_TRUE(image.size() > 64 && image.compare(0, 4,
                                                     "\x7f"
                                                     "ELF") == 0)
          << k.source;
    } catch (const CompileError& e) {
      if (std::string(e.what()).find("NVRTC could not be loaded") != std::string::npos)
        GTEST_SKIP() << e.what();
      FAIL() << e.what() << "\n" << k.source;
    }
  }
}

}  // namespace gridspan::test

#endif
