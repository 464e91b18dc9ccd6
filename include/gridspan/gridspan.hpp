// gridspan: one CUDA-style kernel launch spread over every device, with spilling.
//   #include <gridspan/gridspan.hpp>
//   namespace gs = gridspan;
#pragma once

#include "gridspan/api/array.hpp"
#include "gridspan/api/context.hpp"
#include "gridspan/api/event.hpp"
#include "gridspan/api/kernel.hpp"
#include "gridspan/api/pinned.hpp"
#include "gridspan/array/create.hpp"
#include "gridspan/array/elementwise.hpp"
#include "gridspan/array/kernels.hpp"
#include "gridspan/array/promote.hpp"
#include "gridspan/array/reduce.hpp"
#include "gridspan/array/fused.hpp"
#include "gridspan/array/linalg.hpp"
#include "gridspan/array/scan.hpp"
#include "gridspan/array/views.hpp"
#include "gridspan/core/config.hpp"
#include "gridspan/core/dtype.hpp"
#include "gridspan/core/error.hpp"
#include "gridspan/core/geometry.hpp"
#include "gridspan/core/half.hpp"
#include "gridspan/core/info.hpp"
#include "gridspan/core/param.hpp"
#include "gridspan/distribution/distribution.hpp"
