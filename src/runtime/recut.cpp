// Re-cutting an automatic array (Granularity::recuts): a new array of the new cut, filled by
// one launch of a copy (a native function per rank, registered in every process, so that
// the ranks of an mpirun find it by name), one superblock per new chunk. The planner brings
// each superblock the old chunks' parts it reads, as for any launch; the caller puts the new
// array in the old one's place.
#include <cstring>

#include <fmt/format.h>

#include "annotation/annotation.hpp"
#include "runtime/driver.hpp"
#include "runtime/executable.hpp"
#include "runtime/granularity.hpp"

namespace gridspan::runtime {

namespace {

constexpr const char* kCopier[kMaxRank] = {"gs_recut_copy_1", "gs_recut_copy_2", "gs_recut_copy_3"};

// dst and src views of `rank` axes (bytes: the element size is the third, a scalar).
std::vector<ParamInfo> copier_params(int rank) {
  return {ParamInfo{"dst", true, rank, false, DType::u8, "dst"},
          ParamInfo{"src", true, rank, true, DType::u8, "src"},
          ParamInfo{"elem_size", false, 0, false, DType::i64, "int64_t"}};
}

const char* copier_rule(int rank) {
  static const char* rules[kMaxRank] = {
      "global i => overwrite dst[i], read src[i]",
      "global [i, j] => overwrite dst[i, j], read src[i, j]",
      "global [i, j, k] => overwrite dst[i, j, k], read src[i, j, k]"};
  return rules[rank - 1];
}

// Copies its superblock's region of src into dst on its device.
std::shared_ptr<const NativeExecutable> make_copier(int rank) {
  return std::make_shared<NativeExecutable>(
      kCopier[rank - 1], copier_params(rank),
      [](const plan::ExecFrame& f, const GsArrayArg*, const void* const* scalars) {
        const plan::ExecArg& dst = f.exec.arrays[0];
        const plan::ExecArg& src = f.exec.arrays[1];
        const auto elem_size = static_cast<std::size_t>(*static_cast<const int64_t*>(scalars[2]));
        f.dev->copy(f.data[0], dst.chunk.rect, f.data[1], src.chunk.rect, dst.region, elem_size);
      });
}

const bool g_copiers_registered = [] {
  for (int r = 1; r <= kMaxRank; ++r) register_native(make_copier(r));
  return true;
}();

}  // namespace

std::shared_ptr<plan::ArrayMeta> Granularity::recut(const plan::ArrayMeta& old,
                                                    const DataDistribution& dist) {
  (void)g_copiers_registered;
  const int rank = old.shape.rank();
  if (rank < 1) throw Error("internal error: a 0-d array cannot be cut anew");
  std::shared_ptr<const plan::Executable> copier;
  {
    std::lock_guard lock(mutex_);
    if (!copiers_[rank - 1]) {
      copiers_[rank - 1] = find_native(kCopier[rank - 1]);
      driver_.add_executable(copiers_[rank - 1]);
    }
    copier = copiers_[rank - 1];
  }
  auto fresh = driver_.create_array(old.dtype, old.shape, dist, nullptr);
  fresh->automatic = true;
  const std::vector<ParamInfo> params = copier_params(rank);
  const annotation::Annotation rule = annotation::Annotation::parse(copier_rule(rank), params, {});
  plan::LaunchSpec spec;
  spec.executable = copier;
  spec.annotation = &rule;
  spec.params = &params;
  spec.threads = old.shape;
  spec.block = Dim::of_rank(rank, 1);
  for (const plan::ChunkMeta& c : fresh->chunks)  // a replica that owns nothing is copied to
    if (!c.owned.empty()) spec.superblocks.push_back(Superblock{c.owned, c.device});
  spec.arrays = {fresh.get(), &old, nullptr};
  const int64_t elem_size = int64_t(old.elem_size);
  spec.int_scalars = {0, 0, elem_size};
  auto blob = std::make_shared<std::vector<unsigned char>>(8);
  std::memcpy(blob->data(), &elem_size, 8);
  spec.scalars = std::move(blob);
  spec.scalar_offsets = std::make_shared<const std::vector<uint32_t>>(3, 0);
  try {
    driver_.launch(spec);
  } catch (...) {
    driver_.release_array(*fresh);
    throw;
  }
  return fresh;
}

}  // namespace gridspan::runtime
