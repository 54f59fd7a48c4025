// Parsing, printing and typing the body of a fused node (the "body" attribute of op fused).
#include "ir/ops/fused_body.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "ir/op_table.h"

namespace cleave {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split(std::string_view s, char separator) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == separator) {
      parts.push_back(trim(s.substr(start, i - start)));
      start = i + 1;
    }
  }
  return parts;
}

// "x3" or "t12": the number after the letter, or -1.
int indexAfter(std::string_view token, char letter) {
  if (token.size() < 2 || token[0] != letter) return -1;
  int value = 0;
  auto [end, error] = std::from_chars(token.data() + 1, token.data() + token.size(), value);
  return error == std::errc() && end == token.data() + token.size() && value >= 0 ? value : -1;
}

std::optional<double> parseNumber(std::string_view token) {
  if (token.empty()) return std::nullopt;
  std::string text(token);
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return std::nullopt;
  return value;
}

// The shortest decimal text that reads back as exactly `value`.
std::string numberText(double value) {
  char text[40];
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, value);
    if (std::strtod(text, nullptr) == value || std::isnan(value)) break;
  }
  return text;
}

Status stepError(std::string_view step, const std::string& message) {
  return Status::badInput("fused body: step '" + std::string(step) + "': " + message);
}

// One "name=value" attribute, its kind taken from the op's AttrSpec.
Status parseAttribute(const OpDef& def, std::string_view text, std::string_view step, AttrMap& attrs) {
  const size_t equals = text.find('=');
  if (equals == std::string_view::npos) return stepError(step, "attribute '" + std::string(text) + "' has no '='");
  const std::string name(trim(text.substr(0, equals)));
  const std::string_view value = trim(text.substr(equals + 1));
  const AttrSpec* spec = def.findAttr(name);
  if (!spec) return stepError(step, std::string(def.name) + " has no attribute '" + name + "'");
  switch (spec->kind) {
    case AttrKind::kString: attrs[name] = std::string(value); return Status::ok();
    case AttrKind::kFloat:
    case AttrKind::kInt: {
      std::optional<double> number = parseNumber(value);
      if (!number) return stepError(step, "attribute '" + name + "' is '" + std::string(value) + "', not a number");
      if (spec->kind == AttrKind::kFloat) attrs[name] = *number;
      else attrs[name] = static_cast<int64_t>(*number);
      return Status::ok();
    }
    case AttrKind::kInts: {  // [0 1 2]: spaces between, as the attribute list is split at commas
      if (value.size() < 2 || value.front() != '[' || value.back() != ']')
        return stepError(step, "attribute '" + name + "' is '" + std::string(value) + "', not a list like [0 1]");
      std::vector<int64_t> ints;
      for (std::string_view item : split(value.substr(1, value.size() - 2), ' ')) {
        if (item.empty()) continue;
        std::optional<double> number = parseNumber(item);
        if (!number || *number != std::trunc(*number))
          return stepError(step, "attribute '" + name + "' holds '" + std::string(item) + "', not an integer");
        ints.push_back(static_cast<int64_t>(*number));
      }
      attrs[name] = std::move(ints);
      return Status::ok();
    }
    default: return stepError(step, "attribute '" + name + "' has a kind a fused body cannot spell");
  }
}

// One statement: a step, or for "tN, tN+1, ... = op(args)" one step per result of the op.
Expected<std::vector<FusedStep>> parseStep(std::string_view text, int position) {
  const size_t equals = text.find('=');
  const size_t open = text.find('(');
  const size_t close = text.find(')');
  if (equals == std::string_view::npos || open == std::string_view::npos || close == std::string_view::npos ||
      !(equals < open && open < close))
    return stepError(text, "expected 'tN = op(args)'");
  const std::vector<std::string_view> defined = split(text.substr(0, equals), ',');
  for (size_t k = 0; k < defined.size(); ++k)
    if (indexAfter(defined[k], 't') != position + static_cast<int>(k))
      return stepError(text, "should define t" + std::to_string(position + static_cast<int>(k)));
  const std::string_view op_name = trim(text.substr(equals + 1, open - equals - 1));
  std::optional<OpId> op = lookupOp(op_name);
  if (!op) return stepError(text, "no op named '" + std::string(op_name) + "'");
  FusedStep step{*op, {}, {}};
  for (std::string_view arg : split(text.substr(open + 1, close - open - 1), ',')) {
    if (int operand = indexAfter(arg, 'x'); operand >= 0) {
      step.args.push_back({FusedArg::Kind::kOperand, operand, 0.0});
    } else if (int earlier = indexAfter(arg, 't'); earlier >= 0) {
      if (earlier >= position) return stepError(text, "reads t" + std::to_string(earlier) + " before it is defined");
      step.args.push_back({FusedArg::Kind::kStep, earlier, 0.0});
    } else if (std::optional<double> number = parseNumber(arg)) {
      step.args.push_back({FusedArg::Kind::kLiteral, 0, *number});
    } else {
      return stepError(text, "argument '" + std::string(arg) + "' is not xN, tN or a number");
    }
  }
  std::string_view rest = trim(text.substr(close + 1));
  if (!rest.empty()) {
    if (rest.front() != '[' || rest.back() != ']') return stepError(text, "expected [attributes] after the arguments");
    for (std::string_view attr : split(rest.substr(1, rest.size() - 2), ','))
      CLEAVE_TRY(parseAttribute(opDef(*op), attr, text, step.attrs));
  }
  std::vector<FusedStep> steps;
  for (size_t k = 0; k < defined.size(); ++k) {
    steps.push_back(step);
    steps.back().result = static_cast<int>(k);
  }
  return steps;
}

std::string attributeText(const Attribute& value) {
  switch (attrKind(value)) {
    case AttrKind::kInt: return std::to_string(std::get<int64_t>(value));
    case AttrKind::kFloat: return numberText(std::get<double>(value));
    case AttrKind::kString: return std::get<std::string>(value);
    case AttrKind::kInts: {
      std::string text = "[";
      for (int64_t v : std::get<std::vector<int64_t>>(value)) text += (text.size() > 1 ? " " : "") + std::to_string(v);
      return text + "]";
    }
    default: return "?";
  }
}

// The shape `a` and `b` broadcast to, or nullopt.
std::optional<Shape> broadcastShapes(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace

int FusedBody::operandCount() const {
  int count = 0;
  for (const FusedStep& step : steps)
    for (const FusedArg& arg : step.args)
      if (arg.kind == FusedArg::Kind::kOperand) count = std::max(count, arg.index + 1);
  return count;
}

Expected<FusedBody> parseFusedBody(std::string_view text) {
  FusedBody body;
  std::vector<std::string_view> statements = split(text, ';');
  if (statements.empty() || statements.back().substr(0, 7) != "return ")
    return Status::badInput("fused body: must end with 'return tN, ...'");
  for (size_t i = 0; i + 1 < statements.size(); ++i) {
    CLEAVE_ASSIGN_OR_RETURN(std::vector<FusedStep> steps, parseStep(statements[i], static_cast<int>(body.steps.size())));
    for (FusedStep& step : steps) body.steps.push_back(std::move(step));
  }
  for (std::string_view name : split(statements.back().substr(7), ',')) {
    const int step = indexAfter(name, 't');
    if (step < 0 || step >= static_cast<int>(body.steps.size()))
      return Status::badInput("fused body: returns '" + std::string(name) + "', which no step defines");
    body.returned.push_back(step);
  }
  if (body.steps.empty()) return Status::badInput("fused body: has no steps");
  return body;
}

std::string printFusedBody(const FusedBody& body) {
  std::string text;
  for (size_t i = 0; i < body.steps.size(); ++i) {
    const FusedStep& step = body.steps[i];
    if (step.result > 0) continue;  // printed with the step it continues
    text += "t" + std::to_string(i);
    for (size_t k = i + 1; k < body.steps.size() && body.steps[k].result > 0; ++k) text += ", t" + std::to_string(k);
    text += " = " + std::string(opName(step.op)) + "(";
    for (size_t a = 0; a < step.args.size(); ++a) {
      const FusedArg& arg = step.args[a];
      if (a) text += ", ";
      switch (arg.kind) {
        case FusedArg::Kind::kOperand: text += "x" + std::to_string(arg.index); break;
        case FusedArg::Kind::kStep: text += "t" + std::to_string(arg.index); break;
        case FusedArg::Kind::kLiteral: text += numberText(arg.literal); break;
      }
    }
    text += ")";
    if (!step.attrs.empty()) {
      text += "[";
      bool first = true;
      for (const auto& [name, value] : step.attrs) {
        text += (first ? "" : ", ") + name + "=" + attributeText(value);
        first = false;
      }
      text += "]";
    }
    text += "; ";
  }
  text += "return ";
  for (size_t r = 0; r < body.returned.size(); ++r) text += (r ? ", t" : "t") + std::to_string(body.returned[r]);
  return text;
}

TensorType fusedLiteralType(DType dtype) { return TensorType{dtype, {}}; }

namespace {

bool hasAxes(const FusedStep& step) {
  auto it = step.attrs.find("axes");
  return it != step.attrs.end() && attrKind(it->second) == AttrKind::kInts && !std::get<std::vector<int64_t>>(it->second).empty();
}

}  // namespace

bool isColumnSum(const FusedStep& step) { return step.op == OpId::reduce_sum && hasAxes(step); }

bool isTotalSum(const FusedStep& step) { return step.op == OpId::reduce_sum && !hasAxes(step); }

const Shape& fusedIterationShape(const FusedBody& body, std::span<const TensorType> step_types,
                                 std::span<const TensorType> operand_types) {
  if (isLoneColumnSum(body)) return operand_types[body.steps[0].args[0].index].shape;
  if (isTotalSum(body.steps.back())) return step_types[body.steps.back().args[0].index].shape;
  return step_types[body.returned[0]].shape;
}

bool isRowGradientOp(OpId op) { return op == OpId::layer_norm_grad || op == OpId::rms_norm_grad; }

bool isPerColumn(const FusedStep& step) { return isColumnSum(step) || (isRowGradientOp(step.op) && step.result > 0); }

bool isLoneColumnSum(const FusedBody& body) {
  return body.steps.size() == 1 && isColumnSum(body.steps[0]) && body.steps[0].args.size() == 1 &&
         body.steps[0].args[0].kind == FusedArg::Kind::kOperand;
}

namespace {

// Step `i`, a reduce_sum, is a column sum of a step of the body of the full shape, not of another
// column sum, or the one step of a lone column sum of an operand.
Status checkColumnSum(const FusedBody& body, size_t i, const TensorType& summed_type, const TensorType& result) {
  const FusedStep& step = body.steps[i];
  const std::string where = "fused body: step t" + std::to_string(i) + ": reduce_sum ";
  const bool of_step = step.args.size() == 1 && step.args[0].kind == FusedArg::Kind::kStep &&
                       !isColumnSum(body.steps[step.args[0].index]);
  if (!of_step && !isLoneColumnSum(body))
    return Status::badInput(where + "sums a step of the body (a column sum), or an operand as the body's only step");
  if (!sumsColumns(step.attrs, summed_type, result))
    return Status::badInput(where + "in a fused body sums an f32 step of rank 2 or more over every dim but the last "
                            "(axes [0, ..., rank-2], keepdims 0), giving one value per column; got axes of " +
                            summed_type.str() + " to " + result.str());
  return Status::ok();
}

// Step `i`, a reduce_sum over all dims, is a total sum: of an f32 step into f32[], the body's last
// step and all it returns.
Status checkTotalSum(const FusedBody& body, size_t i, const TensorType& result) {
  const FusedStep& step = body.steps[i];
  const std::string where = "fused body: step t" + std::to_string(i) + ": reduce_sum over all dims ";
  if (step.args.size() != 1 || step.args[0].kind != FusedArg::Kind::kStep)
    return Status::badInput(where + "sums a step of the body");
  if (i + 1 != body.steps.size() || body.returned != std::vector<int>{static_cast<int>(i)})
    return Status::badInput(where + "(a total sum) must be the body's last step and the only one it returns");
  if (result != TensorType{DType::kF32, {}})
    return Status::badInput(where + "in a fused body sums f32 into f32[] (keepdims 0), got " + result.str());
  return Status::ok();
}

}  // namespace

bool sumsColumns(const AttrMap& attrs, const TensorType& summed, const TensorType& result) {
  const int64_t rank = summed.rank();
  std::vector<int64_t> axes;
  if (auto it = attrs.find("axes"); it != attrs.end() && attrKind(it->second) == AttrKind::kInts)
    axes = std::get<std::vector<int64_t>>(it->second);
  for (int64_t& a : axes) a = a < 0 ? a + rank : a;
  std::sort(axes.begin(), axes.end());
  std::vector<int64_t> leading(static_cast<size_t>(std::max<int64_t>(0, rank - 1)));
  for (size_t d = 0; d < leading.size(); ++d) leading[d] = static_cast<int64_t>(d);
  // (A missing keepdims is reduce_sum's default, 1; the result's shape tells either way.)
  return rank >= 2 && axes == leading && summed.dtype == DType::kF32 && result.dtype == DType::kF32 &&
         result.shape == Shape{summed.shape.back()};
}

Expected<std::vector<TensorType>> inferFusedStepTypes(const FusedBody& body, std::span<const TensorType> operand_types) {
  if (body.operandCount() != static_cast<int>(operand_types.size()))
    return Status::badInput("fused body reads " + std::to_string(body.operandCount()) + " operands, the node has " +
                            std::to_string(operand_types.size()));
  std::vector<TensorType> types;
  std::vector<TensorType> op_results;  // the results of the last step with result 0
  std::optional<DType> dtype;
  auto stepName = [](size_t i) { return "fused body: step t" + std::to_string(i); };
  for (size_t i = 0; i < body.steps.size(); ++i) {
    const FusedStep& step = body.steps[i];
    const OpDef& def = opDef(step.op);
    if (step.result > 0) {  // a further result of the step before it
      if (i == 0) return Status::badInput(stepName(i) + ": not a result of the step before it");
      const FusedStep& previous = body.steps[i - 1];
      if (previous.op != step.op || previous.result != step.result - 1 || previous.args != step.args ||
          previous.attrs != step.attrs || static_cast<size_t>(step.result) >= op_results.size())
        return Status::badInput(stepName(i) + ": not a result of the step before it");
      types.push_back(op_results[step.result]);
      continue;
    }
    size_t statement_end = i + 1;  // one past the statement's last step
    while (statement_end < body.steps.size() && body.steps[statement_end].result > 0) ++statement_end;
    const bool last_axis = def.fusable_along_last_axis;
    const bool column_sum = isColumnSum(step), total_sum = isTotalSum(step);
    if (!def.fusable && !last_axis && !column_sum && !total_sum)
      return Status::badInput(stepName(i) + ": " + std::string(def.name) + " is not fusable");
    if (last_axis && statement_end != body.steps.size())
      return Status::badInput(stepName(i) + ": " + std::string(def.name) + " must be the body's last step");
    if (!column_sum && i > 0 && isColumnSum(body.steps[i - 1]))
      return Status::badInput(stepName(i) + ": follows a column sum; column sums are the body's last steps");
    std::vector<TensorType> arg_types(step.args.size());
    std::optional<DType> arg_dtype;
    for (size_t a = 0; a < step.args.size(); ++a) {
      const FusedArg& arg = step.args[a];
      if (arg.kind == FusedArg::Kind::kOperand) arg_types[a] = operand_types[arg.index];
      if (arg.kind == FusedArg::Kind::kStep) arg_types[a] = types[arg.index];
      if (arg.kind != FusedArg::Kind::kLiteral && !arg_dtype) arg_dtype = arg_types[a].dtype;
    }
    if (!arg_dtype) return Status::badInput(stepName(i) + ": has only literal arguments");
    for (size_t a = 0; a < step.args.size(); ++a)
      if (step.args[a].kind == FusedArg::Kind::kLiteral) arg_types[a] = fusedLiteralType(*arg_dtype);
    auto results = inferResultTypes(def, arg_types, step.attrs);
    if (!results) return results.status().withContext(stepName(i) + ": ");
    if (results->size() != statement_end - i)
      return Status::badInput(stepName(i) + ": " + std::string(def.name) + " has " + std::to_string(results->size()) +
                              " results, the body names " + std::to_string(statement_end - i));
    op_results = *results;
    const TensorType& result = (*results)[0];
    if (column_sum) CLEAVE_TRY(checkColumnSum(body, i, arg_types[0], result));
    if (total_sum) CLEAVE_TRY(checkTotalSum(body, i, result));
    if (last_axis) {
      const auto& axis = step.attrs.find("axis");
      const int64_t rank = result.rank();
      const int64_t a = axis == step.attrs.end() ? std::get<int64_t>(def.findAttr("axis")->default_value)
                                                 : std::get<int64_t>(axis->second);
      if (rank == 0 || (a != -1 && a != rank - 1))
        return Status::badInput(stepName(i) + ": " + std::string(def.name) + " runs along axis " + std::to_string(a) +
                                "; in a fused body only along the last");
      if (result.dtype != DType::kF32 || step.args.empty() || step.args[0].kind == FusedArg::Kind::kLiteral)
        return Status::badInput(stepName(i) + ": " + std::string(def.name) + " in a fused body takes an f32 tensor");
      // Its further arguments are operands of the node: a row gradient's x of the result's type,
      // then per-column ones (a layer norm's scale and bias) shaped as the last dim.
      for (size_t a = 1; a < step.args.size(); ++a) {
        const bool whole_row = isRowGradientOp(step.op) && a == 1;
        const TensorType expected = whole_row ? result : TensorType{DType::kF32, {result.shape.back()}};
        if (step.args[a].kind != FusedArg::Kind::kOperand || arg_types[a] != expected)
          return Status::badInput(stepName(i) + ": " + std::string(def.name) + "'s argument " + std::to_string(a) +
                                  " in a fused body must be an operand x of " + expected.str() +
                                  (whole_row ? "" : " (one value per column)"));
      }
    }
    if (result.dtype != DType::kF32 && result.dtype != DType::kBF16)
      return Status::badInput(stepName(i) + ": gives " + result.str() + "; fused steps compute f32 or bf16");
    if (dtype && result.dtype != *dtype)
      return Status::badInput(stepName(i) + ": gives " + result.str() + ", the steps before it " + std::string(dtypeName(*dtype)));
    dtype = result.dtype;
    types.push_back(result);
  }
  // Every operand and step broadcasts to the returned steps' common shape; per-column steps hold
  // one value per column of it.
  if (body.returned.empty()) return Status::badInput("fused body: returns nothing");
  auto returned = [&](size_t step) {
    return std::find(body.returned.begin(), body.returned.end(), static_cast<int>(step)) != body.returned.end();
  };
  const int last = static_cast<int>(body.steps.size()) - 1;
  if (opDef(body.steps[last].op).fusable_along_last_axis && !returned(static_cast<size_t>(last)))
    return Status::badInput("fused body: its last step t" + std::to_string(last) + " (" +
                            std::string(opName(body.steps[last].op)) + ") must be returned");
  const bool lone = isLoneColumnSum(body);
  if (isPerColumn(body.steps[body.returned[0]]) && !lone)
    return Status::badInput("fused body: its first returned step t" + std::to_string(body.returned[0]) +
                            " holds one value per column; the steps of the full shape come first");
  const Shape& shape = fusedIterationShape(body, types, operand_types);
  for (int r : body.returned) {
    if (isTotalSum(body.steps[r])) continue;
    if (isColumnSum(body.steps[r]) && !lone && !returned(static_cast<size_t>(body.steps[r].args[0].index)))
      return Status::badInput("fused body: column sum t" + std::to_string(r) + " sums t" +
                              std::to_string(body.steps[r].args[0].index) +
                              ", which the body does not return; a column sum's input is returned too");
    if (isPerColumn(body.steps[r])) continue;
    if (types[r].shape != shape)
      return Status::badInput("fused body: returns t" + std::to_string(r) + " of shape " + types[r].str() + " and t" +
                              std::to_string(body.returned[0]) + " of " + types[body.returned[0]].str() +
                              "; returned steps share one shape (per-column steps aside)");
  }
  for (size_t i = 0; i < body.steps.size(); ++i)
    if (isPerColumn(body.steps[i]) && !returned(i))
      return Status::badInput(stepName(i) + ": holds one value per column and is not returned");
  auto reaches = [&](const Shape& s) {
    std::optional<Shape> joined = broadcastShapes(s, shape);
    return joined && *joined == shape;
  };
  for (size_t i = 0; i < types.size(); ++i)
    if (!isPerColumn(body.steps[i]) && !reaches(types[i].shape))
      return Status::badInput(stepName(i) + ": shape " + types[i].str() + " does not broadcast to the result shape");
  for (size_t o = 0; o < operand_types.size(); ++o)
    if (!reaches(operand_types[o].shape))
      return Status::badInput("fused body: operand x" + std::to_string(o) + " " + operand_types[o].str() +
                              " does not broadcast to the result shape");
  return types;
}

}  // namespace cleave
