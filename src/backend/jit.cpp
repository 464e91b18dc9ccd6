// What the cpu and cuda JITs share (see jit.hpp).
#include "backend/jit.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "gridspan/core/dtype.hpp"
#include "gridspan/core/error.hpp"

namespace gridspan::backend::jit {
namespace {

// "file:" (gcc, clang) or "file(" (nvrtc) at the start of a line.
bool starts_with_file(const std::string& line, const std::string& file) {
  return line.size() > file.size() && line.compare(0, file.size(), file) == 0 &&
         (line[file.size()] == ':' || line[file.size()] == '(');
}

}  // namespace

std::vector<Identifier> identifiers(std::string_view s) {
  std::vector<Identifier> out;
  int line = 1;
  auto ident_start = [](char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; };
  auto ident_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  std::size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '\n') {
      ++line;
      ++i;
    } else if (c == '/' && i + 1 < s.size() && s[i + 1] == '/') {
      while (i < s.size() && s[i] != '\n') ++i;
    } else if (c == '/' && i + 1 < s.size() && s[i + 1] == '*') {
      i += 2;
      while (i < s.size() && !(s[i] == '*' && i + 1 < s.size() && s[i + 1] == '/')) {
        if (s[i] == '\n') ++line;
        ++i;
      }
      i += 2;
    } else if (c == '"' || c == '\'') {
      ++i;
      while (i < s.size() && s[i] != c && s[i] != '\n') {
        if (s[i] == '\\' && i + 1 < s.size()) ++i;
        ++i;
      }
      ++i;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      while (i < s.size() && (ident_char(s[i]) || s[i] == '.' || s[i] == '\'')) ++i;
    } else if (ident_start(c)) {
      const std::size_t start = i;
      while (i < s.size() && ident_char(s[i])) ++i;
      std::string_view word = s.substr(start, i - start);
      if (i < s.size() && s[i] == '"' && !word.empty() && word.back() == 'R') {
        // A raw string literal R"delim( ... )delim".
        const std::size_t open = s.find('(', i);
        if (open == std::string_view::npos) break;
        const std::string close = ")" + std::string(s.substr(i + 1, open - i - 1)) + "\"";
        const std::size_t end = s.find(close, open);
        const std::size_t stop = end == std::string_view::npos ? s.size() : end + close.size();
        for (std::size_t k = i; k < stop; ++k) line += s[k] == '\n';
        i = stop;
        continue;
      }
      out.push_back({word, line});
    } else {
      ++i;
    }
  }
  return out;
}

bool uses_identifier(std::string_view source, std::string_view name) {
  for (const auto& id : identifiers(source))
    if (id.text == name) return true;
  return false;
}
std::string file_name(const KernelSource& k) {
  std::string f = k.file.empty() ? k.name + ".cu" : k.file;
  for (char& c : f)
    if (c == '"' || c == '\\' || c == '\n') c = '_';
  return f;
}

std::string view_type(const ParamInfo& p) {
  static const char* views[] = {"Scalar", "Vector", "Matrix", "Tensor"};
  if (p.rank < 0 || p.rank > 3) {
    throw CompileError(
        fmt::format("parameter `{}` has rank {}; gridspan views have rank 0 to 3", p.name, p.rank));
  }
  return fmt::format("::gridspan::{}<{}>", views[p.rank], dtype_cpp_name(p.dtype));
}

void Hasher::add(std::string_view s) {
  for (unsigned char c : s) {
    a_ = (a_ ^ c) * 0x100000001b3ull;
    b_ = ((b_ << 5) | (b_ >> 59)) ^ c;
    b_ *= 0x9E3779B97F4A7C15ull;
  }
  const uint64_t n = s.size();  // so that ("ab","c") and ("a","bc") differ
  for (int i = 0; i < 8; ++i) {
    a_ = (a_ ^ ((n >> (8 * i)) & 0xFF)) * 0x100000001b3ull;
    b_ = (((b_ << 5) | (b_ >> 59)) ^ ((n >> (8 * i)) & 0xFF)) * 0x9E3779B97F4A7C15ull;
  }
}

std::string Hasher::hex() const {
  return fmt::format("{:016x}{:016x}", a_, b_);
}

bool make_dirs(const std::string& path, mode_t mode) {
  std::string prefix;
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    prefix = path.substr(0, pos);
    if (prefix.empty()) continue;
    if (mkdir(prefix.c_str(), mode) != 0 && errno != EEXIST) return false;
  }
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool file_exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string unique_suffix() {
  static std::atomic<unsigned> counter{0};
  thread_local std::mt19937_64 rng(std::random_device{}());
  return fmt::format(".{}.{}.{:x}.tmp", getpid(), counter++, rng() & 0xFFFFFFull);
}

// Writes `content` to `path` atomically (a private temporary, then rename), so concurrent
// processes never see a half-written file.
void write_file_atomically(const std::string& path, std::string_view content) {
  const std::string tmp = path + unique_suffix();
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    if (!out) {
      std::remove(tmp.c_str());
      throw CompileError(
          fmt::format("cannot write {}: {}; set GRIDSPAN_CACHE_DIR to a writable folder", path,
                      std::strerror(errno)));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw CompileError(
        fmt::format("cannot write {}: {}; set GRIDSPAN_CACHE_DIR to a writable folder", path,
                    std::strerror(errno)));
  }
}

std::string resolve_cache_root(const std::string& configured) {
  if (!configured.empty()) {
    if (!make_dirs(configured)) {
      throw CompileError(fmt::format(
          "cannot create the kernel cache folder {}: {}; set GRIDSPAN_CACHE_DIR to a writable "
          "folder",
          configured, std::strerror(errno)));
    }
    return configured;
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    const std::string dir = std::string(home) + "/.cache/gridspan";
    if (make_dirs(dir) && access(dir.c_str(), W_OK) == 0) return dir;
  }
  // A per-user private folder under $TMPDIR, refused if someone else owns it.
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = fmt::format("{}/gridspan-cache-{}", tmp && *tmp ? tmp : "/tmp", getuid());
  mkdir(dir.c_str(), 0700);
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid()) {
    throw CompileError(fmt::format(
        "no usable kernel cache folder: HOME is not writable and {} is not a folder owned by "
        "this user; set GRIDSPAN_CACHE_DIR to a writable folder",
        dir));
  }
  return dir;
}

// The compiler's messages about the user's file and the generated wrapper (with their
// context lines), in order; failing that, the start of the output.
std::string user_messages(const std::string& output, const std::string& file,
                          const std::string& wrapper_file) {
  std::string kept;
  int lines = 0;
  bool keeping = false;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    const bool about = starts_with_file(line, file) || starts_with_file(line, wrapper_file);
    const bool context = !line.empty() && (line[0] == ' ' || line[0] == '\t');
    if (about)
      keeping = true;
    else if (!context)
      keeping = false;
    if (keeping && lines < 60) {
      kept += line + "\n";
      ++lines;
    }
  }
  if (kept.empty()) {
    std::istringstream all(output);
    for (std::string line; std::getline(all, line) && lines < 40; ++lines) kept += line + "\n";
  }
  return kept;
}

// True when the first error the compiler reports is in the generated wrapper: the kernel's
// signature does not take the parameters gridspan passes.
bool wrapper_error_first(const std::string& output, const std::string& file,
                         const std::string& wrapper_file) {
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (line.find(": error") == std::string::npos) continue;
    return starts_with_file(line, wrapper_file) && !starts_with_file(line, file);
  }
  return false;
}

bool read_file(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return static_cast<bool>(in) || in.eof();
}

std::string signature_advice(const KernelSource& k) {
  std::string passed;
  for (const auto& p : k.params) {
    passed += (passed.empty() ? "" : ", ") +
              (p.is_array ? view_type(p).substr(2) : std::string(dtype_cpp_name(p.dtype))) + " " +
              p.name;
  }
  return fmt::format(
      "The kernel's signature does not take what gridspan passes: `{}(dim3 blockIdx{}{})`. "
      "Make the function's parameters match (views by value).",
      k.name, passed.empty() ? "" : ", ", passed);
}

}  // namespace gridspan::backend::jit
