// make_cuda_backend: every GPU with peer access between them, the built-in kernels loaded
// on each, and user kernels compiled once per architecture and loaded on every GPU.
#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include <fmt/format.h>

#include "backend/cuda/cuda.hpp"
#include "backend/cuda/device.hpp"
#include "backend/jit.hpp"
#include "core/bytes.hpp"
#include "core/log.hpp"
#include "gridspan/core/error.hpp"

namespace gridspan::backend::cuda {

namespace {

class CudaKernel final : public CompiledKernel {
 public:
  CudaKernel(const DriverApi& api, const KernelSource& k, std::vector<CudaDevice*> devices)
      : api_(api), name_(k.name), parts_(parts_capacity(k.params)), devices_(std::move(devices)) {
    modules_.resize(devices_.size());
    functions_.resize(devices_.size());
    origin_functions_.resize(devices_.size());
    parts_functions_.resize(devices_.size());
    max_threads_.resize(devices_.size());
  }
  ~CudaKernel() override {
    for (std::size_t d = 0; d < devices_.size(); ++d) {
      if (!modules_[d]) continue;
      devices_[d]->bind();  // a module goes in the context it was loaded in
      modules_[d].reset();
    }
  }

  void load(std::size_t d, const std::string& cubin) {
    CudaDevice& dev = *devices_[d];
    dev.bind();
    modules_[d] = Module(api_, cubin, fmt::format("kernel `{}`", name_), dev.name());
    functions_[d] = modules_[d].function(GRIDSPAN_CUDA_ENTRY_NAME, dev.name());
    origin_functions_[d] = modules_[d].function(GRIDSPAN_CUDA_ORIGIN_ENTRY_NAME, dev.name());
    int a = 0, c = 1 << 30, o = 0;
    api_.cuFuncGetAttribute(&a, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, functions_[d]);
    api_.cuFuncGetAttribute(&o, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, origin_functions_[d]);
    if (parts_ > 1) {
      parts_functions_[d] = modules_[d].function(GRIDSPAN_CUDA_PARTS_ENTRY_NAME, dev.name());
      api_.cuFuncGetAttribute(&c, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, parts_functions_[d]);
    }
    max_threads_[d] = std::min({a, c, o});
  }

  // One superblock; one with more blocks along an axis than a grid may have (2^31 - 1 on
  // x, 65535 on y and z) goes as several launches of at most that many, each through the
  // plain entry with its own origin.
  void run(const GsLaunch& launch, Device& device) const override {
    auto& dev = static_cast<CudaDevice&>(device);
    const std::size_t d = static_cast<std::size_t>(dev.index());
    const GsCudaHeader whole = header_of(launch);
    for (int ax = 0; ax < 3; ++ax)
      if (whole.blocks[ax] <= 0) return;  // an empty superblock
    unsigned block[3];
    check_block(launch, dev, block);
    GsCudaHeader h = whole;  // each piece's, in turn
    void* small[17];
    std::vector<void*> heap;
    void** params = small;
    const std::size_t n = static_cast<std::size_t>(launch.num_params);
    if (n + 1 > 17) heap.resize(n + 1), params = heap.data();
    params[0] = &h;
    for (std::size_t p = 0; p < n; ++p)
      params[p + 1] = launch.scalars[p] ? const_cast<void*>(launch.scalars[p])
                                        : const_cast<GsArrayArg*>(&launch.arrays[p]);
    LaunchLabel label;
    label.kernel = &name_;
    for (int ax = 0; ax < 3; ++ax)
      label.lo[ax] = launch.block_lo[ax], label.hi[ax] = launch.block_hi[ax];
    constexpr int64_t limit[3] = {0x7FFFFFFF, 65535, 65535};
    int64_t at[3];
    for (at[2] = 0; at[2] < whole.blocks[2]; at[2] += limit[2])
      for (at[1] = 0; at[1] < whole.blocks[1]; at[1] += limit[1])
        for (at[0] = 0; at[0] < whole.blocks[0]; at[0] += limit[0]) {
          unsigned grid[3];
          for (int ax = 0; ax < 3; ++ax) {
            h.block_lo[ax] = whole.block_lo[ax] + at[ax];
            h.blocks[ax] = std::min(limit[ax], whole.blocks[ax] - at[ax]);
            grid[ax] = static_cast<unsigned>(h.blocks[ax]);
          }
          const bool origin = h.block_lo[0] == 0 && h.block_lo[1] == 0 && h.block_lo[2] == 0;
          dev.launch(origin ? origin_functions_[d] : functions_[d], grid, block, params, label);
        }
  }

  // Superblocks of one launch as parts of one kernel launch, as many at a time as the
  // parts entry takes.
  void run_batch(const GsLaunch* launches, std::size_t n, Device& device) const override {
    if (parts_ < 2) return CompiledKernel::run_batch(launches, n, device);
    for (std::size_t at = 0; at < n; at += static_cast<std::size_t>(parts_)) {
      const std::size_t m = std::min(n - at, static_cast<std::size_t>(parts_));
      if (m == 1)
        run(launches[at], device);
      else
        run_parts(launches + at, m, static_cast<CudaDevice&>(device));
    }
  }

 private:
  static GsCudaHeader header_of(const GsLaunch& launch) {
    GsCudaHeader h{};
    for (int ax = 0; ax < 3; ++ax) {
      h.block_lo[ax] = launch.block_lo[ax];
      h.blocks[ax] = launch.block_hi[ax] - launch.block_lo[ax];
      h.grid_dim[ax] = launch.grid_dim[ax];
    }
    h.check = launch.check;
    return h;
  }

  // The block's dimensions, checked against what the kernel can run on this device.
  void check_block(const GsLaunch& launch, CudaDevice& dev, unsigned block[3]) const {
    int64_t threads = 1;
    for (int ax = 0; ax < 3; ++ax) {
      block[ax] = launch.block_dim[ax];
      threads *= launch.block_dim[ax];
    }
    const int max = max_threads_[static_cast<std::size_t>(dev.index())];
    if (threads > max)
      throw LaunchError(fmt::format(
          "kernel `{}`: a block of {} threads is more than this kernel can run on {} ({} "
          "threads per block, limited by its registers or its launch_bounds); launch smaller "
          "blocks",
          name_, threads, dev.name(), max));
  }

  // The table of abi.h for `m` parts: first[parts_ + 1] (each part's first z index in the
  // grid), then each part's header and array arguments. The grid is the largest part's x
  // and y extents by every part's z extent; when that passes CUDA's limits, or holds more
  // than twice the parts' blocks, they go one by one.
  void run_parts(const GsLaunch* launches, std::size_t m, CudaDevice& dev) const {
    const std::size_t np = static_cast<std::size_t>(launches[0].num_params);
    std::size_t arrays[16];  // a table of two parts holds at most 16 arrays (abi.h)
    std::size_t na = 0;
    for (std::size_t p = 0; p < np; ++p)
      if (!launches[0].scalars[p]) arrays[na++] = p;
    const std::size_t cap = static_cast<std::size_t>(parts_);
    const std::size_t part_bytes = sizeof(GsCudaHeader) + na * sizeof(GsArrayArg);
    alignas(8) unsigned char table[4096];
    auto* first = reinterpret_cast<int64_t*>(table);
    unsigned char* part = table + 8 * (cap + 1);
    LaunchLabel label;
    label.kernel = &name_;
    int64_t x = 0, y = 0, z = 0, blocks = 0;
    for (std::size_t k = 0; k < m; ++k, part += part_bytes) {
      GsCudaHeader h = header_of(launches[k]);
      for (int ax = 0; ax < 3; ++ax) h.blocks[ax] = std::max<int64_t>(h.blocks[ax], 0);
      if (h.blocks[0] == 0 || h.blocks[1] == 0) h.blocks[2] = 0;  // an empty part: no z
      first[k] = z;
      x = std::max(x, h.blocks[0]);
      y = std::max(y, h.blocks[1]);
      z += h.blocks[2];
      blocks += h.blocks[0] * h.blocks[1] * h.blocks[2];
      for (int ax = 0; ax < 3; ++ax) {
        label.lo[ax] = k ? std::min(label.lo[ax], h.block_lo[ax]) : h.block_lo[ax];
        label.hi[ax] = std::max(label.hi[ax], h.block_lo[ax] + h.blocks[ax]);
      }
      std::memcpy(part, &h, sizeof h);
      for (std::size_t j = 0; j < na; ++j)
        std::memcpy(part + sizeof h + j * sizeof(GsArrayArg), &launches[k].arrays[arrays[j]],
                    sizeof(GsArrayArg));
    }
    for (std::size_t k = m; k <= cap; ++k) first[k] = z;
    if (blocks == 0) return;
    if (x > 0x7FFFFFFF || y > 65535 || z > 65535 || x * y * z > 2 * blocks) {
      for (std::size_t k = 0; k < m; ++k) run(launches[k], dev);
      return;
    }
    const unsigned grid[3] = {static_cast<unsigned>(x), static_cast<unsigned>(y),
                              static_cast<unsigned>(z)};
    unsigned block[3];
    check_block(launches[0], dev, block);
    int32_t used = static_cast<int32_t>(m);
    void* small[18];
    std::vector<void*> heap;
    void** params = small;
    if (np + 2 > 18) heap.resize(np + 2), params = heap.data();
    params[0] = table;
    params[1] = &used;
    std::size_t at = 2;
    for (std::size_t p = 0; p < np; ++p)
      if (launches[0].scalars[p]) params[at++] = const_cast<void*>(launches[0].scalars[p]);
    dev.launch(parts_functions_[static_cast<std::size_t>(dev.index())], grid, block, params, label);
  }

  const DriverApi& api_;
  std::string name_;
  int parts_;  // superblocks the parts entry takes (0: none)
  std::vector<CudaDevice*> devices_;
  std::vector<Module> modules_;
  std::vector<CUfunction> functions_, origin_functions_, parts_functions_;
  std::vector<int> max_threads_;
};

// Transfer buffers between processes in pinned memory (Bytes' pool): allocated in GPU
// 0's primary context, retained once for the rest of the process, so the buffers outlive
// any one backend. The calling thread's current context is put back afterwards.
const DriverApi* g_pinned_api = nullptr;
CUcontext g_pinned_context = nullptr;

struct InPinnedContext {
  CUcontext saved = nullptr;
  InPinnedContext() {
    g_pinned_api->cuCtxGetCurrent(&saved);
    g_pinned_api->cuCtxSetCurrent(g_pinned_context);
  }
  ~InPinnedContext() { g_pinned_api->cuCtxSetCurrent(saved); }
};

void* pinned_allocate(std::size_t n) {
  InPinnedContext in;
  void* p = nullptr;
  if (g_pinned_api->cuMemHostAlloc(&p, n, CU_MEMHOSTALLOC_PORTABLE) != CUDA_SUCCESS) return nullptr;
  return p;
}
void pinned_release(void* p, std::size_t) {
  InPinnedContext in;
  g_pinned_api->cuMemFreeHost(p);
}
const HostMemory kPinned{pinned_allocate, pinned_release, "pinned (cuMemHostAlloc)"};

void use_pinned_transfer_buffers(const DriverApi& api) {
  static std::once_flag once;
  std::call_once(once, [&] {
    CUdevice device;
    if (api.cuDeviceGet(&device, 0) != CUDA_SUCCESS) return;
    CUcontext context;
    if (api.cuDevicePrimaryCtxRetain(&context, device) != CUDA_SUCCESS) return;
    g_pinned_api = &api;
    g_pinned_context = context;
    use_host_memory(&kPinned);
  });
}

}  // namespace

class CudaBackend final : public Backend {
 public:
  CudaBackend(const DriverApi& api, const Config& config, int first, int count)
      : api_(api), cache_dir_(config.cache_dir) {
    CudaDeviceOptions options;
    options.budget = config.device_memory;
    options.poll_us = config.completion_poll_us;
    options.launch_thread = config.launch_thread;
    options.idle_direct = config.launch_idle_direct;
    for (int d = 0; d < count; ++d) {
      devices_.push_back(std::make_unique<CudaDevice>(api, d, first + d, options));
      devices_.back()->set_owner(this);
    }
    bool peer = true;
    for (auto& a : devices_)
      for (auto& b : devices_)
        if (a != b && !a->enable_peer(*b)) peer = false;
    if (!peer) logging::warn("cuda backend: some GPUs cannot address each other; copies go slower");
    for (auto& d : devices_) d->peer_everywhere_ = peer;
    for (auto& d : devices_) d->load_builtins(builtin_cubin(d->arch(), cache_dir_));
    std::string names;
    for (auto& d : devices_)
      names += fmt::format("{}{} ({} for gridspan)", names.empty() ? "" : ", ", d->name(),
                           format_bytes(d->memory_capacity()));
    logging::info("cuda backend: {}", names);
  }

  std::string name() const override { return "cuda"; }

  std::vector<Device*> devices() override {
    std::vector<Device*> out;
    for (auto& d : devices_) out.push_back(d.get());
    return out;
  }

  std::shared_ptr<CompiledKernel> compile(const KernelSource& k) override {
    const std::string key = generate_wrapper(k) + (k.checked ? "\n//checked" : "");
    {
      std::lock_guard lock(mutex_);
      if (auto it = loaded_.find(key); it != loaded_.end()) return it->second;
    }
    std::vector<CudaDevice*> devices;
    for (auto& d : devices_) devices.push_back(d.get());
    auto kernel = std::make_shared<CudaKernel>(api_, k, devices);
    std::map<int, std::string> cubins;  // per architecture
    for (std::size_t d = 0; d < devices_.size(); ++d) {
      const int arch = devices_[d]->arch();
      if (!cubins.count(arch)) cubins[arch] = compile_cubin(k, arch, cache_dir_);
      kernel->load(d, cubins[arch]);
    }
    std::lock_guard lock(mutex_);
    return loaded_.emplace(key, kernel).first->second;
  }

 private:
  const DriverApi& api_;
  std::string cache_dir_;
  std::vector<std::unique_ptr<CudaDevice>> devices_;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<CompiledKernel>> loaded_;
};

std::unique_ptr<Backend> make_cuda_backend(const Config& config, std::string& why) {
  const DriverApi* api = driver(why);
  if (!api) return nullptr;
  if (!nvrtc(why)) return nullptr;
  int count = 0;
  api->cuDeviceGetCount(&count);
  // Ranks of one node take equal shares of its GPUs, in node-rank order.
  int first = 0;
  if (config.node_ranks > 1 && count > 0) {
    const int share = count / config.node_ranks;
    if (share == 0) {
      why = fmt::format(
          "{} ranks on this node share its {} GPU{}: start at most {} rank{} per node (or set "
          "GRIDSPAN_BACKEND=cpu)",
          config.node_ranks, count, count == 1 ? "" : "s", count, count == 1 ? "" : "s");
      return nullptr;
    }
    first = config.node_rank * share;
    count = share;
  }
  if (config.gpus > 0) count = std::min(count, config.gpus);
  try {
    auto backend = std::make_unique<CudaBackend>(*api, config, first, count);
    use_pinned_transfer_buffers(*api);
    return backend;
  } catch (const Error& e) {
    why = e.what();
    return nullptr;
  }
}

}  // namespace gridspan::backend::cuda
