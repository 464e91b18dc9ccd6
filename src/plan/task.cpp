// The plain data of plans: what a task touches, its kind's name, a plan as Graphviz, and
// the identities reductions start from.
#include <cstring>
#include <iterator>
#include <limits>

#include <fmt/format.h>

#include "plan/task.hpp"

namespace gridspan::plan {

using annotation::ReduceOp;

namespace {

template <class T>
std::array<unsigned char, 16> bytes_of(T v) {
  std::array<unsigned char, 16> out{};
  std::memcpy(out.data(), &v, sizeof(T));
  return out;
}

template <class T>
std::array<unsigned char, 16> identity_of(ReduceOp op) {
  switch (op) {
    case ReduceOp::add:
      return bytes_of<T>(T(0));
    case ReduceOp::mul:
      return bytes_of<T>(T(1));
    case ReduceOp::min:
      if constexpr (std::numeric_limits<T>::has_infinity)
        return bytes_of<T>(std::numeric_limits<T>::infinity());
      else
        return bytes_of<T>(std::numeric_limits<T>::max());
    case ReduceOp::max:
      if constexpr (std::numeric_limits<T>::has_infinity)
        return bytes_of<T>(-std::numeric_limits<T>::infinity());
      else
        return bytes_of<T>(std::numeric_limits<T>::lowest());
    case ReduceOp::bit_and:
      return bytes_of<T>(static_cast<T>(~0ull));
    case ReduceOp::bit_or:
      return bytes_of<T>(T(0));
  }
  return {};
}

uint16_t half_bits(float f, bool bf16) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if (bf16) return static_cast<uint16_t>(x >> 16);
  // Only 0, 1 and ±inf are needed here.
  if (f == 0.0f) return 0;
  if (f == 1.0f) return 0x3C00;
  return f > 0 ? 0x7C00 : 0xFC00;
}

}  // namespace

std::array<unsigned char, 16> reduce_identity(ReduceOp op, DType dtype) {
  switch (dtype) {
    case DType::i8:
      return identity_of<int8_t>(op);
    case DType::i16:
      return identity_of<int16_t>(op);
    case DType::i32:
      return identity_of<int32_t>(op);
    case DType::i64:
      return identity_of<int64_t>(op);
    case DType::u8:
      return identity_of<uint8_t>(op);
    case DType::u16:
      return identity_of<uint16_t>(op);
    case DType::u32:
      return identity_of<uint32_t>(op);
    case DType::u64:
      return identity_of<uint64_t>(op);
    case DType::boolean:
      return identity_of<uint8_t>(op);
    case DType::f32:
      return identity_of<float>(op);
    case DType::f64:
      return identity_of<double>(op);
    case DType::f16:
    case DType::bf16: {
      float f = 0;
      auto id = identity_of<float>(op);
      std::memcpy(&f, id.data(), 4);
      return bytes_of<uint16_t>(half_bits(f, dtype == DType::bf16));
    }
  }
  return {};
}

DType partial_dtype(ReduceOp op, DType dtype) {
  const bool half = dtype == DType::f16 || dtype == DType::bf16;
  return half && (op == ReduceOp::add || op == ReduceOp::mul) ? DType::f32 : dtype;
}

const char* Task::kind() const {
  static const char* names[] = {"create",  "delete",  "fill", "copy", "reduce",    "write", "read",
                                "execute", "barrier", "send", "recv", "recv-host", "narrow"};
  static_assert(std::size(names) == std::variant_size_v<Payload>);
  return names[payload.index()];
}

namespace {

// One more use of `chunk`; a chunk used twice is discarded only if both uses discard it,
// and has no fresh part then. Returns the use when it is the chunk's first, else null.
ChunkAccess* add_use(std::vector<ChunkAccess>& out, ChunkId chunk, bool write, bool discard) {
  for (ChunkAccess& u : out)
    if (u.chunk == chunk) {
      u.write = u.write || write;
      u.discard = u.discard && discard;
      u.fresh_lo = u.fresh_hi = u.volume = 0;
      return nullptr;
    }
  return &out.emplace_back(ChunkAccess{chunk, write, discard});
}

// An `overwrite` of `region` in a chunk whose box `rect` it does not cover: the elements it
// overwrites, when they are one run in row-major order (the region spans the box on every
// axis but the first, as a chunk's own rows do inside its halo rows).
void add_fresh(ChunkAccess& use, const Rect& region, const Rect& rect) {
  if (rect.rank < 1 || region.empty() || !rect.contains(region)) return;
  int64_t inner = 1;
  for (int ax = 1; ax < rect.rank; ++ax) {
    if (region.lo[ax] != rect.lo[ax] || region.hi[ax] != rect.hi[ax]) return;
    inner *= rect.extent(ax);
  }
  use.fresh_lo = (region.lo[0] - rect.lo[0]) * inner;
  use.fresh_hi = (region.hi[0] - rect.lo[0]) * inner;
  use.volume = rect.volume();
}

}  // namespace

void Task::chunk_uses(std::vector<ChunkAccess>& out) const {
  out.clear();
  std::visit(
      [&](const auto& p) {
        using P = std::decay_t<decltype(p)>;
        // A destination whose whole box the task writes is discarded: its old contents
        // are not brought to the device (a Reduce fills all of its destination first).
        if constexpr (std::is_same_v<P, Fill> || std::is_same_v<P, HostWrite> ||
                      std::is_same_v<P, Recv>) {
          add_use(out, p.dst.id, true, p.region.contains(p.dst.rect));
        } else if constexpr (std::is_same_v<P, Copy> || std::is_same_v<P, Narrow>) {
          add_use(out, p.src.id, false, false);
          add_use(out, p.dst.id, true, p.region.contains(p.dst.rect));
        } else if constexpr (std::is_same_v<P, Reduce>) {
          for (auto& s : p.srcs) add_use(out, s.id, false, false);
          add_use(out, p.dst.id, true, true);
        } else if constexpr (std::is_same_v<P, ReadBack> || std::is_same_v<P, Send>) {
          add_use(out, p.src.id, false, false);
        } else if constexpr (std::is_same_v<P, Execute>) {
          for (auto& a : p.arrays) {
            if (!a.chunk.id) continue;
            const bool overwrite = a.mode == annotation::Mode::overwrite;
            const bool all = overwrite && a.region.contains(a.chunk.rect);
            ChunkAccess* first = add_use(out, a.chunk.id, a.write, all);
            if (first && overwrite && !all) add_fresh(*first, a.region, a.chunk.rect);
          }
        }
      },
      payload);
}

std::string Plan::to_dot() const {
  std::string s = "digraph plan {\n  node [shape=box, fontname=\"monospace\"];\n";
  for (const Task& t : tasks) {
    std::string label = fmt::format("{} {}\\ndevice {}", t.kind(), t.id, t.device);
    if (auto* e = std::get_if<Execute>(&t.payload))
      label += fmt::format("\\n{} blocks {}", e->executable ? e->executable->name() : "?",
                           e->blocks.str());
    if (auto* c = std::get_if<Copy>(&t.payload))
      label += fmt::format("\\nchunk {} -> {}\\n{}", c->src.id, c->dst.id, c->region.str());
    s += fmt::format("  t{} [label=\"{}\"];\n", t.id, label);
    for (TaskId d : t.deps) s += fmt::format("  t{} -> t{};\n", d, t.id);
  }
  return s + "}\n";
}

}  // namespace gridspan::plan
