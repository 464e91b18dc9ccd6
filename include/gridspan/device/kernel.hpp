// What every kernel sees: the generated wrapper includes this before the user's source.
// On the cpu backend it brings the CUDA built-ins (cpu_builtins.hpp); under CUDA the real
// ones are used. Either way the gridspan views and the launch ABI.
#pragma once

#include "abi.h"
#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#else
#include "cpu_builtins.hpp"
#endif
#include "views.hpp"
