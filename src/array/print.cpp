// NumPy's str() of an array: a port of numpy/core/arrayprint.py (FloatingFormat, IntegerFormat,
// BoolFormat, _formatArray, _leading_trailing) with array2string's default options, and of the
// digits NumPy's Dragon4 picks. Checked against NumPy 1.24 by tests/array/print_test.cpp.
#include "array/print.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "gridspan/core/half.hpp"

namespace gridspan::array {
namespace {

// array2string's defaults: precision, threshold, edgeitems, linewidth.
constexpr int kPrecision = 8;
constexpr int64_t kThreshold = 1000;
constexpr int64_t kEdgeItems = 3;
constexpr int kLineWidth = 75;

// ---- Decimal digits ----------------------------------------------------------------------------

/// A non-negative decimal d1.d2d3... x 10^exp10, without leading or trailing zeros ("0" is zero).
struct Decimal {
  std::string digits = "0";
  int exp10 = 0;
};

/// The digits of "123.45", "0.001", "1.5e+20" or "1e-05" (a leading '-' is ignored).
Decimal parse_decimal(std::string_view s) {
  if (!s.empty() && s[0] == '-') s.remove_prefix(1);
  int exp = 0;
  if (auto e = s.find_first_of("eE"); e != std::string_view::npos) {
    exp = std::stoi(std::string(s.substr(e + 1)));
    s = s.substr(0, e);
  }
  std::string digits;
  int int_digits = -1;
  for (char c : s) {
    if (c == '.')
      int_digits = static_cast<int>(digits.size());
    else
      digits += c;
  }
  if (int_digits < 0) int_digits = static_cast<int>(digits.size());
  size_t lead = digits.find_first_not_of('0');
  if (lead == std::string::npos) return {};
  size_t last = digits.find_last_not_of('0');
  return {digits.substr(lead, last - lead + 1), int_digits - 1 - static_cast<int>(lead) + exp};
}

/// |x| rounded to `sig` (1 to 120) significant digits, ties to even: the C library's "%.*e"
/// is exact.
Decimal rounded_decimal(double x, int sig) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%.*e", std::clamp(sig, 1, 120) - 1, std::fabs(x));
  return parse_decimal(buf);
}

/// Every digit of |x| for x a float32 value or a midpoint between two (the smallest
/// midpoint, 2^-150, has the most: 105 significant digits).
Decimal exact_decimal(double x) {
  return rounded_decimal(x, 120);
}

/// Compares two non-zero decimals.
int compare(const Decimal& a, const Decimal& b) {
  if (a.exp10 != b.exp10) return a.exp10 < b.exp10 ? -1 : 1;
  size_t n = std::max(a.digits.size(), b.digits.size());
  for (size_t i = 0; i < n; ++i) {
    char da = i < a.digits.size() ? a.digits[i] : '0';
    char db = i < b.digits.size() ? b.digits[i] : '0';
    if (da != db) return da < db ? -1 : 1;
  }
  return 0;
}

Decimal trimmed(std::string head, int exp10) {
  head.erase(head.find_last_not_of('0') + 1);
  return {head, exp10};
}

/// `head` (digits from 10^exp10 down) plus one unit in its last digit.
Decimal bumped(std::string head, int exp10) {
  int i = static_cast<int>(head.size()) - 1;
  while (i >= 0 && head[i] == '9') head[i--] = '0';
  if (i < 0) return {"1", exp10 + 1};
  ++head[i];
  return trimmed(head, exp10);
}

/// Whether the digits of `exact` past its first n round them up (ties to an even digit).
bool rounds_up(const Decimal& exact, size_t n) {
  if (n >= exact.digits.size()) return false;
  char first = exact.digits[n];
  if (first != '5') return first > '5';
  if (exact.digits.size() > n + 1) return true;
  return (exact.digits[n - 1] - '0') % 2 == 1;
}

/// What FloatingFormat asks Dragon4 for: unique digits, at most `precision` and at least
/// `min_digits` of them past the point (-1: no bound), in positional or scientific form.
struct DigitRule {
  bool scientific = false;
  int precision = -1;
  int min_digits = -1;
};

/// The rule as bounds on how many digits, from the first, a value whose first digit stands
/// for 10^exp10 gets. A positional min_digits of 0 still asks for every integer digit.
struct DigitCounts {
  int min_n, max_n;
};

DigitCounts digit_counts(const DigitRule& rule, int exp10) {
  int lead = rule.scientific ? 1 : exp10 + 1;
  // Positional output has non-zero |x| >= 1e-4 only (FloatingFormat's rule): max_n >= 5.
  int max_n = rule.precision < 0 ? INT_MAX : std::max(lead + rule.precision, 1);
  int min_n = rule.min_digits < 0 ? 0 : lead + rule.min_digits;
  return {min_n, max_n};
}

/// The decimals that read back as one value of a type: (lo, hi), closed when the value's
/// mantissa is even (round to nearest even).
struct Interval {
  Decimal lo, hi;
  bool closed = false;
};

/// Dragon4's loop (numpy/core/src/multiarray/dragon4.c) on the exact digits of a value: stop
/// at the first digit count n >= min_n where the value truncated (low) or the one above
/// (high) lies in `r`, or at max_n; then keep the one that fits, or the nearer if both or
/// neither do (ties to an even last digit).
Decimal dragon4(const Decimal& exact, const Interval& r, DigitCounts c) {
  for (int n = 1;; ++n) {
    std::string head = exact.digits.substr(0, n);
    head.resize(n, '0');
    Decimal down = trimmed(head, exact.exp10), up = bumped(head, exact.exp10);
    int cl = compare(down, r.lo), ch = compare(up, r.hi);
    bool low = cl > 0 || (r.closed && cl == 0);
    bool high = ch < 0 || (r.closed && ch == 0);
    if (((low || high) && n >= c.min_n) || n == c.max_n) {
      bool round_up = low == high ? rounds_up(exact, n) : high;
      return round_up ? up : down;
    }
  }
}

/// The bit pattern of x in type `t` (float16, bfloat16 or float32), and back.
uint32_t bits_of(double x, DType t) {
  float f = static_cast<float>(x);
  if (t == DType::f16) return float_to_half(f);
  if (t == DType::bf16) return float_to_bf16(f);
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

double value_of(uint32_t bits, DType t) {
  if (t == DType::f16) return half_to_float(static_cast<uint16_t>(bits));
  if (t == DType::bf16) return bf16_to_float(static_cast<uint16_t>(bits));
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// The round-trip interval of x > 0, a finite float16, bfloat16 or float32 value: half-way
/// to each neighbour (the midpoints are exact doubles).
Interval interval_of(double x, DType t) {
  uint32_t bits = bits_of(x, t);
  double prev = value_of(bits - 1, t), next = value_of(bits + 1, t);
  if (std::isinf(next)) next = 2 * x - prev;  // above the largest finite value
  return {exact_decimal((prev + x) / 2), exact_decimal((x + next) / 2), (bits & 1) == 0};
}

/// Dragon4 for a double, from {fmt}'s shortest digits (Dragonbox picks the same ones). Where
/// the rule cuts them short or asks for more, Dragon4's last digit is plain rounding of the
/// exact value: its one-sided cases need a round-trip interval near one unit of a digit it
/// prints, which for a double is the 16th digit or later, past the 9 an array shows.
Decimal double_digits(double x, const DigitRule& rule) {
  Decimal shortest = parse_decimal(fmt::format("{}", x));
  DigitCounts c = digit_counts(rule, rounded_decimal(x, 17).exp10);
  int n = static_cast<int>(shortest.digits.size());
  if (n > c.max_n) return rounded_decimal(x, c.max_n);
  if (n < c.min_n) return rounded_decimal(x, c.min_n);
  return shortest;
}

/// The digits NumPy prints for |x| of type `t` under `rule`. NumPy has no bfloat16; here it
/// gets float32's rules with Dragon4 run on bfloat16's own round-trip interval, so its
/// shortest digits are those that read back as the same bfloat16 (0.1, not 0.10009766).
Decimal digits_of(double x, DType t, const DigitRule& rule) {
  x = std::fabs(x);
  if (x == 0) return {};
  if (t == DType::f64) return double_digits(x, rule);
  Decimal exact = exact_decimal(x);
  return dragon4(exact, interval_of(x, t), digit_counts(rule, exact.exp10));
}

// ---- Float text --------------------------------------------------------------------------------

/// The text before and after the point of a positional number.
struct Positional {
  std::string int_part, frac_part;
};

Positional positional(const Decimal& d, bool negative) {
  Positional p;
  if (d.exp10 >= 0) {
    size_t n = static_cast<size_t>(d.exp10) + 1;
    p.int_part = d.digits.substr(0, n);
    p.int_part.resize(n, '0');
    if (d.digits.size() > n) p.frac_part = d.digits.substr(n);
  } else {
    p.int_part = "0";
    p.frac_part = std::string(-d.exp10 - 1, '0') + d.digits;
  }
  if (negative) p.int_part.insert(0, "-");
  return p;
}

/// "e+05", "e-100": the exponent's digits padded with zeros to at least `min_digits`.
std::string exponent_text(int exp10, int min_digits) {
  std::string e = std::to_string(std::abs(exp10));
  if (static_cast<int>(e.size()) < min_digits) e.insert(0, min_digits - e.size(), '0');
  return (exp10 < 0 ? "e-" : "e+") + e;
}

std::string pad_left(std::string s, size_t width) {
  if (s.size() < width) s.insert(0, width - s.size(), ' ');
  return s;
}

std::string pad_right(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

/// str() of a float scalar (a 0-d array): positional for 0 and 1e-4 <= |x| < 1e16, with all
/// the shortest digits ("1.0", "0.1"); else scientific without a bare point ("1e+16").
std::string scalar_float_text(double x, DType t) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  Decimal d = digits_of(x, t, DigitRule{});
  long double a = std::fabs(static_cast<long double>(x));
  if (a == 0 || (a >= 1e-4L && a < 1e16L)) {
    Positional p = positional(d, std::signbit(x));
    return p.int_part + "." + (p.frac_part.empty() ? "0" : p.frac_part);
  }
  std::string frac = d.digits.substr(1);
  return (std::signbit(x) ? "-" : "") + d.digits.substr(0, 1) + (frac.empty() ? "" : ".") + frac +
         exponent_text(d.exp10, 2);
}

/// max/min as FloatingFormat computes it: in the array's own type (bfloat16 as float32).
double ratio_in_type(double max_val, double min_val, DType t) {
  if (t == DType::f64) return max_val / min_val;
  float r = static_cast<float>(max_val) / static_cast<float>(min_val);
  // float keeps 24 >= 2*11+2 bits, so rounding the quotient again to float16 is exact rounding.
  return t == DType::f16 ? half_to_float(float_to_half(r)) : r;
}

/// FloatingFormat's choice of scientific notation, from the non-zero finite values. As in
/// NumPy 1.24, max and min meet 1e8 and 1e-4 as doubles: float32 1e-4 (9.99999975e-05) counts
/// as below 1e-4. (NumPy 2's promotion rules compare a float32 in float32 instead.)
bool wants_scientific(const std::vector<double>& finite, DType t) {
  double max_val = 0, min_val = INFINITY;
  for (double x : finite) {
    if (x == 0) continue;
    max_val = std::max(max_val, std::fabs(x));
    min_val = std::min(min_val, std::fabs(x));
  }
  if (max_val == 0) return false;
  return max_val >= 1e8 || min_val < 1e-4 || ratio_in_type(max_val, min_val, t) > 1000.;
}

/// NumPy's FloatingFormat for floatmode 'maxprec', sign '-': one width for all elements.
class FloatFormat {
 public:
  FloatFormat(const std::vector<double>& shown, DType t) : t_(t) {
    std::vector<double> finite;
    for (double x : shown)
      if (std::isfinite(x)) finite.push_back(x);
    scientific_ = wants_scientific(finite, t);
    if (scientific_)
      measure_scientific(finite);
    else
      measure_positional(finite);
    if (finite.size() != shown.size()) widen_for_non_finite(shown);
  }

  std::string operator()(double x) const {
    if (!std::isfinite(x)) return non_finite(x);
    if (scientific_) return scientific(x);
    Positional p = positional(digits_of(x, t_, {false, kPrecision, 0}), std::signbit(x));
    return pad_left(p.int_part, pad_left_) + "." + pad_right(p.frac_part, pad_right_);
  }

 private:
  void measure_scientific(const std::vector<double>& finite) {
    for (double x : finite) {
      Decimal d = digits_of(x, t_, {true, kPrecision, -1});
      precision_ = std::max(precision_, static_cast<int>(d.digits.size()) - 1);
      pad_left_ = std::max(pad_left_, std::signbit(x) ? 2 : 1);
      exp_size_ = std::max(exp_size_, static_cast<int>(exponent_text(d.exp10, 2).size()) - 2);
    }
    pad_right_ = exp_size_ + 2 + precision_;
  }

  void measure_positional(const std::vector<double>& finite) {
    for (double x : finite) {
      Positional p = positional(digits_of(x, t_, {false, kPrecision, -1}), std::signbit(x));
      pad_left_ = std::max(pad_left_, static_cast<int>(p.int_part.size()));
      pad_right_ = std::max(pad_right_, static_cast<int>(p.frac_part.size()));
    }
  }

  /// "nan", "inf" and "-inf" must fit the width too.
  void widen_for_non_finite(const std::vector<double>& shown) {
    bool neginf =
        std::any_of(shown.begin(), shown.end(), [](double x) { return std::isinf(x) && x < 0; });
    int offset = pad_right_ + 1, len = 3;  // "nan" and "inf"
    pad_left_ = std::max({pad_left_, len - offset, len + (neginf ? 1 : 0) - offset});
  }

  std::string non_finite(double x) const {
    std::string s = std::isnan(x) ? "nan" : x < 0 ? "-inf" : "inf";
    return pad_left(s, pad_left_ + pad_right_ + 1);
  }

  std::string scientific(double x) const {
    Decimal d = digits_of(x, t_, {true, precision_, precision_});
    std::string frac = d.digits.substr(1);
    frac.resize(std::max(frac.size(), static_cast<size_t>(precision_)), '0');
    std::string lead = (std::signbit(x) ? "-" : "") + d.digits.substr(0, 1);
    return pad_left(lead, pad_left_) + "." + frac + exponent_text(d.exp10, exp_size_);
  }

  DType t_;
  bool scientific_ = false;
  int precision_ = 0;  // digits past the point in scientific notation
  int pad_left_ = 0, pad_right_ = 0, exp_size_ = 2;
};

// ---- Elements ----------------------------------------------------------------------------------

template <class T>
T load(const void* values, int64_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(values) + i * static_cast<int64_t>(sizeof(T)),
              sizeof(T));
  return v;
}

double float_at(const void* values, DType t, int64_t i) {
  switch (t) {
    case DType::f16:
      return half_to_float(load<uint16_t>(values, i));
    case DType::bf16:
      return bf16_to_float(load<uint16_t>(values, i));
    case DType::f32:
      return load<float>(values, i);
    default:
      return load<double>(values, i);
  }
}

std::string integer_text(const void* values, DType t, int64_t i) {
  switch (t) {
    case DType::i8:
      return std::to_string(load<int8_t>(values, i));
    case DType::i16:
      return std::to_string(load<int16_t>(values, i));
    case DType::i32:
      return std::to_string(load<int32_t>(values, i));
    case DType::i64:
      return std::to_string(load<int64_t>(values, i));
    case DType::u8:
      return std::to_string(load<uint8_t>(values, i));
    case DType::u16:
      return std::to_string(load<uint16_t>(values, i));
    case DType::u32:
      return std::to_string(load<uint32_t>(values, i));
    default:
      return std::to_string(load<uint64_t>(values, i));
  }
}

bool bool_at(const void* values, int64_t i) {
  return load<uint8_t>(values, i) != 0;
}

/// str() of a 0-d array: the scalar's own str().
std::string scalar_text(const void* values, DType t) {
  if (t == DType::boolean) return bool_at(values, 0) ? "True" : "False";
  if (dtype_is_float(t)) return scalar_float_text(float_at(values, t, 0), t);
  return integer_text(values, t, 0);
}

/// The text of the element at a flat offset, padded to the width of the elements shown.
using Words = std::function<std::string(int64_t)>;

Words make_words(const void* values, DType t, const std::vector<int64_t>& shown) {
  if (t == DType::boolean)  // BoolFormat: " True" lines up with "False"
    return [values](int64_t i) { return std::string(bool_at(values, i) ? " True" : "False"); };
  if (dtype_is_float(t)) {
    std::vector<double> xs;
    for (int64_t i : shown) xs.push_back(float_at(values, t, i));
    return [values, t, f = FloatFormat(xs, t)](int64_t i) { return f(float_at(values, t, i)); };
  }
  size_t width = 0;  // IntegerFormat: the longer of str(max) and str(min)
  for (int64_t i : shown) width = std::max(width, integer_text(values, t, i).size());
  return [values, t, width](int64_t i) { return pad_left(integer_text(values, t, i), width); };
}

// ---- Layout ------------------------------------------------------------------------------------

constexpr int64_t kEllipsis = -1;

/// Appends `word` to `line`, first moving `line` into `s` when the word would pass `width`
/// (NumPy's _extendLine; a line holding only the indent never wraps).
void extend_line(std::string& s, std::string& line, const std::string& word, size_t width,
                 const std::string& indent) {
  if (line.size() + word.size() > width && line.size() > indent.size()) {
    line.erase(line.find_last_not_of(' ') + 1);
    s += line + "\n";
    line = indent;
  }
  line += word;
}

/// NumPy's _formatArray: nested brackets, rows wrapped at the line width, and past the
/// threshold only the edge items of each axis around "...".
class Layout {
 public:
  explicit Layout(const Dim& shape) : shape_(shape), summarise_(shape.volume() > kThreshold) {
    int64_t s = 1;
    for (int a = shape.rank() - 1; a >= 0; --a) {
      stride_[a] = s;
      s *= shape[a];
    }
  }

  /// Flat offsets of the elements printed (what the widths are measured on).
  std::vector<int64_t> shown() const {
    std::vector<int64_t> out;
    collect(0, 0, out);
    return out;
  }

  std::string text(const Words& words) const { return nest(words, 0, 0, " ", kLineWidth); }

 private:
  /// Positions printed along `axis`, with kEllipsis where the summary leaves some out.
  std::vector<int64_t> items(int axis) const {
    int64_t n = shape_[axis];
    std::vector<int64_t> v;
    bool cut = summarise_ && n > 2 * kEdgeItems;
    for (int64_t i = 0; i < n; ++i) {
      if (cut && i == kEdgeItems) {
        v.push_back(kEllipsis);
        i = n - kEdgeItems;
      }
      v.push_back(i);
    }
    return v;
  }

  void collect(int axis, int64_t offset, std::vector<int64_t>& out) const {
    if (axis == shape_.rank()) {
      out.push_back(offset);
      return;
    }
    for (int64_t i : items(axis))
      if (i != kEllipsis) collect(axis + 1, offset + i * stride_[axis], out);
  }

  std::string nest(const Words& words, int axis, int64_t offset, const std::string& indent,
                   int width) const {
    std::string body = axis + 1 == shape_.rank() ? row(words, offset, indent, width - 1)
                                                 : block(words, axis, offset, indent, width);
    return "[" + body.substr(indent.size()) + "]";
  }

  /// The last axis: elements separated by spaces, wrapped before `width`.
  std::string row(const Words& words, int64_t offset, const std::string& indent, int width) const {
    int axis = shape_.rank() - 1;
    std::vector<int64_t> v = items(axis);
    std::string s, line = indent;
    for (size_t k = 0; k < v.size(); ++k) {
      std::string word = v[k] == kEllipsis ? "..." : words(offset + v[k] * stride_[axis]);
      extend_line(s, line, word, static_cast<size_t>(width), indent);
      if (k + 1 < v.size()) line += ' ';
    }
    return s + line;
  }

  /// An outer axis: one nested array per line, with a blank line per axis below the next.
  std::string block(const Words& words, int axis, int64_t offset, const std::string& indent,
                    int width) const {
    std::vector<int64_t> v = items(axis);
    std::string s, sep(shape_.rank() - axis - 1, '\n');
    for (size_t k = 0; k < v.size(); ++k) {
      s += indent;
      s += v[k] == kEllipsis
               ? "..."
               : nest(words, axis + 1, offset + v[k] * stride_[axis], indent + " ", width - 1);
      if (k + 1 < v.size()) s += sep;
    }
    return s;
  }

  Dim shape_;
  bool summarise_;
  std::array<int64_t, kMaxRank> stride_{};
};

}  // namespace

std::string format_array(const void* values, DType dtype, const Dim& shape) {
  if (shape.rank() == 0) return scalar_text(values, dtype);
  if (shape.volume() == 0) return "[]";
  Layout layout(shape);
  return layout.text(make_words(values, dtype, layout.shown()));
}

}  // namespace gridspan::array

namespace gridspan::detail {
std::string format_array(const void* values, DType dtype, const Dim& shape) {
  return array::format_array(values, dtype, shape);
}
}  // namespace gridspan::detail
