// The .cir lexer: splits text into names, numbers, strings and punctuation with their positions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cleave {

// What a token is.
enum class TokenKind : uint8_t {
  kEnd,        // end of the text
  kError,      // text that is no token; Token::value holds the message
  kIdent,      // [A-Za-z_][A-Za-z0-9_]*: keywords, dtypes, op, attribute and initializer names
  kValueName,  // %name or %"quoted name"; Token::value holds the decoded name
  kGraphName,  // @name or @"quoted name"; Token::value holds the decoded name
  kInt,        // 12, -1
  kFloat,      // 1.5, 1e-05, -inf (inf and nan alone are identifiers)
  kHex,        // 0x0000803f; Token::text holds the digits after "0x"
  kString,     // "text" with C escapes; Token::value holds the decoded text
  kLParen,
  kRParen,
  kLBrace,
  kRBrace,
  kLBracket,
  kRBracket,
  kLess,
  kGreater,
  kComma,
  kColon,
  kEquals,
};

// One token: its kind, source text, decoded value (names, strings, errors) and 1-based position.
struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string_view text;
  std::string value;
  int line = 0;
  int col = 0;
};

// Produces the tokens of a text one at a time, skipping whitespace and // comments.
class Lexer {
 public:
  // `first_line` is the line number given to the text's first line.
  Lexer(std::string_view text, int first_line);

  // The next token; kEnd forever once the text is used up.
  Token next();

 private:
  void skipSpaceAndComments();
  // Reads a quoted string starting at the opening '"' into `token.value`; false (with
  // `token` made an error) when it is unterminated or has a bad escape.
  bool readQuoted(Token& token);
  // Reads %name or @name (the sigil is at pos_).
  void readSigilName(Token& token, TokenKind kind);
  void readNumber(Token& token);
  Token error(Token token, std::string message);
  int column(size_t offset) const { return static_cast<int>(offset - line_start_) + 1; }

  std::string_view text_;
  size_t pos_ = 0;
  size_t line_start_ = 0;
  int line_;
};

// A short description of a token for diagnostics: "end of input" or "'text'".
std::string describeToken(const Token& token);

}  // namespace cleave
