// What the cpu and cuda JITs share: naming the user's file and views in generated wrappers,
// the content hash that keys the compiled-kernel cache, the cache folder and its atomic
// writes, and picking the compiler's messages about the user's source.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "annotation/signature.hpp"
#include "backend/device.hpp"

namespace gridspan::backend::jit {

struct Identifier {
  std::string_view text;
  int line;
};
/// Every identifier of `source` outside comments, string and character literals, with its
/// line (1-based). Numbers are skipped whole, so `1'000` and `0x1fULL` are not identifiers.
std::vector<Identifier> identifiers(std::string_view source);
/// True when `source` uses the identifier `name` (outside comments and literals).
bool uses_identifier(std::string_view source, std::string_view name);

/// The user's file name as a #line directive takes it.
std::string file_name(const KernelSource& k);
/// The view type a parameter is passed as: "::gridspan::Matrix<float>".
std::string view_type(const ParamInfo& p);

/// A 128-bit content hash (two independent 64-bit FNV-style streams) as 32 hex digits; for
/// cache keys, where only accidental collisions matter.
class Hasher {
 public:
  void add(std::string_view s);
  std::string hex() const;

 private:
  uint64_t a_ = 0xcbf29ce484222325ull;
  uint64_t b_ = 0x84222325cbf29ce4ull;
};

bool make_dirs(const std::string& path, mode_t mode = 0755);
bool file_exists(const std::string& path);
/// ".<pid>.<n>.<random>.tmp": a name no other thread or process picks.
std::string unique_suffix();
/// Writes `content` to `path` atomically (a private temporary, then rename), so concurrent
/// processes never see a half-written file. Throws CompileError.
void write_file_atomically(const std::string& path, std::string_view content);
/// Reads a whole file; false when it cannot.
bool read_file(const std::string& path, std::string& out);
/// The cache folder: `configured`, else ~/.cache/gridspan, else a private folder in $TMPDIR.
std::string resolve_cache_root(const std::string& configured);

/// The compiler's messages about the user's file and the generated wrapper (with their
/// context lines), in order; failing that, the start of the output. Understands both
/// "file:12:5: error" (gcc, clang) and "file(12): error" (nvrtc).
std::string user_messages(const std::string& output, const std::string& file,
                          const std::string& wrapper_file);
/// True when the first error the compiler reports is in the generated wrapper: the kernel's
/// signature does not take the parameters gridspan passes.
bool wrapper_error_first(const std::string& output, const std::string& file,
                         const std::string& wrapper_file);
/// The advice for wrapper_error_first: the signature gridspan calls.
std::string signature_advice(const KernelSource& k);

}  // namespace gridspan::backend::jit
