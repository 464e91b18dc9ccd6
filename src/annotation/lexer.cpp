// Tokens of the annotation language, and the caret-quoting every annotation error uses.
#include <cctype>
#include <string_view>

#include <fmt/format.h>

#include "annotation/detail.hpp"
#include "gridspan/core/error.hpp"

namespace gridspan::annotation::detail {

std::string quote_with_caret(const std::string& text, std::size_t pos) {
  if (pos > text.size()) pos = text.size();
  std::size_t begin = pos;
  while (begin > 0 && text[begin - 1] != '\n') --begin;
  std::size_t end = text.find('\n', pos);
  if (end == std::string::npos) end = text.size();
  std::string line = text.substr(begin, end - begin);
  // Keep tabs in the caret line so it lines up however the terminal expands them.
  std::string caret;
  for (std::size_t i = begin; i < pos; ++i) caret += text[i] == '\t' ? '\t' : ' ';
  return fmt::format("\n  {}\n  {}^", line, caret);
}

std::string annotation_message(const std::string& problem, const std::string& text, std::size_t pos,
                               const std::string& fix) {
  std::string msg = "annotation error: " + problem + quote_with_caret(text, pos);
  if (!fix.empty()) msg += "\n  " + fix;
  return msg;
}

void throw_annotation_error(const std::string& problem, const std::string& text, std::size_t pos,
                            const std::string& fix) {
  throw AnnotationError(annotation_message(problem, text, pos, fix));
}

namespace {

bool ident_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}
bool ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

}  // namespace

std::vector<Token> lex(const std::string& text) {
  std::vector<Token> out;
  std::size_t i = 0;
  while (i < text.size()) {
    char c = text[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    Token t;
    t.pos = i;
    if (ident_start(c)) {
      std::size_t j = i;
      while (j < text.size() && ident_char(text[j])) ++j;
      t.kind = Tok::ident;
      t.text = text.substr(i, j - i);
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      std::size_t j = i;
      int64_t v = 0;
      while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, text[j] - '0', &v))
          throw_annotation_error("integer constant is too large", text, i,
                                 "indices are 64-bit signed integers");
        ++j;
      }
      if (j < text.size() && ident_char(text[j]))
        throw_annotation_error(fmt::format("`{}` is not a number", text.substr(i, j + 1 - i)), text,
                               j, "integers in an annotation are plain decimal numbers");
      t.kind = Tok::integer;
      t.text = text.substr(i, j - i);
      t.value = v;
      i = j;
    } else if (c == '=' && i + 1 < text.size() && text[i + 1] == '>') {
      t.kind = Tok::punct;
      t.text = "=>";
      i += 2;
    } else if (std::string_view("[](),:+-*/&|").find(c) != std::string_view::npos) {
      t.kind = Tok::punct;
      t.text = std::string(1, c);
      ++i;
    } else {
      std::string fix = "an annotation uses names, integers, `=>`, `[ ] ( ) , :` and `+ - * /`";
      if (c == '=') fix = "bindings and rules are separated by `=>`";
      throw_annotation_error(fmt::format("unexpected character `{}`", c), text, i, fix);
    }
    out.push_back(std::move(t));
  }
  Token end;
  end.kind = Tok::end;
  end.pos = text.size();
  out.push_back(end);
  return out;
}

}  // namespace gridspan::annotation::detail
