// The tasks that make up a plan: plain data the driver builds and the workers run.
// Every task names the chunks it touches (for staging and for dependency tracking) and
// the tasks it waits for.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "annotation/annotation.hpp"
#include "gridspan/core/dtype.hpp"
#include "gridspan/core/geometry.hpp"

namespace gridspan::backend {
class Device;
}

namespace gridspan::plan {

using TaskId = uint64_t;
using ChunkId = uint64_t;

/// A chunk as a task sees it: its id and the box of the array it holds.
struct ChunkRef {
  ChunkId id = 0;
  Rect rect;
};

/// Registers a chunk with the worker's memory manager (no memory is taken yet).
struct CreateChunk {
  ChunkId chunk;
  std::size_t bytes;
};
/// Frees every copy of a chunk.
struct DeleteChunk {
  ChunkId chunk;
};
/// Sets `region` of a chunk to one value (`elem_size` bytes of `value`).
struct Fill {
  ChunkRef dst;
  Rect region;
  std::size_t elem_size;
  std::array<unsigned char, 16> value;
};
/// Copies `region` from one chunk to another (possibly on another device).
struct Copy {
  ChunkRef src, dst;
  Rect region;
  std::size_t elem_size;
};
/// dst := identity, then dst[r] op= src[r] for each source in order (r = src ∩ dst).
struct Reduce {
  ChunkRef dst;
  std::vector<ChunkRef> srcs;
  annotation::ReduceOp op;
  DType dtype;
};
/// Rounds `region` of a float32 chunk into a chunk of the 16-bit float `dtype` (to nearest
/// even): a 16-bit sum's or product's float32 partial, once, at the end (partial_dtype).
struct Narrow {
  ChunkRef src, dst;
  Rect region;
  DType dtype;
};
/// The host bytes a HostWrite reads: its own (a vector) or a pinned buffer's
/// (Array::write_async), kept alive by `owner` until the write is done.
class HostBytes {
 public:
  HostBytes() = default;
  template <class V>               // std::vector<unsigned char>, const or not
  HostBytes(std::shared_ptr<V> v)  // NOLINT(google-explicit-constructor)
      : owner_(v), p_(v ? v->data() : nullptr), n_(v ? v->size() : 0) {}
  HostBytes(std::shared_ptr<const void> owner, const unsigned char* p, std::size_t n)
      : owner_(std::move(owner)), p_(p), n_(n) {}
  const unsigned char* data() const { return p_; }
  std::size_t size() const { return n_; }
  explicit operator bool() const { return owner_ != nullptr; }
  void reset() { *this = HostBytes(); }
  friend bool operator==(const HostBytes& a, const HostBytes& b) {
    return a.n_ == b.n_ && (a.n_ == 0 || std::memcmp(a.p_, b.p_, a.n_) == 0);
  }

 private:
  std::shared_ptr<const void> owner_;
  const unsigned char* p_ = nullptr;
  std::size_t n_ = 0;
};

/// Writes host data (a box `data_rect` in row-major order) into `region` of a chunk.
struct HostWrite {
  ChunkRef dst;
  Rect region;
  HostBytes data;
  Rect data_rect;
  std::size_t elem_size;
};
/// Reads `region` of a chunk into host memory laid out as the box `dst_rect`.
struct ReadBack {
  ChunkRef src;
  Rect region;
  void* dst;
  Rect dst_rect;
  std::size_t elem_size;
};

/// What a kernel or native function runs against in one superblock.
class Executable;
struct ExecArg {
  ChunkRef chunk;  // the chunk or temporary the view maps (rect = its box)
  Rect region;     // declared access region
  Dim shape;       // the whole array's (what a launch inside a native function binds to)
  annotation::Mode mode;
  annotation::ReduceOp op;
  bool write;  // the task writes the chunk
};
struct Execute {
  // Not owned: the driver keeps every compiled executable alive for the context's life (no
  // reference count shared by every task of a kernel, bumped from several threads).
  const Executable* executable = nullptr;
  Rect blocks;                  // the superblock, in blocks
  Dim block, grid;              // block size and blocks of the whole launch
  std::vector<ExecArg> arrays;  // per parameter (scalars: chunk.id 0)
  std::shared_ptr<const std::vector<unsigned char>> scalars;    // packed scalar values
  std::shared_ptr<const std::vector<uint32_t>> scalar_offsets;  // per parameter
  uint32_t clock = 0;  // the launch clock its end ticks (a trial of finer cuts), or 0
  /// Whether `o` runs the same launch (executable, block, grid and scalar values), so that
  /// the two may run as one batch (Executable::run_batch).
  bool same_launch(const Execute& o) const {
    return executable == o.executable && block == o.block && grid == o.grid &&
           (scalars == o.scalars || (scalars && o.scalars && *scalars == *o.scalars));
  }
};
/// Completes when its dependencies have: what an Event waits for.
struct Barrier {};

/// Between processes: a transfer is one region of one chunk, read by a Send on the rank that
/// holds it and written by the Recv (or RecvHost) with the same transfer number on the rank
/// `to`. The driver numbers transfers uniquely.
using TransferId = uint64_t;
/// Reads `region` of a chunk and sends it to rank `to` once the device has read it.
struct Send {
  ChunkRef src;
  Rect region;
  std::size_t elem_size;
  int to;
  TransferId transfer;
  /// The receiver writes device memory (a Recv, not a RecvHost): on one node it may copy
  /// from this rank's device itself (runtime::DataLink::may_lend).
  bool to_device = false;
};
/// Writes what the Send of `transfer` on rank `from` read into `region` of a chunk; ready
/// only once the data have arrived (and its dependencies are done).
struct Recv {
  ChunkRef dst;
  Rect region;
  std::size_t elem_size;
  int from;
  TransferId transfer;
};
/// Writes what the Send of `transfer` on rank `from` read into host memory laid out as the
/// box `dst_rect` (the driver's read-back of a chunk another rank holds).
struct RecvHost {
  void* dst;
  Rect dst_rect;
  Rect region;
  std::size_t elem_size;
  int from;
  TransferId transfer;
};

/// How a task uses one chunk: it reads it, writes part of it, or writes all of it
/// (`discard`: the chunk's old contents are not needed, so they are not brought to the
/// device; an Execute through an `overwrite` rule whose region covers the chunk).
struct ChunkAccess {
  ChunkId chunk;
  bool write = false;
  bool discard = false;
  /// Elements [fresh_lo, fresh_hi) of the chunk's `volume`, in its row-major order, that the
  /// task overwrites, where it does not overwrite all of it (an `overwrite` rule's rows of a
  /// chunk with halo rows): their old contents need not be brought. Empty: none.
  int64_t fresh_lo = 0, fresh_hi = 0, volume = 0;
};

using Payload = std::variant<CreateChunk, DeleteChunk, Fill, Copy, Reduce, HostWrite, ReadBack,
                             Execute, Barrier, Send, Recv, RecvHost, Narrow>;

struct Task {
  TaskId id = 0;
  int device = 0;  // the worker-local device whose executor runs it
  std::vector<TaskId> deps;
  Payload payload;
  const char* kind() const;
  /// The chunks it touches, each once (for staging).
  void chunk_uses(std::vector<ChunkAccess>& out) const;
};

/// What an executor hands an Executable for one superblock: the task and, per parameter,
/// the memory of the chunk its view maps (null for scalars and untouched arrays).
struct ExecFrame {
  const Execute& exec;
  void* const* data;  // [exec.arrays.size()]
  int device;
  backend::Device* dev;  // the device it runs on: its region operations and stream
};

/// A kernel or native function, as the runtime runs it (runtime/ implements it).
class Executable {
 public:
  virtual ~Executable() = default;
  virtual const std::string& name() const = 0;
  /// What names this executable alike in every process, for the history of its costs kept
  /// across runs (runtime/cost.hpp): the name, or for a compiled kernel a digest of its source.
  virtual std::string history_key() const { return name(); }
  /// Runs one superblock inside the device's submitted work (on an asynchronous device:
  /// queues it); throws gs::Error on failure (AccessError for a checked-mode violation).
  virtual void run(const ExecFrame& frame) const = 0;
  /// Runs several superblocks of one launch, on one device and independent of each other,
  /// inside one submitted work: as one submission where the backend can (one GPU kernel
  /// launch over all of them). By default, one run after another.
  virtual void run_batch(const ExecFrame* frames, std::size_t n) const {
    for (std::size_t k = 0; k < n; ++k) run(frames[k]);
  }
  /// Runs so far, counted by the cost model to choose which to time (runtime/cost.hpp).
  mutable std::atomic<uint32_t> runs{0};
};

/// The tasks one call produced, and the barrier that completes when all of them have.
struct Plan {
  std::vector<Task> tasks;
  TaskId done = 0;
  /// Graphviz picture of the tasks and their dependencies.
  std::string to_dot() const;
};

/// The identity of `op` for `dtype`, as elem bytes (0 for +, 1 for *, the largest value for
/// min, ...).
std::array<unsigned char, 16> reduce_identity(annotation::ReduceOp op, DType dtype);

/// The dtype of the partials of a reduction of a `dtype` array by `op`: float32 for a sum
/// or product of float16 or bfloat16, so that it is rounded once (Narrow), not at every
/// combine; the array's own dtype otherwise (min and max are exact in 16 bits).
DType partial_dtype(annotation::ReduceOp op, DType dtype);

}  // namespace gridspan::plan
