/* The binary interface between the runtime and a compiled wrapper kernel: plain C structs,
 * included by the host library and by generated kernel code (cpu and cuda). Coordinates are
 * global element / block indices; axes past an array's rank have lo 0 and extent 1. */
#ifndef GRIDSPAN_DEVICE_ABI_H
#define GRIDSPAN_DEVICE_ABI_H

#ifdef __CUDACC_RTC__
/* NVRTC has no C library headers. */
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#else
#include <stdint.h>
#endif

#define GRIDSPAN_ABI_VERSION 1

#ifdef __cplusplus
extern "C" {
#endif

enum GsAccessMode { GS_READ = 0, GS_WRITE = 1, GS_READWRITE = 2, GS_REDUCE = 3, GS_ATOMIC = 4 };
enum GsReduceOp { GS_ADD = 0, GS_MUL = 1, GS_MIN = 2, GS_MAX = 3, GS_AND = 4, GS_OR = 5 };

/* One array argument: a chunk (or temporary) holding the box [lo, lo + extent) of the array
 * in row-major order, and the access region declared for this superblock. */
typedef struct GsArrayArg {
  void* data;
  int64_t lo[3];
  int64_t extent[3];
  int64_t region_lo[3]; /* declared access region [region_lo, region_hi) */
  int64_t region_hi[3];
  int32_t rank;
  int32_t mode; /* GsAccessMode */
  int32_t op;   /* GsReduceOp, for reduce/atomic */
  int32_t elem_size;
} GsArrayArg;

/* What a checked view found wrong at the first bad access. */
enum GsCheckKind {
  GS_CHECK_OUTSIDE = 0,    /* outside the declared access region */
  GS_CHECK_RAW_PARTIAL = 1 /* an element of a float32 partial of a 16-bit array, not .reduce */
};

/* Set by views in checked mode at the first bad access. */
typedef struct GsCheckState {
  int32_t violated;
  int32_t param;
  int64_t index[3];
  int32_t kind; /* GsCheckKind */
} GsCheckState;

/* One superblock of one launch. */
typedef struct GsLaunch {
  int64_t block_lo[3]; /* first block of the superblock */
  int64_t block_hi[3]; /* one past the last block */
  uint32_t block_dim[3];
  uint32_t grid_dim[3];       /* blocks of the whole launch per axis */
  int32_t num_params;         /* kernel parameters after blockIdx */
  const GsArrayArg* arrays;   /* [num_params]; entries of scalar parameters unused */
  const void* const* scalars; /* [num_params]; pointers to scalar values, else null */
  GsCheckState* check;        /* non-null in checked mode */
} GsLaunch;

/* The cpu backend's services that generated kernel code calls back into the library (which
 * is built with the project's flags and sanitizers; JIT code is not). */
typedef struct GsCpuRuntime {
  uint32_t abi_version; /* GRIDSPAN_ABI_VERSION of the library */
  uint32_t reserved;
  /* Runs body(arg, t) for t in [0, count) as one fiber each on the calling thread, switching
   * round robin at every barrier; returns when every fiber has returned. Rethrows (as C++)
   * what a fiber threw. */
  void (*run_fibers)(int32_t count, void (*body)(void* arg, int32_t thread), void* arg);
  /* __syncthreads() inside run_fibers: returns once every fiber of the block has reached a
   * barrier or returned. */
  void (*barrier)(void);
} GsCpuRuntime;

/* The entry point every cpu wrapper kernel exports: runs every block of the superblock. */
#define GRIDSPAN_CPU_ENTRY_NAME "gridspan_entry_v1"
typedef void (*GsCpuEntry)(const GsLaunch* launch, const GsCpuRuntime* runtime);

/* What the cuda backend passes a wrapper kernel first: the superblock (grid dims past it
 * are looped over when they exceed the hardware's), the whole launch's grid, and checked
 * mode's report (pinned, mapped host memory). Array and scalar parameters follow. */
typedef struct GsCudaHeader {
  int64_t block_lo[3];
  int64_t blocks[3]; /* blocks of the superblock per axis */
  uint32_t grid_dim[3];
  uint32_t reserved;
  GsCheckState* check;
} GsCudaHeader;

/* A box of elements addressed in two row-major boxes (the cuda backend's fill and reduce
 * kernels). Axis 0 is the outermost, axis 2 the contiguous one. */
typedef struct GsBox {
  int64_t extent[3];
  int64_t dst_offset;
  int64_t dst_stride[2]; /* elements between consecutive indices of axes 0 and 1 */
  int64_t src_offset;
  int64_t src_stride[2];
} GsBox;

#define GRIDSPAN_CUDA_ENTRY_NAME "gridspan_entry_v1"
/* A superblock that starts at block (0, 0, 0) and fits one grid: the kernel gets blockIdx as
 * it is (no offset to add), as a plain CUDA launch of the whole grid would. */
#define GRIDSPAN_CUDA_ORIGIN_ENTRY_NAME "gridspan_entry_origin_v1"

/* Several superblocks of one launch in one kernel launch (the parts entry), stacked along
 * the grid's z axis: the grid is the largest part's blocks on x and y, and every part's
 * blocks on z one after the other. Its first parameter is a table, passed by value, of
 *   int64_t first[P + 1];   part k runs the grid's z indices [first[k], first[k+1])
 *   struct { GsCudaHeader h; GsArrayArg arrays[A]; } parts[P];
 * for a kernel of A array parameters, with P = GRIDSPAN_CUDA_PARTS(A, S) for S scalar
 * parameters: as many parts as keep every parameter within 4 KiB, at most 8 (0: the kernel
 * has no parts entry). Then the number of parts used (int32_t) and the scalar parameters.
 * Blocks past a part's extent on x or y return at once. Superblocks whose stacked grid would
 * pass CUDA's limits (65535 on y and z), or hold more than twice their blocks, are launched
 * one by one instead. */
#define GRIDSPAN_CUDA_PARTS_ENTRY_NAME "gridspan_entry_parts_v2"
#define GRIDSPAN_CUDA_PARTS_BYTES(A) (8 + (int)sizeof(GsCudaHeader) + (A) * (int)sizeof(GsArrayArg))
#define GRIDSPAN_CUDA_PARTS_FIT(A, S) ((4072 - 8 * (S)) / GRIDSPAN_CUDA_PARTS_BYTES(A))
#define GRIDSPAN_CUDA_PARTS(A, S)          \
  (GRIDSPAN_CUDA_PARTS_FIT(A, S) < 2   ? 0 \
   : GRIDSPAN_CUDA_PARTS_FIT(A, S) > 8 ? 8 \
                                       : GRIDSPAN_CUDA_PARTS_FIT(A, S))

#ifdef __cplusplus
}
#endif

#endif /* GRIDSPAN_DEVICE_ABI_H */
