// `gridspan annotate`: evaluates an annotation for every superblock of a launch and prints
// one line per superblock (format in the README).
#include <cstdio>
#include <map>

#include <fmt/format.h>

#include "annotation/annotation.hpp"
#include "cli/commands.hpp"
#include "gridspan/core/error.hpp"
#include "gridspan/distribution/distribution.hpp"

namespace gridspan::cli {

namespace {

Dim to_dim(const std::vector<long long>& v, const char* what) {
  if (v.empty() || v.size() > 3)
    throw Error(fmt::format("--{} takes 1 to 3 comma-separated extents, got {}", what, v.size()));
  Dim d = Dim::of_rank(static_cast<int>(v.size()), 0);
  for (std::size_t a = 0; a < v.size(); ++a) {
    if (v[a] <= 0) throw Error(fmt::format("--{}: extents must be positive, got {}", what, v[a]));
    d[static_cast<int>(a)] = v[a];
  }
  return d;
}

std::pair<std::string, std::string> split(const std::string& s, const char* what) {
  auto eq = s.find('=');
  if (eq == std::string::npos || eq == 0)
    throw Error(fmt::format("--{} '{}': write NAME=VALUE", what, s));
  return {s.substr(0, eq), s.substr(eq + 1)};
}

long long to_int(const std::string& s, const std::string& what) {
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end) throw Error(fmt::format("{}: '{}' is not an integer", what, s));
  return v;
}

}  // namespace

int run_annotate(const AnnotateOptions& o) {
  Dim threads = to_dim(o.threads, "threads"), block = to_dim(o.block, "block"),
      per = to_dim(o.superblock, "superblock");
  if (block.rank() != threads.rank() || per.rank() != threads.rank())
    throw Error(
        fmt::format("--threads {}, --block {} and --superblock {} must have the same number "
                    "of axes",
                    threads.str(), block.str(), per.str()));
  std::vector<ParamInfo> params;
  std::vector<Dim> shapes;
  for (const auto& a : o.arrays) {
    auto [name, dims] = split(a, "array");
    std::vector<long long> extents;
    std::size_t pos = 0;
    if (dims.empty() || dims == "[]") pos = dims.size() + 1;  // a 0-d array: no extents
    while (pos <= dims.size()) {
      auto comma = dims.find(',', pos);
      std::string part =
          dims.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      extents.push_back(to_int(part, "--array " + name));
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
    ParamInfo p;
    p.name = name;
    p.is_array = true;
    p.rank = static_cast<int>(extents.size());
    p.dtype = DType::f32;
    p.type_text = fmt::format("array of rank {}", p.rank);
    if (extents.size() > 3) throw Error(fmt::format("--array {}: at most 3 extents", name));
    Dim shape = Dim::of_rank(p.rank, 0);
    for (int k = 0; k < p.rank; ++k) shape[k] = extents[k];
    params.push_back(p);
    shapes.push_back(shape);
  }
  std::map<std::string, long long> defines;
  for (const auto& c : o.consts) {
    auto [name, value] = split(c, "const");
    defines[name] = to_int(value, "--const " + name);
  }
  auto ann = annotation::Annotation::parse(o.annotation, params, defines);
  auto bound = ann.bind(annotation::LaunchGeometry{threads, block},
                        std::vector<int64_t>(params.size(), 0), shapes);
  std::vector<annotation::Access> accesses;
  for (const Superblock& sb : work::tiles(per).superblocks(threads, block, 1)) {
    bound.regions(sb.blocks, accesses);
    Rect range = sb.blocks;
    for (int a = 0; a < range.rank; ++a) {
      range.lo[a] = sb.blocks.lo[a] * block[a];
      range.hi[a] = std::min<int64_t>(sb.blocks.hi[a] * block[a], threads[a]);
    }
    std::printf("%s\n", annotation::describe_superblock(range, accesses, params).c_str());
  }
  return 0;
}

}  // namespace gridspan::cli
