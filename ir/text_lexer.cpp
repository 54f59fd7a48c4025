// The .cir lexer: splits text into names, numbers, strings and punctuation with their positions.
#include "ir/text_lexer.h"

#include <cstdio>

namespace cleave {
namespace {

bool isDigit(char c) { return c >= '0' && c <= '9'; }
bool isIdentStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool isIdentChar(char c) { return isIdentStart(c) || isDigit(c); }
// Characters of a bare %name / @name.
bool isBareNameChar(char c) { return isIdentChar(c) || c == '.'; }

int hexDigitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "'c'" for a printable character, "byte 0xHH" for anything else.
std::string describeChar(char c) {
  auto byte = static_cast<unsigned char>(c);
  if (byte >= 0x20 && byte < 0x7f) return std::string("'") + c + "'";
  char buf[16];
  std::snprintf(buf, sizeof buf, "byte 0x%02x", byte);
  return buf;
}

}  // namespace

Lexer::Lexer(std::string_view text, int first_line) : text_(text), line_(first_line) {}

void Lexer::skipSpaceAndComments() {
  while (pos_ < text_.size()) {
    char c = text_[pos_];
    if (c == '\n') {
      ++pos_;
      ++line_;
      line_start_ = pos_;
    } else if (c == ' ' || c == '\t' || c == '\r') {
      ++pos_;
    } else if (c == '/' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '/') {
      while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
    } else {
      return;
    }
  }
}

Token Lexer::error(Token token, std::string message) {
  token.kind = TokenKind::kError;
  token.value = std::move(message);
  return token;
}

bool Lexer::readQuoted(Token& token) {
  size_t open = pos_++;
  token.value.clear();
  while (true) {
    if (pos_ >= text_.size() || text_[pos_] == '\n') {
      token = error(std::move(token), "unterminated string");
      return false;
    }
    char c = text_[pos_];
    if (c == '"') break;
    if (c != '\\') {
      // Copy the run of plain characters at once.
      size_t run_end = pos_;
      while (run_end < text_.size() && text_[run_end] != '"' && text_[run_end] != '\\' && text_[run_end] != '\n')
        ++run_end;
      token.value.append(text_.substr(pos_, run_end - pos_));
      pos_ = run_end;
      continue;
    }
    size_t escape_at = pos_;
    char kind = pos_ + 1 < text_.size() ? text_[pos_ + 1] : '\0';
    pos_ += 2;
    switch (kind) {
      case 'n': token.value += '\n'; break;
      case 't': token.value += '\t'; break;
      case 'r': token.value += '\r'; break;
      case '"': token.value += '"'; break;
      case '\\': token.value += '\\'; break;
      case 'x': {
        int high = pos_ < text_.size() ? hexDigitValue(text_[pos_]) : -1;
        int low = pos_ + 1 < text_.size() ? hexDigitValue(text_[pos_ + 1]) : -1;
        if (high < 0 || low < 0) {
          token.col = column(escape_at);
          token = error(std::move(token), "escape '\\x' needs two hex digits");
          return false;
        }
        token.value += static_cast<char>(high * 16 + low);
        pos_ += 2;
        break;
      }
      default:
        token.col = column(escape_at);
        if (escape_at + 1 >= text_.size() || kind == '\n') {
          token = error(std::move(token), "unterminated string");
        } else {
          token = error(std::move(token), "unknown escape '\\" + std::string(1, kind) +
                                              "' in string (use \\n \\t \\r \\\" \\\\ or \\xHH)");
        }
        return false;
    }
  }
  ++pos_;  // the closing quote
  token.text = text_.substr(open, pos_ - open);
  return true;
}

void Lexer::readSigilName(Token& token, TokenKind kind) {
  size_t start = pos_++;
  if (pos_ < text_.size() && text_[pos_] == '"') {
    if (!readQuoted(token)) return;
  } else {
    size_t end = pos_;
    while (end < text_.size() && isBareNameChar(text_[end])) ++end;
    if (end == pos_) {
      token = error(std::move(token), std::string("expected a name after '") + text_[start] + "'");
      return;
    }
    token.value.assign(text_.substr(pos_, end - pos_));
    pos_ = end;
  }
  token.kind = kind;
  token.text = text_.substr(start, pos_ - start);
}

void Lexer::readNumber(Token& token) {
  size_t start = pos_;
  if (text_[pos_] == '-') ++pos_;
  bool is_float = false;
  while (pos_ < text_.size() && isDigit(text_[pos_])) ++pos_;
  if (pos_ < text_.size() && text_[pos_] == '.') {
    is_float = true;
    ++pos_;
    while (pos_ < text_.size() && isDigit(text_[pos_])) ++pos_;
  }
  // An exponent only counts when digits follow it ("1e" is the number 1, then an identifier).
  if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
    size_t digits = pos_ + 1;
    if (digits < text_.size() && (text_[digits] == '+' || text_[digits] == '-')) ++digits;
    if (digits < text_.size() && isDigit(text_[digits])) {
      is_float = true;
      pos_ = digits;
      while (pos_ < text_.size() && isDigit(text_[pos_])) ++pos_;
    }
  }
  token.kind = is_float ? TokenKind::kFloat : TokenKind::kInt;
  token.text = text_.substr(start, pos_ - start);
}

Token Lexer::next() {
  skipSpaceAndComments();
  Token token;
  token.line = line_;
  token.col = column(pos_);
  if (pos_ >= text_.size()) return token;  // kEnd

  char c = text_[pos_];
  auto single = [&](TokenKind kind) {
    token.kind = kind;
    token.text = text_.substr(pos_++, 1);
    return token;
  };
  switch (c) {
    case '(': return single(TokenKind::kLParen);
    case ')': return single(TokenKind::kRParen);
    case '{': return single(TokenKind::kLBrace);
    case '}': return single(TokenKind::kRBrace);
    case '[': return single(TokenKind::kLBracket);
    case ']': return single(TokenKind::kRBracket);
    case '<': return single(TokenKind::kLess);
    case '>': return single(TokenKind::kGreater);
    case ',': return single(TokenKind::kComma);
    case ':': return single(TokenKind::kColon);
    case '=': return single(TokenKind::kEquals);
    case '%': readSigilName(token, TokenKind::kValueName); return token;
    case '@': readSigilName(token, TokenKind::kGraphName); return token;
    case '"': {
      if (readQuoted(token)) token.kind = TokenKind::kString;
      return token;
    }
    default: break;
  }
  if (isIdentStart(c)) {
    size_t end = pos_;
    while (end < text_.size() && isIdentChar(text_[end])) ++end;
    token.kind = TokenKind::kIdent;
    token.text = text_.substr(pos_, end - pos_);
    pos_ = end;
    return token;
  }
  if (c == '0' && pos_ + 1 < text_.size() && (text_[pos_ + 1] == 'x' || text_[pos_ + 1] == 'X')) {
    size_t end = pos_ + 2;
    while (end < text_.size() && hexDigitValue(text_[end]) >= 0) ++end;
    token.kind = TokenKind::kHex;
    token.text = text_.substr(pos_ + 2, end - pos_ - 2);
    pos_ = end;
    return token;
  }
  if (isDigit(c) || (c == '-' && pos_ + 1 < text_.size() && isDigit(text_[pos_ + 1]))) {
    readNumber(token);
    return token;
  }
  if (c == '-' && text_.substr(pos_ + 1, 3) == "inf" &&
      (pos_ + 4 >= text_.size() || !isIdentChar(text_[pos_ + 4]))) {
    token.kind = TokenKind::kFloat;
    token.text = text_.substr(pos_, 4);
    pos_ += 4;
    return token;
  }
  return error(std::move(token), "unexpected character " + describeChar(c));
}

std::string describeToken(const Token& token) {
  switch (token.kind) {
    case TokenKind::kEnd: return "end of input";
    case TokenKind::kHex: return "hex data";
    default: break;
  }
  constexpr size_t kMaxShown = 40;
  std::string_view shown = token.text.substr(0, kMaxShown);
  return "'" + std::string(shown) + (token.text.size() > kMaxShown ? "...'" : "'");
}

}  // namespace cleave
