// Jinja tokens, as @huggingface/jinja's lexer produces them: the source is first preprocessed
// (trailing newline dropped, lstrip_blocks, trim_blocks, transformers' {% generation %} tags
// removed), then split into text, tags and expression tokens with {%- -%} {{- -}} {#- -#}
// whitespace control applied.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace les::jinja {

enum class Tok : uint8_t {
  Text, NumericLiteral, StringLiteral, Identifier, Equals, OpenParen, CloseParen,
  OpenStatement, CloseStatement, OpenExpression, CloseExpression, OpenSquareBracket,
  CloseSquareBracket, OpenCurlyBracket, CloseCurlyBracket, Comma, Dot, Colon, Pipe,
  AdditiveBinaryOperator, MultiplicativeBinaryOperator, ExponentiationBinaryOperator,
  ComparisonBinaryOperator, UnaryOperator, Comment,
};
const char* tok_name(Tok t);

struct Token {
  Tok type;
  std::string value;  // the text, the unescaped string literal, the operator or name
  uint32_t offset;    // byte offset of the token's first character in the original source
};

// "line L, column C" (1-based; columns count bytes) of a byte offset in source.
std::string source_position(std::string_view source, uint32_t offset);

// Throws les::Error naming the position on an unterminated comment or string, a bad escape or
// an unexpected character.
std::vector<Token> tokenize(std::string_view source);

}  // namespace les::jinja
