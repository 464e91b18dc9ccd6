// parse_signature: reads a kernel's parameters from its own `__device__ void f(dim3, ...)`
// declaration. Comments, string literals and preprocessor lines are blanked first (keeping
// every offset, so errors quote the user's line with a caret), then a small tokenizer finds
// the declaration and splits its parameter list.
#include "annotation/signature.hpp"

#include <algorithm>
#include <cctype>
#include <set>

#include <fmt/format.h>

#include "annotation/detail.hpp"
#include "gridspan/core/error.hpp"

namespace gridspan::annotation {
namespace {

bool ident_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}
bool ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

/// `source` with comments, string/char literals and preprocessor lines replaced by spaces
/// (newlines kept), so offsets and line numbers stay those of the user's text.
std::string blank_non_code(const std::string& s) {
  std::string out = s;
  const std::size_t n = s.size();
  auto blank = [&](std::size_t i) {
    if (out[i] != '\n') out[i] = ' ';
  };
  bool line_start = true;
  std::size_t i = 0;
  while (i < n) {
    const char c = s[i];
    if (c == '\n') {
      line_start = true;
      ++i;
      continue;
    }
    if (line_start && c == '#') {  // a directive, with its backslash continuations
      while (i < n && s[i] != '\n') {
        if (s[i] == '\\' && i + 1 < n && s[i + 1] == '\n') {
          blank(i);
          i += 2;
          continue;
        }
        blank(i++);
      }
      continue;
    }
    if (!std::isspace(static_cast<unsigned char>(c))) line_start = false;
    if (c == '/' && i + 1 < n && s[i + 1] == '/') {
      while (i < n && s[i] != '\n') blank(i++);
      continue;
    }
    if (c == '/' && i + 1 < n && s[i + 1] == '*') {
      blank(i++);
      blank(i++);
      while (i < n && !(s[i] == '*' && i + 1 < n && s[i + 1] == '/')) blank(i++);
      for (int k = 0; k < 2 && i < n; ++k) blank(i++);
      continue;
    }
    if (c == 'R' && i + 1 < n && s[i + 1] == '"' && (i == 0 || !ident_char(s[i - 1]))) {
      // Raw string R"delim( ... )delim".
      std::size_t open = s.find('(', i + 2);
      if (open != std::string::npos) {
        std::string close = ")" + s.substr(i + 2, open - i - 2) + "\"";
        std::size_t end = s.find(close, open);
        end = end == std::string::npos ? n : end + close.size();
        while (i < end) blank(i++);
        continue;
      }
    }
    const bool digit_separator =
        c == '\'' && i > 0 && std::isalnum(static_cast<unsigned char>(s[i - 1]));
    if ((c == '"' || c == '\'') && !digit_separator) {
      blank(i++);
      while (i < n && s[i] != c && s[i] != '\n') {
        if (s[i] == '\\' && i + 1 < n) blank(i++);
        blank(i++);
      }
      if (i < n && s[i] == c) blank(i++);
      continue;
    }
    ++i;
  }
  return out;
}

struct SigToken {
  bool ident = false;
  std::string text;
  std::size_t pos = 0;
  std::size_t end() const { return pos + text.size(); }
};

std::vector<SigToken> tokenize(const std::string& clean) {
  std::vector<SigToken> out;
  std::size_t i = 0;
  while (i < clean.size()) {
    const char c = clean[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    SigToken t;
    t.pos = i;
    std::size_t j = i + 1;
    if (ident_start(c)) {
      while (j < clean.size() && ident_char(clean[j])) ++j;
      t.ident = true;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      while (j < clean.size() && (ident_char(clean[j]) || clean[j] == '.')) ++j;
    } else if ((c == ':' || c == '&') && j < clean.size() && clean[j] == c) {
      ++j;  // "::", "&&"
    }
    t.text = clean.substr(i, j - i);
    out.push_back(std::move(t));
    i = j;
  }
  return out;
}

bool is_view_name(const std::string& s) {
  return s == "Scalar" || s == "Vector" || s == "Matrix" || s == "Tensor";
}

int view_rank(const std::string& s) {
  return s == "Scalar" ? 0 : s == "Vector" ? 1 : s == "Matrix" ? 2 : 3;
}

bool is_type_word(const std::string& s) {
  static const std::set<std::string> words = {"int",    "long",   "short",    "char",
                                              "float",  "double", "bool",     "unsigned",
                                              "signed", "const",  "volatile", "void"};
  return words.count(s) > 0;
}

/// Reads one kernel's signature out of the cleaned source.
class SignatureReader {
 public:
  SignatureReader(const std::string& source, const std::string& function)
      : source_(source),
        function_(function),
        clean_(blank_non_code(source)),
        toks_(tokenize(clean_)) {}

  std::vector<ParamInfo> read() {
    std::size_t name = find_declaration();
    const std::size_t open = name + 1;
    std::size_t close = open;
    for (int depth = 0; close < toks_.size(); ++close) {
      if (toks_[close].text == "(") ++depth;
      if (toks_[close].text == ")" && --depth == 0) break;
    }
    if (close == toks_.size())
      fail(toks_[open].pos, fmt::format("the parameter list of `{}` is not closed", function_),
           "add the missing `)`");

    // Split at the commas outside (), <>, [] and {}.
    std::vector<std::pair<std::size_t, std::size_t>> ranges;
    std::size_t begin = open + 1;
    int depth = 0;
    for (std::size_t k = open + 1; k < close; ++k) {
      const std::string& t = toks_[k].text;
      if (t == "(" || t == "<" || t == "[" || t == "{") ++depth;
      if (t == ")" || t == ">" || t == "]" || t == "}") --depth;
      if (t == "," && depth == 0) {
        ranges.emplace_back(begin, k);
        begin = k + 1;
      }
    }
    if (begin < close || !ranges.empty()) ranges.emplace_back(begin, close);

    check_block_index(ranges.empty() ? std::make_pair(open + 1, open + 1) : ranges[0], close);
    std::vector<ParamInfo> params;
    for (std::size_t r = 1; r < ranges.size(); ++r)
      params.push_back(read_param(ranges[r].first, ranges[r].second, static_cast<int>(r)));
    for (std::size_t a = 0; a < params.size(); ++a)
      for (std::size_t b = 0; b < a; ++b)
        if (params[a].name == params[b].name)
          fail(toks_[ranges[a + 1].first].pos,
               fmt::format("two parameters of `{}` are named `{}`", function_, params[a].name),
               "give every parameter its own name");
    return params;
  }

 private:
  [[noreturn]] void fail(std::size_t pos, const std::string& problem,
                         const std::string& fix) const {
    const auto line = 1 + std::count(source_.begin(), source_.begin() + pos, '\n');
    std::string msg =
        fmt::format("kernel signature error (line {} of the kernel source): {}", line, problem) +
        detail::quote_with_caret(source_, pos);
    if (!fix.empty()) msg += "\n  " + fix;
    throw CompileError(msg);
  }

  /// The cleaned source text of tokens [b, e) with whitespace runs collapsed.
  std::string text_of(std::size_t b, std::size_t e) const {
    if (b >= e) return "";
    std::string raw = clean_.substr(toks_[b].pos, toks_[e - 1].end() - toks_[b].pos), out;
    for (char c : raw) {
      if (std::isspace(static_cast<unsigned char>(c))) {
        if (!out.empty() && out.back() != ' ') out += ' ';
      } else {
        out += c;
      }
    }
    return out;
  }

  /// Index of the name token of `function`'s __device__ declaration (a definition if
  /// there is one).
  std::size_t find_declaration() const {
    static const std::set<std::string> statement_words = {
        "return", "else", "do", "case", "goto", "throw", "new", "delete", "co_return"};
    std::size_t device = toks_.size(), definition = toks_.size(), other = toks_.size();
    for (std::size_t i = 0; i + 1 < toks_.size(); ++i) {
      if (!toks_[i].ident || toks_[i].text != function_ || toks_[i + 1].text != "(") continue;
      bool is_device = false, is_declaration = i > 0 && toks_[i - 1].ident;
      for (std::size_t j = i; j > 0 && toks_[j - 1].ident; --j) {
        is_device |= toks_[j - 1].text == "__device__";
        is_declaration &= statement_words.count(toks_[j - 1].text) == 0;
      }
      if (!is_declaration) continue;  // a call
      if (!is_device) {
        if (other == toks_.size()) other = i;
        continue;
      }
      if (device == toks_.size()) device = i;
      if (definition == toks_.size() && follows_body(i)) definition = i;
    }
    std::size_t found = definition != toks_.size() ? definition : device;
    if (found == toks_.size()) {
      if (other != toks_.size())
        fail(toks_[other].pos, fmt::format("`{}` is not declared `__device__`", function_),
             fmt::format("declare the kernel as `__device__ void {}(dim3 blockIdx, ...)`; "
                         "gridspan generates the __global__ wrapper itself",
                         function_));
      std::string names;
      for (const auto& n : device_functions()) names += (names.empty() ? "" : ", ") + n;
      throw CompileError(fmt::format(
          "kernel signature error: function `{}` not found in the kernel source (its __device__ "
          "functions are: {})\n  declare it as `__device__ void {}(dim3 blockIdx, ...)`",
          function_, names.empty() ? "none" : names, function_));
    }
    const SigToken& ret = toks_[found - 1];
    if (ret.text != "void")
      fail(ret.pos,
           fmt::format("`{}` returns `{}`; a gridspan kernel returns void", function_, ret.text),
           fmt::format("declare it as `__device__ void {}(dim3 blockIdx, ...)` and write results "
                       "into array parameters",
                       function_));
    return found;
  }

  /// True when the parameter list opened after token `name` is followed by a body.
  bool follows_body(std::size_t name) const {
    int depth = 0;
    for (std::size_t k = name + 1; k < toks_.size(); ++k) {
      if (toks_[k].text == "(") ++depth;
      if (toks_[k].text == ")" && --depth == 0) {
        for (std::size_t m = k + 1; m < toks_.size(); ++m) {
          if (toks_[m].text == "{") return true;
          if (toks_[m].text == ";") return false;
        }
        return false;
      }
    }
    return false;
  }

  std::vector<std::string> device_functions() const {
    std::vector<std::string> names;
    for (std::size_t k = 0; k < toks_.size(); ++k) {
      if (toks_[k].text != "__device__") continue;
      std::size_t m = k + 1;
      while (m < toks_.size() && (toks_[m].ident || toks_[m].text == "::" || toks_[m].text == "*" ||
                                  toks_[m].text == "&"))
        ++m;
      if (m < toks_.size() && toks_[m].text == "(" && m > k + 1 && toks_[m - 1].ident &&
          std::find(names.begin(), names.end(), toks_[m - 1].text) == names.end())
        names.push_back(toks_[m - 1].text);
    }
    return names;
  }

  void check_block_index(std::pair<std::size_t, std::size_t> range, std::size_t close) const {
    auto [b, e] = range;
    std::vector<std::string> words;
    bool plain = true;
    for (std::size_t k = b; k < e; ++k) {
      if (!toks_[k].ident)
        plain = false;
      else if (toks_[k].text != "const")
        words.push_back(toks_[k].text);
    }
    if (plain && !words.empty() && words[0] == "dim3" && words.size() <= 2) {
      check_body_index(words.size() == 2 ? words[1] : std::string(), close);
      return;
    }
    std::string found = b < e ? fmt::format("found `{}`", text_of(b, e)) : "found no parameter";
    fail(b < e ? toks_[b].pos : toks_[close].pos,
         fmt::format("the first parameter of `{}` must be `dim3 blockIdx` (the block index "
                     "gridspan passes), {}",
                     function_, found),
         fmt::format("declare the kernel as `__device__ void {}(dim3 blockIdx, ...)`", function_));
  }

  // A body that reads `blockIdx` while the first parameter has another name (or none) reads
  // CUDA's own index, the block's place within one superblock: wrong results, silently.
  void check_body_index(const std::string& name, std::size_t close) const {
    if (name == "blockIdx") return;
    std::size_t k = close + 1;
    while (k < toks_.size() && toks_[k].text != "{" && toks_[k].text != ";") ++k;
    if (k == toks_.size() || toks_[k].text == ";") return;  // a declaration: no body here
    for (int depth = 0; k < toks_.size(); ++k) {
      if (toks_[k].text == "{") ++depth;
      if (toks_[k].text == "}" && --depth == 0) return;
      if (toks_[k].ident && toks_[k].text == "blockIdx")
        fail(toks_[k].pos,
             fmt::format("`{}` reads `blockIdx`, but its first parameter is {}: there "
                         "`blockIdx` is CUDA's own index, the block's place within one "
                         "superblock, not in the launch's grid",
                         function_, name.empty() ? "unnamed" : "named `" + name + "`"),
             fmt::format("name the first parameter `blockIdx` (`__device__ void {}(dim3 "
                         "blockIdx, ...)`){}",
                         function_, name.empty() ? "" : ", or read `" + name + "` instead"));
    }
  }

  ParamInfo read_param(std::size_t b, std::size_t e, int number) const {
    for (std::size_t k = b; k < e; ++k)
      if (toks_[k].text == "=") {  // a default argument plays no part
        e = k;
        break;
      }
    if (b == e)
      fail(toks_[std::min(e, toks_.size() - 1)].pos,
           fmt::format("parameter {} of `{}` is empty", number, function_), "remove the extra `,`");
    for (std::size_t k = b; k < e; ++k) {
      const std::string& t = toks_[k].text;
      if (t == "*")
        fail(toks_[k].pos,
             "pointer parameters are not supported; pass arrays as gridspan::Vector<T> views",
             "declare e.g. `gridspan::Vector<float> x` (`const` for read-only); a view indexes "
             "like a pointer with global indices");
      if (t == "&" || t == "&&")
        fail(toks_[k].pos,
             "reference parameters are not supported; pass scalars by value and arrays as "
             "gridspan::Vector<T> views",
             "drop the `&`");
      if (t == "[")
        fail(toks_[k].pos,
             "array parameters (`x[]`) are pointers, which are not supported; pass arrays as "
             "gridspan::Vector<T> views",
             "declare e.g. `gridspan::Vector<float> x`");
    }

    ParamInfo p;
    std::size_t view = e;
    for (std::size_t k = b; k + 1 < e; ++k)
      if (toks_[k].ident && is_view_name(toks_[k].text) && toks_[k + 1].text == "<") {
        view = k;
        break;
      }
    std::size_t name = e - 1;
    if (view != e) {
      for (std::size_t k = b; k < view; ++k) {
        const std::string& t = toks_[k].text;
        if (t == "const")
          p.is_const = true;
        else if (t == "volatile" || t == "::" || (toks_[k].ident && toks_[k + 1].text == "::"))
          continue;
        else
          fail(toks_[k].pos, fmt::format("unexpected `{}` before `{}<...>`", t, toks_[view].text),
               "write array parameters as `[const] gridspan::Vector<T> name`");
      }
      std::size_t close = view + 2;
      for (int depth = 1; close < e; ++close) {
        if (toks_[close].text == "<") ++depth;
        if (toks_[close].text == ">" && --depth == 0) break;
      }
      if (close >= e)
        fail(toks_[view + 1].pos, fmt::format("`{}<` is not closed", toks_[view].text),
             "add the missing `>`");
      std::string element;
      for (std::size_t k = view + 2; k < close; ++k) {
        if (toks_[k].text == "const") {
          p.is_const = true;
          continue;
        }
        bool glue = toks_[k].text == "::" || (k > view + 2 && toks_[k - 1].text == "::");
        element += (element.empty() || glue ? "" : " ") + toks_[k].text;
      }
      if (!dtype_from_cpp(element, p.dtype))
        fail(toks_[view + 2 < close ? view + 2 : view].pos,
             fmt::format("`{}` is not an element type gridspan knows", element),
             "use an integer, floating-point or bool element type (float, double, int, int64_t, "
             "uint8_t, __half, ...)");
      for (std::size_t k = close + 1; k + 1 < e; ++k) {
        if (toks_[k].text == "const")
          p.is_const = true;
        else if (toks_[k].text != "volatile")
          fail(toks_[k].pos, fmt::format("unexpected `{}` in parameter {}", toks_[k].text, number),
               "write array parameters as `[const] gridspan::Vector<T> name`");
      }
      if (close + 1 >= e || !toks_[e - 1].ident || toks_[e - 1].text == "const")
        fail(toks_[close].pos, fmt::format("parameter {} of `{}` has no name", number, function_),
             "name it; annotations refer to parameters by name");
      p.is_array = true;
      p.rank = view_rank(toks_[view].text);
    } else {
      // A scalar: type words (qualified names joined: std::int64_t) and the name.
      std::vector<std::string> words;
      for (std::size_t k = b; k < e; ++k) {
        const SigToken& t = toks_[k];
        if (!t.ident && t.text != "::")
          fail(t.pos,
               fmt::format("parameter {} of `{}` has type `{}`, which gridspan cannot pass", number,
                           function_, text_of(b, e)),
               "use an integer, floating-point or bool scalar, or gridspan::Scalar/Vector/"
               "Matrix/Tensor<T> for arrays");
        if (t.text == "const") {
          p.is_const = true;
          continue;
        }
        if (t.text == "volatile") continue;
        bool glue = t.text == "::" || (k > b && toks_[k - 1].text == "::");
        if (glue && !words.empty())
          words.back() += t.text;
        else
          words.push_back(t.text);
      }
      auto join = [&](std::size_t n) {
        std::string s;
        for (std::size_t k = 0; k < n; ++k) s += (k ? " " : "") + words[k];
        return s;
      };
      DType all = DType::f32;
      bool named = words.size() >= 2 && !is_type_word(words.back()) &&
                   dtype_from_cpp(join(words.size() - 1), p.dtype);
      if (!named) {
        if (!words.empty() && dtype_from_cpp(join(words.size()), all))
          fail(toks_[e - 1].pos, fmt::format("parameter {} of `{}` has no name", number, function_),
               "name it; annotations refer to parameters by name");
        fail(toks_[b].pos,
             fmt::format("parameter {} of `{}` has type `{}`, which gridspan cannot pass", number,
                         function_, text_of(b, words.size() >= 2 ? e - 1 : e)),
             "use an integer, floating-point or bool scalar, or gridspan::Scalar/Vector/"
             "Matrix/Tensor<T> for arrays");
      }
    }
    p.name = toks_[name].text;
    p.type_text = text_of(b, name);
    return p;
  }

  const std::string& source_;
  const std::string& function_;
  std::string clean_;
  std::vector<SigToken> toks_;
};

}  // namespace

std::vector<ParamInfo> parse_signature(const std::string& source, const std::string& function) {
  return SignatureReader(source, function).read();
}

}  // namespace gridspan::annotation
