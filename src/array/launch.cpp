// Running Programs: the array library's per-context state (compiled kernels by the shape of
// their expression, the pending arrays a synchronize launches), the launch geometry of a
// generated kernel (its block, its superblocks along the target's chunks) and the launch
// itself, through the public Kernel::launch_packed like any user kernel.
#include <map>
#include <numeric>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>

#include "array/launch.hpp"
#include "backend/jit.hpp"
#include "plan/planner.hpp"
#include "runtime/driver.hpp"

namespace gridspan::array {

namespace {

ElementwiseTestHooks* g_hooks = nullptr;  // tests only

// Keeps a list of weak references short: drops the ones gone or no longer pending.
void add_weak(std::vector<std::weak_ptr<ArrayHandle>>& list, std::size_t& kept,
              const std::shared_ptr<ArrayHandle>& h) {
  list.push_back(h);
  if (list.size() <= 2 * kept + 16) return;
  std::erase_if(list, [](const std::weak_ptr<ArrayHandle>& w) {
    auto p = w.lock();
    return !p || !p->pending.load(std::memory_order_acquire);
  });
  kept = list.size();
}

class Library final : public runtime::LibraryState {
 public:
  static Library& of(const std::shared_ptr<runtime::Driver>& driver) {
    auto& slot = driver->library_state();
    if (!slot) slot = std::make_shared<Library>();
    return static_cast<Library&>(*slot);
  }

  void settle_pending() override {
    std::lock_guard lock(detail::lazy_mutex());
    std::vector<std::weak_ptr<ArrayHandle>> pending;
    pending.swap(pending_);
    kept_ = 0;
    for (auto& w : pending)
      if (auto h = w.lock()) detail::array_settle(*h);
  }

  void add_pending(const std::shared_ptr<ArrayHandle>& h) { add_weak(pending_, kept_, h); }

  // Small results' arrays are kept when their last handle goes and handed to the next result
  // of their dtype and shape (distributed alike by default): a small call then skips the
  // runtime's array creation, first allocation and release, as CuPy's memory pool does.
  static constexpr std::size_t kMostBytes = std::size_t(4) << 20;  // per array
  static constexpr std::size_t kMostKept = 64;                     // arrays in all

  bool recycle(std::shared_ptr<plan::ArrayMeta>& meta) override {
    if (kept_arrays_ >= kMostKept) return false;
    spare_[key(meta->dtype, meta->shape)].push_back(std::move(meta));
    ++kept_arrays_;
    return true;
  }

  std::vector<std::shared_ptr<plan::ArrayMeta>> take_kept() override {
    std::vector<std::shared_ptr<plan::ArrayMeta>> all;
    for (auto& [key, metas] : spare_)
      for (auto& m : metas) all.push_back(std::move(m));
    spare_.clear();
    kept_arrays_ = 0;
    return all;
  }

  std::shared_ptr<detail::ArrayStorage> fresh(const std::shared_ptr<runtime::Driver>& driver,
                                              DType dtype, const Dim& shape) {
    auto it = spare_.find(key(dtype, shape));
    std::shared_ptr<detail::ArrayStorage> s;
    if (it != spare_.end() && !it->second.empty()) {
      s = std::make_shared<detail::ArrayStorage>(driver, std::move(it->second.back()));
      it->second.pop_back();
      --kept_arrays_;
    } else {
      s = detail::array_create(driver, dtype, shape,
                               detail::default_distribution(driver, dtype, shape), nullptr)
              ->storage;
    }
    s->recyclable = static_cast<std::size_t>(shape.volume()) * dtype_size(dtype) <= kMostBytes;
    return s;
  }

  const Kernel& kernel(const std::shared_ptr<runtime::Driver>& driver, std::string key,
                       const std::function<KernelDef(const std::string&)>& make) {
    auto it = kernels_.find(key);
    if (it != kernels_.end()) return it->second;
    backend::jit::Hasher hash;
    hash.add(key);
    Kernel k = detail::compile_kernel(driver, make("gs_" + hash.hex().substr(0, 16)));
    return kernels_.emplace(std::move(key), std::move(k)).first->second;
  }

  // A native function, compiled once per key.
  const Kernel& native(const std::shared_ptr<runtime::Driver>& driver, const std::string& key,
                       const std::function<NativeDef()>& make) {
    auto it = kernels_.find(key);
    if (it != kernels_.end()) return it->second;
    return kernels_.emplace(key, detail::compile_native(driver, make())).first->second;
  }

 private:
  std::vector<std::weak_ptr<ArrayHandle>> pending_;
  std::size_t kept_ = 0;
  std::unordered_map<std::string, Kernel> kernels_;
  using Key = std::tuple<DType, int, int64_t, int64_t, int64_t>;
  static Key key(DType d, const Dim& s) { return {d, s.rank(), s.get(0), s.get(1), s.get(2)}; }
  std::map<Key, std::vector<std::shared_ptr<plan::ArrayMeta>>> spare_;
  std::size_t kept_arrays_ = 0;
};

}  // namespace

Dim without(const Dim& d, int axis) {
  Dim out = Dim::of_rank(d.rank() - 1, 1);
  for (int k = 0, j = 0; k < d.rank(); ++k)
    if (k != axis) out[j++] = d[k];
  return out;
}
Dim with_extent(Dim d, int axis, int64_t e) {
  d[axis] = e;
  return d;
}

const Kernel& cached_native(const std::shared_ptr<runtime::Driver>& driver, const std::string& key,
                            const std::function<NativeDef()>& make) {
  return Library::of(driver).native(driver, "native:" + key, make);
}

int64_t pow2_at_least(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// Per array axis, the gcd of the chunk boundaries inside the array (0: none): a block must
// divide it for superblocks to follow the chunks.
std::array<int64_t, kMaxRank> chunk_grain(const plan::ArrayMeta& meta) {
  std::array<int64_t, kMaxRank> g{0, 0, 0};
  for (const plan::ChunkMeta& c : meta.chunks)
    for (int k = 0; k < meta.shape.rank(); ++k) {
      if (c.owned.lo[k] != 0) g[k] = std::gcd(g[k], c.owned.lo[k]);
      if (c.owned.hi[k] != meta.shape[k]) g[k] = std::gcd(g[k], c.owned.hi[k]);
    }
  return g;
}

// 256 threads, the fastest axis first, each axis a power of two dividing its grain. An axis
// shorter than its block (768 in a block of 1024) takes a power of two of at least 128 that
// divides it when there is one (256), so that no block runs a quarter empty.
std::array<int64_t, kMaxRank> choose_block(const Dim& shape,
                                           const std::array<int64_t, kMaxRank>& grain,
                                           int64_t elements) {
  std::array<int64_t, kMaxRank> block{1, 1, 1};
  int64_t left = elements;
  for (int k = shape.rank() - 1; k >= 0; --k) {
    int64_t e = std::min(left, pow2_at_least(shape[k]));
    int64_t dividing = e;
    while (dividing > 128 && shape[k] % dividing != 0) dividing /= 2;
    if (e > shape[k] && shape[k] % dividing == 0) e = dividing;
    while (grain[k] != 0 && grain[k] % e != 0) e /= 2;
    block[k] = e;
    left /= e;
  }
  return block;
}

// Thread-space Dims (x fastest) of an array-axis triple.
Dim thread_dim(const Dim& shape, const std::array<int64_t, kMaxRank>& per_axis) {
  if (shape.rank() == 0) return Dim{1};
  Dim d = Dim::of_rank(shape.rank(), 1);
  for (int k = 0; k < shape.rank(); ++k) d[shape.rank() - 1 - k] = per_axis[k];
  return d;
}

std::pair<std::array<int64_t, kMaxRank>, std::array<int64_t, kMaxRank>> line_threads(
    const Dim& shape, const std::array<int64_t, kMaxRank>& block, int64_t line) {
  const int last = shape.rank() - 1;
  std::array<int64_t, kMaxRank> threads{shape.get(0), shape.get(1), shape.get(2)},
      per_block = block;
  threads[last] = (shape[last] + line - 1) / line;
  per_block[last] = block[last] / line;
  return {threads, per_block};
}

// One superblock per chunk's owned box (in blocks, x fastest), on the chunk's device.
std::vector<Superblock> chunk_superblocks(const plan::ArrayMeta& meta,
                                          const std::array<int64_t, kMaxRank>& block) {
  const int rank = meta.shape.rank();
  std::vector<Superblock> out;
  for (const plan::ChunkMeta& c : meta.chunks) {
    if (rank == 0) return {Superblock{Rect(1, {0, 0, 0}, {1, 1, 1}), c.device}};
    if (c.owned.empty()) continue;
    Rect r(rank, {0, 0, 0}, {1, 1, 1});
    for (int k = 0; k < rank; ++k) {
      const int t = rank - 1 - k;
      r.lo[t] = c.owned.lo[k] / block[k];
      r.hi[t] = (c.owned.hi[k] + block[k] - 1) / block[k];
    }
    out.push_back(Superblock{r, c.device});
  }
  return out;
}

namespace {

// Whether a launch's superblocks are `along`'s chunks (a plain array of the launch's shape
// with a partition of its own): its blocks must then divide them.
bool follows_chunks(const ArrayHandle* along) {
  return along && !along->is_view && along->meta().owned_partition;
}

// Superblocks along the chunks of `along`, else slices of the slowest axis, one per device.
// `block` counts elements; a thread runs `line` elements of the last axis.
WorkDistribution work_for(const Dim& shape, const ArrayHandle* along,
                          const std::array<int64_t, kMaxRank>& block, int devices, int64_t line) {
  if (follows_chunks(along))
    return work::custom("array", [sb = chunk_superblocks(along->meta(), block)](
                                     const Dim&, const Dim&, int) { return sb; });
  std::array<int64_t, kMaxRank> tile{1, 1, 1};
  for (int k = 0; k < shape.rank(); ++k) tile[k] = (shape[k] + block[k] - 1) / block[k] * block[k];
  if (shape.rank() > 0) {
    const int64_t per = (shape[0] + devices - 1) / devices;
    tile[0] = std::max<int64_t>(block[0], (per + block[0] - 1) / block[0] * block[0]);
    tile[shape.rank() - 1] /= line;  // a multiple of block's last axis, which is `line`
  }
  return work::tiles(thread_dim(shape, tile));
}

}  // namespace

const Kernel& cached_kernel(const std::shared_ptr<runtime::Driver>& driver, std::string key,
                            const std::function<KernelDef(const std::string&)>& make) {
  if (!g_hooks) return Library::of(driver).kernel(driver, std::move(key), make);
  return Library::of(driver).kernel(driver, std::move(key), [&](const std::string& name) {
    KernelDef def = make(name);
    g_hooks->generated.push_back(def);
    return def;
  });
}

void track_pending(const std::shared_ptr<ArrayHandle>& h) {
  Library::of(h->driver).add_pending(h);
  const auto* node = static_cast<const Node*>(h->producer.get());
  for (const Input& in : node->inputs) {
    if (!in.array) continue;
    if (in.array->pending.load(std::memory_order_acquire))
      add_weak(in.array->pending_dependents, in.array->dependents_kept, h);
    else
      add_weak(in.array->storage->pending_readers, in.array->storage->readers_kept, h);
  }
}

namespace {

// A GPU thread's elements in the unrolled kernels: 4 (16 bytes of float32 per thread in
// flight at once), in blocks of 1024 elements (256 threads).
// Eight a thread, or blocks of 2048 or 4096 elements, were slower for the activations.
constexpr int kUnrolled = 4;
constexpr int64_t kUnrolledBlock = 1024;

// A launch's block (in elements): 256, or 1024 for the unrolled kernels, never straddling
// the chunks the superblocks follow (a fresh array's too: its rows are cut for blocks of 256,
// not 1024).
std::array<int64_t, kMaxRank> element_block(const Dim& shape, const ArrayHandle* along,
                                            int unrolled) {
  return choose_block(
      shape, follows_chunks(along) ? chunk_grain(along->meta()) : std::array<int64_t, 3>{0, 0, 0},
      unrolled ? kUnrolledBlock : 256);
}

// Whether a block of the unrolled kernels is at least a warp of kUnrolled-element lines wide.
bool unrolled_fits(const Dim& shape, const std::array<int64_t, kMaxRank>& block) {
  if (shape.rank() == 0) return false;
  const int64_t width = block[shape.rank() - 1];
  return width % kUnrolled == 0 && width / kUnrolled >= 32;
}

// An access of the vector variant: an array (not a view), its own last axis walking the
// program's (a `walking` one) or none of its axes doing so (broadcast along it).
bool vector_access(const Leaf& l, int last, bool& walking) {
  if (l.general || l.linear) return false;
  walking = false;
  for (int b = 0; b < l.rank; ++b)
    if (l.follows[b] == last) {
      if (b != l.rank - 1) return false;
      walking = true;
    }
  return true;
}

// Whether every chunk of a walking access cuts its last axis at multiples of u.
bool chunks_aligned(const Leaf& l, int64_t u) {
  const int b = l.rank - 1;
  for (const plan::ChunkMeta& c : l.storage->meta->chunks)
    if (c.region.lo[b] % u != 0 || (c.region.hi[b] - c.region.lo[b]) % u != 0) return false;
  return true;
}

// The elements a thread of the vector variant runs (0: no vector variant): 16 bytes of the
// widest walking access, halved until the last axis, the block and every chunk's cut along
// it are multiples of it, with a warp's worth of threads a block.
int vector_elements(const Program& p, const std::array<int64_t, kMaxRank>& block) {
  const int last = p.shape.rank() - 1;
  if (last < 0) return 0;
  std::vector<const Leaf*> walking;
  std::size_t widest = 1;
  std::vector<const Leaf*> accesses{&p.target.access};
  for (const Leaf& l : p.leaves) accesses.push_back(&l);
  for (const Leaf* l : accesses) {
    bool walks = false;
    if (!vector_access(*l, last, walks)) return 0;
    if (!walks) continue;
    walking.push_back(l);
    widest = std::max(widest, dtype_size(l->dtype));
  }
  if (walking.empty() || walking[0] != &p.target.access) return 0;  // the target walks
  for (int64_t u = 16 / static_cast<int64_t>(widest); u >= 2; u /= 2) {
    if (p.shape[last] % u != 0 || block[last] % u != 0 || block[last] / u < 32) continue;
    if (std::all_of(walking.begin(), walking.end(),
                    [&](const Leaf* l) { return chunks_aligned(*l, u); }))
      return static_cast<int>(u);
  }
  return 0;
}

void launch_blocks(const std::shared_ptr<runtime::Driver>& driver, const Kernel& kernel,
                   const Dim& shape, const ArrayHandle* along,
                   const std::array<int64_t, kMaxRank>& block,
                   const std::vector<detail::LaunchArg>& args, bool looped, int unrolled) {
  const int last = shape.rank() - 1;
  if (!looped || last < 0) {
    const Dim threads = thread_dim(
        shape,
        shape.rank() ? std::array<int64_t, 3>{shape.get(0), shape.get(1), shape.get(2)} : block);
    kernel.launch_packed(threads, thread_dim(shape, block),
                         work_for(shape, along, block, driver->device_count(), 1), args);
    return;
  }
  // A thread per block-wide line of the last axis (blocks one thread wide along it): the
  // same grid of blocks, so the same superblocks.
  const int64_t line = unrolled ? unrolled : block[last];
  const auto [threads, per_block] = line_threads(shape, block, line);
  std::vector<detail::LaunchArg> with_line = args;
  Arguments e;
  e.integer(line);
  e.list_into(with_line);
  kernel.launch_packed(thread_dim(shape, threads), thread_dim(shape, per_block),
                       work_for(shape, along, block, driver->device_count(), line), with_line);
}
}  // namespace

void set_elementwise_test_hooks(ElementwiseTestHooks* hooks) {
  g_hooks = hooks;
}

void launch_elements(const std::shared_ptr<runtime::Driver>& driver, const Kernel& kernel,
                     const Dim& shape, const ArrayHandle* along,
                     const std::vector<detail::LaunchArg>& args) {
  launch_blocks(driver, kernel, shape, along, element_block(shape, along, 0), args, false, 0);
}

void launch_program(const std::shared_ptr<runtime::Driver>& driver, Program& p) {
  ArrayHandle& target = *p.target.handle;
  const bool cpu = driver->backend_name() == "cpu";
  if (p.target.fresh) {
    target.storage = Library::of(driver).fresh(driver, p.dtype, p.shape);
    p.target.access.storage = target.storage;
  }
  p.unrolled = 0;
  p.vector = false;
  std::array<int64_t, kMaxRank> block{};
  if (!cpu || (g_hooks && g_hooks->unroll_on_cpu)) {
    block = element_block(p.shape, &target, kUnrolled);
    if (unrolled_fits(p.shape, block)) {
      const int v = vector_elements(p, block);
      p.vector = v > 0;
      p.unrolled = p.vector ? v : kUnrolled;
    }
  }
  if (!p.unrolled) block = element_block(p.shape, &target, 0);
  p.looped = cpu || p.unrolled > 0;
  const Kernel& kernel = cached_kernel(driver, p.key(), [&](const std::string& name) {
    return KernelDef::from_source(p.source(name), name).annotate(p.annotation());
  });
  Arguments args;
  args.shape(p.shape);
  args.view(p.target.access);
  for (const Leaf& l : p.leaves) args.view(l);
  for (const Scalar& s : p.scalars) args.scalar(s);
  launch_blocks(driver, kernel, p.shape, &target, block, args.list(), p.looped, p.unrolled);
}

}  // namespace gridspan::array
