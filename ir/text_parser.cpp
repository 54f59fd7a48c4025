// The .cir parser: reads one graph from text (grammar in docs/text-format.md).
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "ir/text_format.h"
#include "ir/text_lexer.h"
#include "ir/verifier.h"

namespace cleave {
namespace {

// Dense literals larger than this are rejected before any memory is reserved for them.
constexpr int64_t kMaxLiteralBytes = int64_t{1} << 48;

int hexDigitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return c - 'A' + 10;  // the lexer only lets hex digits into a kHex token
}

template <class T>
void appendBytes(std::vector<uint8_t>& bytes, T element) {
  size_t at = bytes.size();
  bytes.resize(at + sizeof(T));
  std::memcpy(bytes.data() + at, &element, sizeof(T));  // little-endian hosts only, like TensorData
}

// Parses one graph. Each parse function consumes exactly its construct and leaves tok_ on the
// token after it; errors stop the parse at once.
class Parser {
 public:
  Parser(std::string_view text, const std::string& file_name, int first_line)
      : lexer_(text, first_line), file_name_(file_name) {}

  Expected<Graph> parse() {
    advance();
    CLEAVE_TRY(parseGraphBody());
    return std::move(graph_);
  }

 private:
  // ---- tokens and errors ----

  void advance() { tok_ = lexer_.next(); }
  bool at(TokenKind kind) const { return tok_.kind == kind; }
  bool atWord(std::string_view word) const { return tok_.kind == TokenKind::kIdent && tok_.text == word; }

  Status errorAt(const Token& token, const std::string& message) const {
    return Status::badInput(file_name_ + ":" + std::to_string(token.line) + ":" + std::to_string(token.col) + ": " +
                            message);
  }
  // An error at the current token; a token the lexer could not read reports the lexer's message.
  Status error(const std::string& message) const {
    return errorAt(tok_, tok_.kind == TokenKind::kError ? tok_.value : message);
  }
  Status expect(TokenKind kind, const std::string& message) {
    if (!at(kind)) return error(message);
    advance();
    return Status::ok();
  }

  // ---- graph structure ----

  // graph @name { declaration* } end-of-text
  Status parseGraphBody() {
    if (!atWord("graph")) return error("expected 'graph @name {'");
    advance();
    if (!at(TokenKind::kGraphName)) return error("expected a graph name '@name' after 'graph'");
    graph_.name = tok_.value;
    advance();
    CLEAVE_TRY(expect(TokenKind::kLBrace, "expected '{' after the graph name"));
    bool seen_output = false;
    while (!at(TokenKind::kRBrace)) {
      if (at(TokenKind::kEnd)) return error("expected '}' at the end of graph @" + graph_.name);
      if (atWord("input")) {
        CLEAVE_TRY(parseInput());
      } else if (atWord("param")) {
        CLEAVE_TRY(parseParam());
      } else if (atWord("output")) {
        if (seen_output) return error("the graph has a second output line (list every output on one line)");
        CLEAVE_TRY(parseOutput());
        seen_output = true;
      } else if (atWord("update")) {
        CLEAVE_TRY(parseUpdate());
      } else if (at(TokenKind::kValueName) || (at(TokenKind::kIdent) && lookupOp(tok_.text))) {
        CLEAVE_TRY(parseNode());
      } else {
        return error("expected 'input', 'param', a node '%name = op(...)', 'update', 'output' or '}', found " +
                     describeToken(tok_));
      }
    }
    advance();
    if (!at(TokenKind::kEnd))
      return error("unexpected " + describeToken(tok_) + " after the graph's closing '}' (a text holds one graph)");
    return Status::ok();
  }

  // Takes a %name that is about to be defined; errors when the graph already has it.
  Expected<Token> takeNewValueName(const std::string& message) {
    if (!at(TokenKind::kValueName)) return error(message);
    if (graph_.findValue(tok_.value) != kNoValue) return errorAt(tok_, "value '%" + tok_.value + "' is defined twice");
    Token name = std::move(tok_);
    advance();
    return name;
  }

  // Takes a %name that must already be defined and returns its value.
  Expected<ValueId> takeUse(const std::string& message) {
    if (!at(TokenKind::kValueName)) return error(message);
    ValueId v = graph_.findValue(tok_.value);
    if (v == kNoValue) return errorAt(tok_, "use of undefined value '%" + tok_.value + "'");
    advance();
    return v;
  }

  // input %name : TYPE
  Status parseInput() {
    advance();
    CLEAVE_ASSIGN_OR_RETURN(Token name, takeNewValueName("expected '%name' after 'input'"));
    CLEAVE_TRY(expect(TokenKind::kColon, "expected ':' and a type after the input name"));
    CLEAVE_ASSIGN_OR_RETURN(TensorType type, parseType());
    return graph_.addInput(name.value, std::move(type)).status();
  }

  // param %name : TYPE = (KIND [{args}] | dense<...>) [frozen]
  Status parseParam() {
    advance();
    CLEAVE_ASSIGN_OR_RETURN(Token name, takeNewValueName("expected '%name' after 'param'"));
    CLEAVE_TRY(expect(TokenKind::kColon, "expected ':' and a type after the parameter name"));
    CLEAVE_ASSIGN_OR_RETURN(TensorType type, parseType());
    CLEAVE_TRY(expect(TokenKind::kEquals, "expected '=' and an initializer after the parameter type"));
    Initializer init;
    if (atWord("dense")) {
      Token literal_start = tok_;
      CLEAVE_ASSIGN_OR_RETURN(init.data, parseTensorLiteral());
      if (init.data->type != type)
        return errorAt(literal_start, "parameter '%" + name.value + "' is " + type.str() + " but its data is " +
                                          init.data->type.str());
      init.kind = "data";
    } else {
      if (!at(TokenKind::kIdent)) return error("expected an initializer (zeros, normal {std = 0.02}, dense<...>, ...)");
      if (tok_.text == "data") return error("a data initializer is written as dense<TYPE: [...]> or dense<TYPE: 0x...>");
      if (!isInitializerKind(tok_.text))
        return error("unknown initializer '" + std::string(tok_.text) +
                     "' (zeros, ones, constant, normal, uniform, xavier_uniform, xavier_normal, kaiming_uniform, "
                     "kaiming_normal, or dense<...>)");
      init.kind = std::string(tok_.text);
      advance();
      if (at(TokenKind::kLBrace)) CLEAVE_TRY(parseAttrMap(init.args));
    }
    bool trainable = true;
    if (atWord("frozen")) {
      trainable = false;
      advance();
    }
    CLEAVE_TRY(graph_.addParam(name.value, std::move(type), std::move(init), trainable).status());
    // Held in another shape than the model's: model [the model's shape] (checked below).
    const Token model_token = tok_;
    if (atWord("model")) {
      advance();
      CLEAVE_ASSIGN_OR_RETURN(graph_.params.back().model.shape, parseIntList("the model's shape"));
      // Grouped rather than reshaped: parts [sizes] along DIM (ir/held_layout.h).
      if (atWord("parts")) {
        advance();
        CLEAVE_ASSIGN_OR_RETURN(graph_.params.back().model.parts, parseIntList("the parts' sizes"));
        if (!atWord("along")) return error("expected 'along DIM' after the parts' sizes");
        advance();
        if (!at(TokenKind::kInt)) return error("expected the model's dim the parts cut after 'along'");
        graph_.params.back().model.axis = std::stoll(std::string(tok_.text));
        advance();
      }
    }
    // One device's block of a split tensor: shard of [whole shape] at [block start].
    if (atWord("shard")) {
      advance();
      if (!atWord("of")) return error("expected 'of [whole shape]' after 'shard'");
      advance();
      CLEAVE_ASSIGN_OR_RETURN(graph_.params.back().full_shape, parseIntList("the whole tensor's shape"));
      if (!atWord("at")) return error("expected 'at [block start]' after the whole shape");
      advance();
      CLEAVE_ASSIGN_OR_RETURN(graph_.params.back().shard_offset, parseIntList("the block's start"));
      const Param& param = graph_.params.back();
      const Shape& block = graph_.values[param.value].type.shape;
      if (param.full_shape.size() != block.size() || param.shard_offset.size() != block.size())
        return error("the whole shape and block start of '%" + name.value + "' need one entry per dim");
      for (size_t d = 0; d < block.size(); ++d)
        if (param.shard_offset[d] < 0 || param.shard_offset[d] + block[d] > param.full_shape[d])
          return error("the block of '%" + name.value + "' does not lie inside the whole tensor");
      // How the start follows from the device's coordinates: by AXIS [step per dim], ...
      if (atWord("by")) {
        advance();
        while (true) {
          if (!at(TokenKind::kIdent)) return error("expected a mesh axis (dp, tp) after 'by'");
          const std::string axis(tok_.text);
          advance();
          const Token list = tok_;
          CLEAVE_ASSIGN_OR_RETURN(std::vector<int64_t> steps, parseIntList("the block's steps over " + axis));
          if (steps.size() != block.size())
            return errorAt(list, "the steps of '%" + name.value + "' over " + axis + " need one entry per dim");
          for (size_t d = 0; d < steps.size(); ++d)
            if (steps[d] != 0) graph_.params.back().shard_steps.push_back({static_cast<int64_t>(d), axis, steps[d]});
          if (!at(TokenKind::kComma)) break;
          advance();
        }
      }
    }
    const Param& param = graph_.params.back();
    if (!param.model.shape.empty()) {
      const Shape& whole = param.full_shape.empty() ? graph_.values[param.value].type.shape : param.full_shape;
      if (Status held = checkHeldShape(param.model, whole); !held)
        return errorAt(model_token, "'%" + name.value + "': " + held.message());
    }
    return Status::ok();
  }

  // output %a, %b, ...
  Status parseOutput() {
    advance();
    while (true) {
      CLEAVE_ASSIGN_OR_RETURN(ValueId v, takeUse("expected '%name' in the output list"));
      graph_.outputs.push_back(v);
      if (!at(TokenKind::kComma)) break;
      advance();
    }
    return Status::ok();
  }

  // update %target = %new_value
  Status parseUpdate() {
    advance();
    StateUpdate update;
    CLEAVE_ASSIGN_OR_RETURN(update.target, takeUse("expected the updated parameter '%name' after 'update'"));
    CLEAVE_TRY(expect(TokenKind::kEquals, "expected '=' after the updated parameter"));
    CLEAVE_ASSIGN_OR_RETURN(update.new_value, takeUse("expected the new value '%name' after '='"));
    graph_.updates.push_back(update);
    return Status::ok();
  }

  // %r1, %r2 = op(%a, %b) [{attrs}] [: TYPE, TYPE] [loc("file":"name")], or op(%a) [{attrs}] for an
  // op without results (send).
  Status parseNode() {
    // 1. Result names, new and distinct.
    const Token first_result = tok_;
    std::vector<std::string> result_names;
    std::unordered_set<std::string> names_here;
    while (at(TokenKind::kValueName) || !result_names.empty()) {
      CLEAVE_ASSIGN_OR_RETURN(Token name, takeNewValueName("expected '%name' after ','"));
      if (!names_here.insert(name.value).second) return errorAt(name, "value '%" + name.value + "' is defined twice");
      result_names.push_back(std::move(name.value));
      if (!at(TokenKind::kComma)) break;
      advance();
    }
    if (!result_names.empty()) CLEAVE_TRY(expect(TokenKind::kEquals, "expected '=' after the result names"));

    // 2. The op and its operands.
    if (!at(TokenKind::kIdent)) return error("expected an op name after '='");
    std::optional<OpId> op = lookupOp(tok_.text);
    if (!op) return error("unknown op '" + std::string(tok_.text) + "'");
    advance();
    CLEAVE_TRY(expect(TokenKind::kLParen, "expected '(' after the op name"));
    std::vector<ValueId> operands;
    if (!at(TokenKind::kRParen)) {
      while (true) {
        CLEAVE_ASSIGN_OR_RETURN(ValueId v, takeUse("expected an operand '%name'"));
        operands.push_back(v);
        if (!at(TokenKind::kComma)) break;
        advance();
      }
    }
    CLEAVE_TRY(expect(TokenKind::kRParen, "expected ')' after operands"));

    // 3. Attributes, declared result types and location, each optional.
    AttrMap attrs;
    if (at(TokenKind::kLBrace)) CLEAVE_TRY(parseAttrMap(attrs));
    std::vector<TensorType> result_types;
    const bool types_given = at(TokenKind::kColon);
    if (types_given) {
      advance();
      while (true) {
        CLEAVE_ASSIGN_OR_RETURN(TensorType type, parseType());
        result_types.push_back(std::move(type));
        if (!at(TokenKind::kComma)) break;
        advance();
      }
    }
    SourceLoc loc{file_name_, first_result.line, first_result.col, ""};
    if (atWord("loc")) CLEAVE_TRY(parseLoc(loc));

    // 4. Result types: as declared (the verifier checks them), or inferred by the op table.
    if (types_given) {
      if (result_types.size() != result_names.size())
        return errorAt(first_result, std::to_string(result_names.size()) + " result(s) named but " +
                                         std::to_string(result_types.size()) + " type(s) given");
    } else {
      std::vector<TensorType> operand_types;
      operand_types.reserve(operands.size());
      for (ValueId v : operands) operand_types.push_back(graph_.values[v].type);
      auto inferred = inferResultTypes(opDef(*op), operand_types, attrs);
      if (!inferred) return errorAt(first_result, inferred.status().message());
      if (inferred->size() != result_names.size())
        return errorAt(first_result, std::string(opName(*op)) + " gives " + std::to_string(inferred->size()) +
                                         " result(s) but " + std::to_string(result_names.size()) + " are named");
      result_types = std::move(*inferred);
    }
    return graph_
        .addNodeWithTypes(*op, std::move(operands), std::move(attrs), std::move(loc), std::move(result_names),
                          std::move(result_types))
        .status();
  }

  // loc("file":"node_name") or loc("node_name")
  Status parseLoc(SourceLoc& loc) {
    advance();
    CLEAVE_TRY(expect(TokenKind::kLParen, "expected '(' after 'loc'"));
    if (!at(TokenKind::kString)) return error("expected a quoted node name in loc(...)");
    std::string first = std::move(tok_.value);
    advance();
    if (at(TokenKind::kColon)) {
      advance();
      if (!at(TokenKind::kString)) return error("expected a quoted node name after ':' in loc(...)");
      loc = SourceLoc{std::move(first), 0, 0, std::move(tok_.value)};
      advance();
    } else {
      loc = SourceLoc{"", 0, 0, std::move(first)};
    }
    return expect(TokenKind::kRParen, "expected ')' after loc(...)");
  }

  // ---- types ----

  // DTYPE[d0,d1,...], e.g. f32[128,784] or f32[] for a scalar.
  Expected<TensorType> parseType() {
    if (!at(TokenKind::kIdent)) return error("expected a type such as f32[2,3]");
    const Token type_start = tok_;
    std::optional<DType> dtype = parseDType(tok_.text);
    if (!dtype) return error("unknown dtype '" + std::string(tok_.text) + "'");
    advance();
    TensorType type{*dtype, {}};
    CLEAVE_TRY(expect(TokenKind::kLBracket, "expected '[' after dtype '" + std::string(dtypeName(*dtype)) + "'"));
    int64_t bytes = dtypeSize(*dtype);
    if (!at(TokenKind::kRBracket)) {
      while (true) {
        if (!at(TokenKind::kInt)) return error("expected a dimension (a non-negative integer)");
        CLEAVE_ASSIGN_OR_RETURN(int64_t dim, parseInt(tok_));
        if (dim < 0) return error("negative dimension " + std::to_string(dim));
        if (__builtin_mul_overflow(bytes, dim, &bytes))
          return errorAt(type_start, "type is too large (its byte size overflows 64 bits)");
        type.shape.push_back(dim);
        advance();
        if (!at(TokenKind::kComma)) break;
        advance();
      }
    }
    CLEAVE_TRY(expect(TokenKind::kRBracket, "expected ',' or ']' in the shape"));
    return type;
  }

  // ---- numbers ----

  Expected<int64_t> parseInt(const Token& token) const {
    int64_t value = 0;
    auto [end, ec] = std::from_chars(token.text.data(), token.text.data() + token.text.size(), value);
    if (ec != std::errc() || end != token.text.data() + token.text.size())
      return errorAt(token, "integer " + describeToken(token) + " is out of range for 64 bits");
    return value;
  }

  // A float from a kInt, kFloat, or the words inf / nan, as T (float or double).
  template <class T>
  Expected<T> parseFloat(const Token& token, const char* type_name) const {
    T value = 0;
    auto [end, ec] = std::from_chars(token.text.data(), token.text.data() + token.text.size(), value);
    if (ec != std::errc() || end != token.text.data() + token.text.size())
      return errorAt(token, "number " + describeToken(token) + " is out of range for " + type_name);
    return value;
  }

  bool atFloatWord() const { return atWord("inf") || atWord("nan"); }
  bool atNumber() const { return at(TokenKind::kInt) || at(TokenKind::kFloat) || atFloatWord(); }

  // ---- attributes ----

  // {name = value, ...}
  Status parseAttrMap(AttrMap& attrs) {
    advance();  // the '{'
    if (at(TokenKind::kRBrace)) {
      advance();
      return Status::ok();
    }
    while (true) {
      if (!at(TokenKind::kIdent) && !at(TokenKind::kString)) return error("expected an attribute name");
      const Token name_token = tok_;
      std::string name = at(TokenKind::kString) ? tok_.value : std::string(tok_.text);
      advance();
      CLEAVE_TRY(expect(TokenKind::kEquals, "expected '=' after attribute name '" + name + "'"));
      CLEAVE_ASSIGN_OR_RETURN(Attribute value, parseAttrValue());
      if (!attrs.emplace(name, std::move(value)).second)
        return errorAt(name_token, "attribute '" + name + "' is given twice");
      if (at(TokenKind::kComma)) {
        advance();
        continue;
      }
      return expect(TokenKind::kRBrace, "expected ',' or '}' after attribute '" + name + "'");
    }
  }

  // 3, -1, 1.5, inf, "text", [1, 2], [0.5, 1.0], dense<...>
  Expected<Attribute> parseAttrValue() {
    if (at(TokenKind::kInt)) {
      CLEAVE_ASSIGN_OR_RETURN(int64_t value, parseInt(tok_));
      advance();
      return Attribute{value};
    }
    if (at(TokenKind::kFloat) || atFloatWord()) {
      CLEAVE_ASSIGN_OR_RETURN(double value, parseFloat<double>(tok_, "f64"));
      advance();
      return Attribute{value};
    }
    if (at(TokenKind::kString)) {
      std::string value = std::move(tok_.value);
      advance();
      return Attribute{std::move(value)};
    }
    if (at(TokenKind::kLBracket)) return parseNumberList();
    if (atWord("dense")) {
      CLEAVE_ASSIGN_OR_RETURN(std::shared_ptr<const TensorData> tensor, parseTensorLiteral());
      return Attribute{std::move(tensor)};
    }
    return error("expected an attribute value (number, string, list or dense<...>), found " + describeToken(tok_));
  }

  // A list of ints, e.g. [4, 8]; `what` names it in errors.
  Expected<std::vector<int64_t>> parseIntList(const std::string& what) {
    if (!at(TokenKind::kLBracket)) return error("expected '[' starting " + what);
    CLEAVE_ASSIGN_OR_RETURN(Attribute list, parseNumberList());
    if (!std::holds_alternative<std::vector<int64_t>>(list)) return error("expected integers in " + what);
    return std::get<std::vector<int64_t>>(list);
  }

  // [1, 2] is ints; a list with any float (or inf / nan) is floats; [] is ints.
  Expected<Attribute> parseNumberList() {
    advance();  // the '['
    std::vector<int64_t> ints;
    std::vector<double> floats;
    bool any_float = false;
    if (!at(TokenKind::kRBracket)) {
      while (true) {
        if (at(TokenKind::kInt)) {
          CLEAVE_ASSIGN_OR_RETURN(int64_t value, parseInt(tok_));
          ints.push_back(value);
          floats.push_back(static_cast<double>(value));
        } else if (at(TokenKind::kFloat) || atFloatWord()) {
          CLEAVE_ASSIGN_OR_RETURN(double value, parseFloat<double>(tok_, "f64"));
          floats.push_back(value);
          any_float = true;
        } else {
          return error("expected a number in the list");
        }
        advance();
        if (!at(TokenKind::kComma)) break;
        advance();
      }
    }
    CLEAVE_TRY(expect(TokenKind::kRBracket, "expected ',' or ']' in the list"));
    if (any_float) return Attribute{std::move(floats)};
    return Attribute{std::move(ints)};
  }

  // ---- tensor literals ----

  // dense<TYPE: [e0, e1, ...]> or dense<TYPE: 0xHEXBYTES>
  Expected<std::shared_ptr<const TensorData>> parseTensorLiteral() {
    advance();  // 'dense'
    CLEAVE_TRY(expect(TokenKind::kLess, "expected '<' after 'dense'"));
    const Token type_start = tok_;
    auto data = std::make_shared<TensorData>();
    CLEAVE_ASSIGN_OR_RETURN(data->type, parseType());
    const int64_t byte_size = data->type.bytes();  // parseType guarantees no overflow
    if (byte_size > kMaxLiteralBytes)
      return errorAt(type_start, "tensor literal type " + data->type.str() + " is too large (" +
                                     std::to_string(byte_size) + " bytes)");
    CLEAVE_TRY(expect(TokenKind::kColon, "expected ':' after the tensor literal's type"));
    if (at(TokenKind::kHex)) {
      CLEAVE_TRY(decodeHex(*data));
    } else if (at(TokenKind::kLBracket)) {
      CLEAVE_TRY(parseElementList(*data));
    } else {
      return error("expected the tensor's elements as [1, 2, ...] or hex bytes 0x...");
    }
    CLEAVE_TRY(expect(TokenKind::kGreater, "expected '>' to close the tensor literal"));
    return std::shared_ptr<const TensorData>(std::move(data));
  }

  Status decodeHex(TensorData& data) {
    std::string_view digits = tok_.text;
    if (digits.size() % 2 != 0) return error("hex data has an odd number of digits");
    const int64_t byte_count = static_cast<int64_t>(digits.size() / 2);
    if (byte_count != data.type.bytes())
      return error("tensor literal has " + std::to_string(byte_count) + " bytes, type " + data.type.str() +
                   " needs " + std::to_string(data.type.bytes()));
    data.bytes.resize(byte_count);
    for (int64_t i = 0; i < byte_count; ++i)
      data.bytes[i] = static_cast<uint8_t>(hexDigitValue(digits[2 * i]) * 16 + hexDigitValue(digits[2 * i + 1]));
    advance();
    return Status::ok();
  }

  // [e0, e1, ...]: every element is checked; only the first numel are stored, so an overlong
  // list costs no more memory than the type allows.
  Status parseElementList(TensorData& data) {
    const Token list_start = tok_;
    advance();  // the '['
    const int64_t numel = data.type.numel();
    int64_t count = 0;
    if (!at(TokenKind::kRBracket)) {
      while (true) {
        if (!atNumber()) return error("expected a number in the tensor literal");
        if (count < numel) CLEAVE_TRY(appendElement(data));
        ++count;
        advance();
        if (!at(TokenKind::kComma)) break;
        advance();
      }
    }
    CLEAVE_TRY(expect(TokenKind::kRBracket, "expected ',' or ']' in the tensor literal"));
    if (count != numel)
      return errorAt(list_start, "tensor literal has " + std::to_string(count) + " elements, type " +
                                     data.type.str() + " needs " + std::to_string(numel));
    return Status::ok();
  }

  // Converts the current number token to data's dtype and appends its bytes.
  Status appendElement(TensorData& data) {
    const DType dtype = data.type.dtype;
    const std::string type_name(dtypeName(dtype));
    switch (dtype) {
      case DType::kF32: {
        CLEAVE_ASSIGN_OR_RETURN(float value, parseFloat<float>(tok_, "f32"));
        appendBytes(data.bytes, value);
        return Status::ok();
      }
      case DType::kF64: {
        CLEAVE_ASSIGN_OR_RETURN(double value, parseFloat<double>(tok_, "f64"));
        appendBytes(data.bytes, value);
        return Status::ok();
      }
      case DType::kF16:
      case DType::kBF16:
        return error(type_name + " tensor literals are written as hex bytes (0x...), not as a list");
      default: break;
    }
    if (!at(TokenKind::kInt)) return error("expected an integer element for a " + type_name + " tensor");
    CLEAVE_ASSIGN_OR_RETURN(int64_t value, parseInt(tok_));
    auto fits = [&](int64_t lo, int64_t hi) -> Status {
      if (value < lo || value > hi)
        return error("element " + std::to_string(value) + " is out of range for " + type_name);
      return Status::ok();
    };
    switch (dtype) {
      case DType::kI64: appendBytes(data.bytes, value); break;
      case DType::kI32:
        CLEAVE_TRY(fits(std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()));
        appendBytes(data.bytes, static_cast<int32_t>(value));
        break;
      case DType::kI8:
        CLEAVE_TRY(fits(-128, 127));
        appendBytes(data.bytes, static_cast<int8_t>(value));
        break;
      case DType::kU8:
        CLEAVE_TRY(fits(0, 255));
        appendBytes(data.bytes, static_cast<uint8_t>(value));
        break;
      case DType::kBool:
        if (value != 0 && value != 1) return error("bool elements are 0 or 1, got " + std::to_string(value));
        appendBytes(data.bytes, static_cast<uint8_t>(value));
        break;
      default: break;  // float dtypes returned above
    }
    return Status::ok();
  }

  Lexer lexer_;
  const std::string& file_name_;
  Token tok_;
  Graph graph_;
};

}  // namespace

Expected<Graph> parseGraph(std::string_view text, const std::string& file_name, int first_line) {
  return Parser(text, file_name, first_line).parse();
}

Expected<Graph> parseGraphFile(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (!file) return Status::badInput("cannot read " + path + ": " + std::strerror(errno));
  std::string text;
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, file)) > 0) text.append(buffer, n);
  const bool failed = std::ferror(file);
  const int read_errno = errno;
  std::fclose(file);
  if (failed) return Status::badInput("cannot read " + path + ": " + std::strerror(read_errno));
  return parseGraph(text, path);
}

Expected<Graph> loadGraphFile(const std::string& path) {
  CLEAVE_ASSIGN_OR_RETURN(Graph graph, parseGraphFile(path));
  CLEAVE_TRY(verifyGraph(graph));
  return graph;
}

}  // namespace cleave
