// DType names and sizes.
#include "gridspan/core/dtype.hpp"

#include <map>
#include <sstream>
#include <vector>

namespace gridspan {

bool dtype_is_float(DType t) {
  return t == DType::f16 || t == DType::bf16 || t == DType::f32 || t == DType::f64;
}

bool dtype_is_signed(DType t) {
  return dtype_is_float(t) || t == DType::i8 || t == DType::i16 || t == DType::i32 ||
         t == DType::i64;
}

std::string dtype_cpp_name(DType t) {
  switch (t) {
    case DType::i8:
      return "int8_t";
    case DType::i16:
      return "int16_t";
    case DType::i32:
      return "int32_t";
    case DType::i64:
      return "int64_t";
    case DType::u8:
      return "uint8_t";
    case DType::u16:
      return "uint16_t";
    case DType::u32:
      return "uint32_t";
    case DType::u64:
      return "uint64_t";
    case DType::f16:
      return "__half";
    case DType::bf16:
      return "__nv_bfloat16";
    case DType::f32:
      return "float";
    case DType::f64:
      return "double";
    case DType::boolean:
      return "bool";
  }
  return "?";
}

std::string dtype_name(DType t) {
  switch (t) {
    case DType::i8:
      return "int8";
    case DType::i16:
      return "int16";
    case DType::i32:
      return "int32";
    case DType::i64:
      return "int64";
    case DType::u8:
      return "uint8";
    case DType::u16:
      return "uint16";
    case DType::u32:
      return "uint32";
    case DType::u64:
      return "uint64";
    case DType::f16:
      return "float16";
    case DType::bf16:
      return "bfloat16";
    case DType::f32:
      return "float32";
    case DType::f64:
      return "float64";
    case DType::boolean:
      return "bool";
  }
  return "?";
}

bool dtype_from_cpp(const std::string& spelling, DType& out) {
  // Normalise whitespace and drop qualifiers that do not change the type.
  std::istringstream in(spelling);
  std::vector<std::string> words;
  for (std::string w; in >> w;)
    if (w != "const" && w != "volatile" && w != "signed" && w != "std::") words.push_back(w);
  bool has_signed = spelling.find("signed") != std::string::npos &&
                    spelling.find("unsigned") == std::string::npos;
  std::string key;
  for (auto& w : words) {
    std::string x = w.rfind("std::", 0) == 0 ? w.substr(5) : w;
    key += (key.empty() ? "" : " ") + x;
  }
  static const std::map<std::string, DType> names = {
      {"char", DType::i8},           {"int8_t", DType::i8},
      {"short", DType::i16},         {"short int", DType::i16},
      {"int16_t", DType::i16},       {"int", DType::i32},
      {"int32_t", DType::i32},       {"long", DType::i64},
      {"long int", DType::i64},      {"long long", DType::i64},
      {"long long int", DType::i64}, {"int64_t", DType::i64},
      {"ptrdiff_t", DType::i64},     {"unsigned char", DType::u8},
      {"uint8_t", DType::u8},        {"unsigned short", DType::u16},
      {"uint16_t", DType::u16},      {"unsigned", DType::u32},
      {"unsigned int", DType::u32},  {"uint32_t", DType::u32},
      {"unsigned long", DType::u64}, {"unsigned long long", DType::u64},
      {"uint64_t", DType::u64},      {"size_t", DType::u64},
      {"float", DType::f32},         {"double", DType::f64},
      {"bool", DType::boolean},      {"__half", DType::f16},
      {"half", DType::f16},          {"__nv_bfloat16", DType::bf16},
      {"bfloat16", DType::bf16}};
  if (key.empty() && has_signed) key = "int";
  auto it = names.find(key);
  if (it == names.end()) return false;
  out = it->second;
  if (has_signed && out == DType::i8) out = DType::i8;
  return true;
}

}  // namespace gridspan
