// Unit tests for the .cir text format: printing, parsing, round trips, diagnostics and robustness.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "ir/text_format.h"

namespace cleave {
namespace {

Graph parseOk(std::string_view text, const std::string& file = "t.cir") {
  auto graph = parseGraph(text, file);
  EXPECT_TRUE(graph) << graph.status().message();
  return graph ? std::move(*graph) : Graph{};
}

// The error message of a text that must not parse.
std::string parseError(std::string_view text, int first_line = 1) {
  auto graph = parseGraph(text, "t.cir", first_line);
  EXPECT_FALSE(graph) << "parsed although it should not:\n" << text;
  if (graph) return "";
  EXPECT_EQ(graph.status().kind(), ErrorKind::kBadInput);
  return graph.status().message();
}

template <class T>
std::shared_ptr<const TensorData> tensorOf(DType dtype, Shape shape, const std::vector<T>& elements) {
  auto data = std::make_shared<TensorData>();
  data->type = TensorType{dtype, std::move(shape)};
  data->bytes.resize(elements.size() * sizeof(T));
  std::memcpy(data->bytes.data(), elements.data(), data->bytes.size());
  return data;
}

// Hex text of i32 elements 0..n-1, as the printer writes them.
std::string hexOfCounting(int n) {
  std::string hex;
  char buf[16];
  for (int i = 0; i < n; ++i) {
    std::snprintf(buf, sizeof buf, "%02x000000", i);
    hex += buf;
  }
  return hex;
}

// Printed text, in the printer's exact format, using every construct of the language.
std::string canonicalText() {
  return "graph @\"my model\" {\n"
         "  input %x : f32[2,4]\n"
         "  input %\"onnx::MatMul_12\" : f32[4,3]\n"
         "  input %labels : i64[2]\n"
         "  param %fc1.weight : f32[4,3] = kaiming_uniform {a = 2.23606797749979, mode = \"fan_in\", seed = 1}\n"
         "  param %fc1.bias : f32[3] = zeros\n"
         "  param %bn.mean : f32[4] = dense<f32[4]: [0, 0.5, 1, -1.5]> frozen\n"
         "  param %steps : i32[17] = dense<i32[17]: 0x" + hexOfCounting(17) + ">\n"
         "  param %\"/layer1/half\" : f16[2] = dense<f16[2]: 0x003c0040>\n"
         "  param %flags : bool[3] = dense<bool[3]: [1, 0, 1]> frozen\n"
         "  param %empty : f64[0] = dense<f64[0]: []>\n"
         "  param %scalar : f32[] = normal {mean = 0.0, std = 0.02}\n"
         "  param %block : f32[2,3] = zeros frozen shard of [8,3] at [2,0] by tp [4,0], dp [2,0]\n"
         "  %h = matmul(%x, %fc1.weight) : f32[2,3] loc(\"model.onnx\":\"MatMul_0\")\n"
         "  %0, %\"/b:1\" = split(%h) {axis = 1, sizes = [1, 2]} : f32[2,1], f32[2,2] loc(\"Split \\\"3\\\"\\t\")\n"
         "  %c = constant() {value = dense<i64[2]: [1, -2]>} : i64[2]\n"
         "  %g = gelu(%0) {approximate = \"tanh\"} : f32[2,1]\n"
         "  %cl = clip(%\"/b:1\") {max = 6.0, min = -inf} : f32[2,2]\n"
         "  %sm = softmax(%h) {axis = -1} : f32[2,3]\n"
         "  %r = reduce_sum(%cl) {axes = [], keepdims = 0} : f32[]\n"
         "  %odd = identity(%h) {\"odd name\" = [0.5, 1e+20, -0.0, nan, 3.0]} : f32[2,3]\n"
         "  %w2 = identity(%fc1.weight) : f32[4,3]\n"
         "  update %fc1.weight = %w2\n"
         "  output %g, %cl, %c, %r, %sm, %odd\n"
         "}\n";
}

// ---- Round trips ----

TEST(TextFormat, CanonicalTextPrintsBackUnchanged) {
  std::string text = canonicalText();
  Graph g = parseOk(text);
  EXPECT_EQ(printGraph(g), text);
}

TEST(TextFormat, ParsedGraphHoldsWhatTheTextSays) {
  Graph g = parseOk(canonicalText());
  EXPECT_EQ(g.name, "my model");
  ASSERT_EQ(g.inputs.size(), 3u);
  EXPECT_EQ(g.values[g.inputs[1]].name, "onnx::MatMul_12");
  EXPECT_EQ(g.values[g.inputs[2]].type, (TensorType{DType::kI64, {2}}));

  ASSERT_EQ(g.params.size(), 9u);
  const Param& block = g.params[8];
  EXPECT_EQ(block.full_shape, (std::vector<int64_t>{8, 3}));
  EXPECT_EQ(block.shard_offset, (std::vector<int64_t>{2, 0}));
  ASSERT_EQ(block.shard_steps.size(), 2u);
  EXPECT_EQ(block.shard_steps[0].axis, "tp");
  EXPECT_EQ(block.shard_steps[0].step, 4);
  EXPECT_EQ(block.shard_steps[1].axis, "dp");
  EXPECT_EQ(block.shard_steps[1].step, 2);
  const Param& weight = g.params[0];
  EXPECT_EQ(weight.init.kind, "kaiming_uniform");
  EXPECT_EQ(std::get<double>(weight.init.args.at("a")), 2.23606797749979);
  EXPECT_EQ(std::get<std::string>(weight.init.args.at("mode")), "fan_in");
  EXPECT_EQ(std::get<int64_t>(weight.init.args.at("seed")), 1);
  EXPECT_TRUE(weight.trainable);

  const Param& mean = g.params[2];
  EXPECT_FALSE(mean.trainable);
  EXPECT_EQ(mean.init.kind, "data");
  ASSERT_TRUE(mean.init.data);
  EXPECT_EQ(*mean.init.data, *tensorOf<float>(DType::kF32, {4}, {0.0f, 0.5f, 1.0f, -1.5f}));

  const Param& steps = g.params[3];
  std::vector<int32_t> counting(17);
  for (int i = 0; i < 17; ++i) counting[i] = i;
  EXPECT_EQ(*steps.init.data, *tensorOf<int32_t>(DType::kI32, {17}, counting));

  const Param& half = g.params[4];
  EXPECT_EQ(g.values[half.value].name, "/layer1/half");
  EXPECT_EQ(half.init.data->bytes, (std::vector<uint8_t>{0x00, 0x3c, 0x00, 0x40}));
  EXPECT_EQ(g.params[5].init.data->bytes, (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_TRUE(g.params[6].init.data->bytes.empty());

  ASSERT_EQ(g.nodes.size(), 9u);
  const Node& matmul = g.nodes[0];
  EXPECT_EQ(matmul.loc.file, "model.onnx");
  EXPECT_EQ(matmul.loc.node_name, "MatMul_0");
  EXPECT_EQ(matmul.loc.line, 0);

  const Node& split = g.nodes[1];
  EXPECT_EQ(split.loc.file, "");
  EXPECT_EQ(split.loc.node_name, "Split \"3\"\t");
  ASSERT_EQ(split.results.size(), 2u);
  EXPECT_EQ(g.values[split.results[1]].name, "/b:1");
  EXPECT_EQ(g.values[split.results[1]].type, (TensorType{DType::kF32, {2, 2}}));
  EXPECT_EQ(std::get<std::vector<int64_t>>(split.attrs.at("sizes")), (std::vector<int64_t>{1, 2}));

  const Node& constant = g.nodes[2];
  EXPECT_EQ(constant.operands.size(), 0u);
  const auto& value = std::get<std::shared_ptr<const TensorData>>(constant.attrs.at("value"));
  EXPECT_EQ(*value, *tensorOf<int64_t>(DType::kI64, {2}, {1, -2}));

  EXPECT_EQ(std::get<std::string>(g.nodes[3].attrs.at("approximate")), "tanh");
  EXPECT_EQ(std::get<double>(g.nodes[4].attrs.at("min")), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(std::get<int64_t>(g.nodes[5].attrs.at("axis")), -1);
  EXPECT_EQ(attrKind(g.nodes[6].attrs.at("axes")), AttrKind::kInts);  // [] parses as ints

  const auto& odd = std::get<std::vector<double>>(g.nodes[7].attrs.at("odd name"));
  ASSERT_EQ(odd.size(), 5u);
  EXPECT_EQ(odd[1], 1e20);
  EXPECT_TRUE(std::signbit(odd[2]));
  EXPECT_TRUE(std::isnan(odd[3]));

  ASSERT_EQ(g.updates.size(), 1u);
  EXPECT_EQ(g.updates[0].target, g.params[0].value);
  EXPECT_EQ(g.values[g.updates[0].new_value].name, "w2");
  EXPECT_EQ(g.outputs.size(), 6u);
}

TEST(TextFormat, BuiltGraphRoundTrips) {
  Graph g;
  g.name = "built";
  ValueId x = *g.addInput("x", TensorType{DType::kF32, {8, 16}});
  Initializer normal{"normal", {{"std", 0.02}, {"seed", int64_t{7}}}, nullptr};
  ValueId w = *g.addParam("onnx::Gemm_1", TensorType{DType::kF32, {16, 4}}, normal);
  Initializer data{"data", {}, tensorOf<float>(DType::kF32, {4}, {0.1f, 1.0f / 3, -0.0f, 1e-45f})};
  ValueId b = *g.addParam("bias", TensorType{DType::kF32, {4}}, data, false);
  auto h = g.addNode(OpId::matmul, {x, w}, {}, SourceLoc{"m.onnx", 0, 0, "Gemm_1"});
  ASSERT_TRUE(h) << h.status().message();
  auto y = g.addNode(OpId::add, {(*h)[0], b}, {}, {}, {"/out/y"});
  ASSERT_TRUE(y) << y.status().message();
  auto r = g.addNode(OpId::relu, {(*y)[0]});
  ASSERT_TRUE(r) << r.status().message();
  g.outputs = {(*r)[0]};

  std::string printed = printGraph(g);
  Graph reparsed = parseOk(printed);
  EXPECT_EQ(printGraph(reparsed), printed);
  EXPECT_EQ(*reparsed.params[1].init.data, *data.data);  // float elements survive exactly
  EXPECT_FALSE(reparsed.params[1].trainable);
  EXPECT_EQ(reparsed.nodes[0].loc.node_name, "Gemm_1");
  // A node without a loc(...) gets its text position, which is not printed.
  EXPECT_EQ(reparsed.nodes[1].loc.str(), "t.cir:6:3");
}

TEST(TextFormat, FloatAttributesPrintShortestAndReadBackExactly) {
  const std::vector<std::pair<double, std::string>> cases = {
      {1.0, "1.0"},   {1e-05, "1e-05"},         {0.02, "0.02"},     {-3.0, "-3.0"},
      {1e20, "1e+20"}, {0.1 + 0.2, "0.30000000000000004"}, {-0.0, "-0.0"},
      {std::numeric_limits<double>::infinity(), "inf"}, {std::numeric_limits<double>::denorm_min(), "5e-324"}};
  for (const auto& [value, text] : cases) {
    Graph g;
    ValueId x = *g.addInput("x", TensorType{DType::kF32, {2}});
    ASSERT_TRUE(g.addNodeWithTypes(OpId::dropout, {x}, {{"ratio", value}}, {}, {"y"}, {TensorType{DType::kF32, {2}}}));
    std::string printed = printGraph(g);
    EXPECT_NE(printed.find("{ratio = " + text + "}"), std::string::npos) << printed;
    Graph reparsed = parseOk(printed);
    double back = std::get<double>(reparsed.nodes[0].attrs.at("ratio"));
    EXPECT_EQ(std::memcmp(&back, &value, sizeof value), 0) << text;
  }
}

TEST(TextFormat, TensorLiteralsChooseListOrHex) {
  Graph g;
  auto add = [&](const std::string& name, std::shared_ptr<const TensorData> data) {
    ASSERT_TRUE(g.addParam(name, data->type, Initializer{"data", {}, data}));
  };
  add("small", tensorOf<float>(DType::kF32, {2}, {1.5f, -2.0f}));
  add("f64", tensorOf<double>(DType::kF64, {2}, {0.1, 1e300}));
  add("bytes", tensorOf<int8_t>(DType::kI8, {3}, {-128, 0, 127}));
  add("large", tensorOf<float>(DType::kF32, {17}, std::vector<float>(17, 1.0f)));
  add("nan", tensorOf<float>(DType::kF32, {1}, {std::numeric_limits<float>::quiet_NaN()}));
  add("half", tensorOf<uint16_t>(DType::kF16, {1}, {0x3c00}));
  std::string printed = printGraph(g);
  EXPECT_NE(printed.find("dense<f32[2]: [1.5, -2]>"), std::string::npos) << printed;
  EXPECT_NE(printed.find("dense<f64[2]: [0.1, 1e+300]>"), std::string::npos) << printed;
  EXPECT_NE(printed.find("dense<i8[3]: [-128, 0, 127]>"), std::string::npos) << printed;
  std::string ones;
  for (int i = 0; i < 17; ++i) ones += "0000803f";
  EXPECT_NE(printed.find("dense<f32[17]: 0x" + ones + ">"), std::string::npos) << printed;
  EXPECT_NE(printed.find("dense<f32[1]: 0x0000c07f>"), std::string::npos) << printed;  // NaN keeps its bits
  EXPECT_NE(printed.find("dense<f16[1]: 0x003c>"), std::string::npos) << printed;
  Graph reparsed = parseOk(printed);
  for (size_t i = 0; i < g.params.size(); ++i) EXPECT_EQ(*reparsed.params[i].init.data, *g.params[i].init.data);
}

TEST(TextFormat, ListAndHexFormsReadTheSameBytes) {
  Graph from_list = parseOk("graph @g { param %p : i64[2] = dense<i64[2]: [1, -1]> }");
  Graph from_hex = parseOk("graph @g { param %p : i64[2] = dense<i64[2]: 0x0100000000000000FFFFFFFFFFFFFFFF> }");
  EXPECT_EQ(*from_list.params[0].init.data, *from_hex.params[0].init.data);
}

// ---- Parsing details ----

TEST(TextFormat, OmittedResultTypesAreInferred) {
  Graph g = parseOk(
      "// an MLP fragment\n"
      "graph @mlp {\n"
      "  input %x : f32[128,784]\n"
      "  param %w : f32[784,512] = zeros\n"
      "  %h = matmul(%x, %w)\n"
      "  %a, %b = split(%h) {axis = 1, sizes = [256, 256]}\n"
      "  %c = constant() {value = dense<i64[2]: [1, 2]>}\n"
      "  %r = relu(%a)\n"
      "  output %r, %b, %c\n"
      "}\n");
  auto type_of = [&](const char* name) { return g.values[g.findValue(name)].type; };
  EXPECT_EQ(type_of("h"), (TensorType{DType::kF32, {128, 512}}));
  EXPECT_EQ(type_of("a"), (TensorType{DType::kF32, {128, 256}}));
  EXPECT_EQ(type_of("b"), (TensorType{DType::kF32, {128, 256}}));
  EXPECT_EQ(type_of("c"), (TensorType{DType::kI64, {2}}));
  EXPECT_EQ(type_of("r"), (TensorType{DType::kF32, {128, 256}}));
  EXPECT_EQ(g.nodes[1].loc.str(), "t.cir:6:3");
  EXPECT_EQ(g.nodes[1].loc.file, "t.cir");
  EXPECT_EQ(g.nodes[1].loc.col, 3);
}

TEST(TextFormat, DeclaredTypesAreKeptForTheVerifier) {
  Graph g = parseOk("graph @g {\n  input %x : f32[2]\n  %y = relu(%x) : i64[7]\n  output %y\n}\n");
  EXPECT_EQ(g.values[g.findValue("y")].type, (TensorType{DType::kI64, {7}}));
}

TEST(TextFormat, InputsAndParamsMayComeAnywhereBeforeUse) {
  Graph g = parseOk(
      "graph @g {\n"
      "  input %x : f32[2]\n"
      "  %y = relu(%x)\n"
      "  param %p : f32[2] = ones\n"
      "  %z = add(%y, %p)\n"
      "  output %z\n"
      "}");
  EXPECT_EQ(g.params.size(), 1u);
  // Printing puts declarations in their canonical order.
  EXPECT_LT(printGraph(g).find("param %p"), printGraph(g).find("%y = relu"));
}

TEST(TextFormat, FirstLineOffsetsLineNumbers) {
  Graph g = parseGraph("graph @g {\n  input %x : f32[2]\n  %y = relu(%x)\n  output %y\n}\n", "split.cir", 40).value();
  EXPECT_EQ(g.nodes[0].loc.str(), "split.cir:42:3");
}

TEST(TextFormat, CommentsAndWhitespaceAreIgnored) {
  Graph g = parseOk("// header\ngraph @g{input %x:f32[2]// trailing\n%y=relu(%x)output %y}// end\n\n");
  EXPECT_EQ(g.nodes.size(), 1u);
}

// ---- Diagnostics ----

TEST(TextFormatErrors, NameWhatAndWhere) {
  const std::string head = "graph @g {\n  input %x : f32[2,2]\n";
  EXPECT_EQ(parseError(head + "  %h = relu(%x %x)\n}\n"), "t.cir:3:16: expected ')' after operands");
  EXPECT_EQ(parseError(head + "  %h = matmull(%x, %x)\n}\n"), "t.cir:3:8: unknown op 'matmull'");
  EXPECT_EQ(parseError(head + "  %h = relu(%y)\n}\n"), "t.cir:3:13: use of undefined value '%y'");
  EXPECT_EQ(parseError(head + "  %h = relu(%x)\n  %h = relu(%x)\n}\n"), "t.cir:4:3: value '%h' is defined twice");
  EXPECT_EQ(parseError(head + "  %a, %a = split(%x) {axis = 0, sizes = [1, 1]}\n}\n"),
            "t.cir:3:7: value '%a' is defined twice");
  EXPECT_EQ(parseError(head + "  input %x : f32[2]\n}\n"), "t.cir:3:9: value '%x' is defined twice");
  EXPECT_EQ(parseError(head + "  input %y : f31[2]\n}\n"), "t.cir:3:14: unknown dtype 'f31'");
  EXPECT_EQ(parseError(head + "  param %p : f32[2,2] = dense<f32[2,2]: [1, 2, 3]>\n}\n"),
            "t.cir:3:41: tensor literal has 3 elements, type f32[2,2] needs 4");
  EXPECT_EQ(parseError(head + "  param %p : f32[2] = dense<f32[2]: [1, 2, 3]>\n}\n"),
            "t.cir:3:37: tensor literal has 3 elements, type f32[2] needs 2");
  EXPECT_EQ(parseError(head + "  output %x\n}\n}\n"),
            "t.cir:5:1: unexpected '}' after the graph's closing '}' (a text holds one graph)");
  EXPECT_EQ(parseError(head + "  output %x\n}\ngraph @h {\n}\n"),
            "t.cir:5:1: unexpected 'graph' after the graph's closing '}' (a text holds one graph)");
}

TEST(TextFormatErrors, InferenceFailureCarriesTheLocation) {
  std::string message = parseError("graph @g {\n  input %x : f32[2,3]\n  %h = matmul(%x, %x)\n}\n");
  EXPECT_EQ(message.rfind("t.cir:3:3: ", 0), 0u) << message;
  EXPECT_NE(message.find("matmul"), std::string::npos) << message;
  message = parseError("graph @g {\n  input %x : f32[4]\n  %a, %b = split(%x) {axis = 0, sizes = [1, 1, 2]}\n}\n");
  EXPECT_EQ(message, "t.cir:3:3: split gives 3 result(s) but 2 are named");
  message = parseError("graph @g {\n  input %x : f32[4]\n  %a, %b = relu(%x) : f32[4]\n}\n");
  EXPECT_EQ(message, "t.cir:3:3: 2 result(s) named but 1 type(s) given");
}

TEST(TextFormatErrors, LinesFollowFirstLine) {
  EXPECT_EQ(parseError("graph @g {\n  %h = relu(%y)\n}\n", 10), "t.cir:11:13: use of undefined value '%y'");
}

TEST(TextFormatErrors, LexicalProblems) {
  EXPECT_EQ(parseError("graph @g {\n  input %\"abc : f32[2]\n}\n"), "t.cir:2:9: unterminated string");
  EXPECT_EQ(parseError("graph @g {\n  input %\"a\\qb\" : f32[2]\n}\n"),
            "t.cir:2:12: unknown escape '\\q' in string (use \\n \\t \\r \\\" \\\\ or \\xHH)");
  EXPECT_EQ(parseError("graph @g {\n  input %\"a\\x4\" : f32[2]\n}\n"), "t.cir:2:12: escape '\\x' needs two hex digits");
  EXPECT_EQ(parseError("graph @g {\n  input $x : f32[2]\n}\n"), "t.cir:2:9: unexpected character '$'");
  EXPECT_EQ(parseError("graph @g {\n  input % : f32[2]\n}\n"), "t.cir:2:9: expected a name after '%'");
  EXPECT_EQ(parseError(std::string("graph @g {\n  input %x : f32[2]\x01\n}\n")),
            "t.cir:2:20: unexpected character byte 0x01");
  EXPECT_EQ(parseError("graph @g {\n  input %x : f32[2]\n"), "t.cir:3:1: expected '}' at the end of graph @g");
  EXPECT_EQ(parseError(""), "t.cir:1:1: expected 'graph @name {'");
}

TEST(TextFormatErrors, SizesAndNumbersAreBounded) {
  const std::string head = "graph @g {\n";
  EXPECT_EQ(parseError(head + "  input %x : f32[2,-3]\n}\n"), "t.cir:2:20: negative dimension -3");
  EXPECT_EQ(parseError(head + "  input %x : f32[99999999999999999999]\n}\n"),
            "t.cir:2:18: integer '99999999999999999999' is out of range for 64 bits");
  EXPECT_EQ(parseError(head + "  input %x : f32[4611686018427387904,2]\n}\n"),
            "t.cir:2:14: type is too large (its byte size overflows 64 bits)");
  // A plain type may be huge; a literal may not.
  parseOk(head + "  input %x : u8[1000000000000000]\n}\n");
  EXPECT_EQ(parseError(head + "  param %p : u8[1000000000000000] = dense<u8[1000000000000000]: 0x00>\n}\n"),
            "t.cir:2:43: tensor literal type u8[1000000000000000] is too large (1000000000000000 bytes)");
  EXPECT_EQ(parseError(head + "  param %p : f32[2] = dense<f32[2]: 0x0000803f>\n}\n"),
            "t.cir:2:37: tensor literal has 4 bytes, type f32[2] needs 8");
  EXPECT_EQ(parseError(head + "  param %p : f32[1] = dense<f32[1]: 0x0000803>\n}\n"),
            "t.cir:2:37: hex data has an odd number of digits");
  EXPECT_EQ(parseError(head + "  param %p : i8[1] = dense<i8[1]: [300]>\n}\n"),
            "t.cir:2:36: element 300 is out of range for i8");
  EXPECT_EQ(parseError(head + "  param %p : f32[1] = dense<f32[1]: [1e39]>\n}\n"),
            "t.cir:2:38: number '1e39' is out of range for f32");
  EXPECT_EQ(parseError(head + "  param %p : f16[1] = dense<f16[1]: [1]>\n}\n"),
            "t.cir:2:38: f16 tensor literals are written as hex bytes (0x...), not as a list");
  EXPECT_EQ(parseError(head + "  param %p : f32[2] = dense<f32[1]: [1]>\n}\n"),
            "t.cir:2:23: parameter '%p' is f32[2] but its data is f32[1]");
}

TEST(TextFormatErrors, DeclarationProblems) {
  const std::string head = "graph @g {\n  input %x : f32[2]\n";
  EXPECT_EQ(parseError(head + "  param %p : f32[2] = gaussian\n}\n"),
            "t.cir:3:23: unknown initializer 'gaussian' (zeros, ones, constant, normal, uniform, xavier_uniform, "
            "xavier_normal, kaiming_uniform, kaiming_normal, or dense<...>)");
  EXPECT_EQ(parseError(head + "  %y = relu(%x) {a = 1, a = 2}\n}\n"), "t.cir:3:25: attribute 'a' is given twice");
  EXPECT_EQ(parseError(head + "  %y = relu(%x) {a = foo}\n}\n"),
            "t.cir:3:22: expected an attribute value (number, string, list or dense<...>), found 'foo'");
  EXPECT_EQ(parseError(head + "  output %x\n  output %x\n}\n"),
            "t.cir:4:3: the graph has a second output line (list every output on one line)");
  EXPECT_EQ(parseError(head + "  %y = relu(%x) loc(\"a\" \"b\")\n}\n"), "t.cir:3:25: expected ')' after loc(...)");
  EXPECT_EQ(parseError(head + "  input\n}\n"), "t.cir:4:1: expected '%name' after 'input'");
  EXPECT_EQ(parseError(head + "  update %x = %nope\n}\n"), "t.cir:3:15: use of undefined value '%nope'");
  EXPECT_EQ(parseError(head + "  param %p : f32[2] = zeros shard of [4] at [2] by tp [2, 0]\n}\n"),
            "t.cir:3:55: the steps of '%p' over tp need one entry per dim");
  EXPECT_EQ(parseError(head + "  param %p : f32[2] = zeros shard of [4] at [2] by [2]\n}\n"),
            "t.cir:3:52: expected a mesh axis (dp, tp) after 'by'");
}

// ---- Files ----

class TextFormatFiles : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& text) {
    std::string path = (std::filesystem::path(::testing::TempDir()) / name).string();
    std::ofstream(path) << text;
    return path;
  }
};

TEST_F(TextFormatFiles, LoadParsesAndVerifies) {
  std::string good = write("good.cir", "graph @g {\n  input %x : f32[2]\n  %y = relu(%x)\n  output %y\n}\n");
  auto graph = loadGraphFile(good);
  ASSERT_TRUE(graph) << graph.status().message();
  EXPECT_EQ(graph->nodes[0].loc.str(), good + ":3:3");

  std::string bad = write("bad.cir", "graph @g {\n  input %x : f32[2]\n  %y = relu(%x) : f32[3]\n  output %y\n}\n");
  EXPECT_TRUE(parseGraphFile(bad));
  auto verified = loadGraphFile(bad);
  ASSERT_FALSE(verified);
  EXPECT_EQ(verified.status().kind(), ErrorKind::kBadInput);
  EXPECT_EQ(verified.status().message().rfind(bad + ":3:3: relu '%y': ", 0), 0u) << verified.status().message();
}

TEST_F(TextFormatFiles, MissingFileIsBadInput) {
  auto graph = parseGraphFile("/nonexistent/model.cir");
  ASSERT_FALSE(graph);
  EXPECT_EQ(graph.status().kind(), ErrorKind::kBadInput);
  EXPECT_EQ(graph.status().message(), "cannot read /nonexistent/model.cir: No such file or directory");
  auto dir = parseGraphFile(::testing::TempDir());
  ASSERT_FALSE(dir);
  EXPECT_EQ(dir.status().message().rfind("cannot read ", 0), 0u);
}

// ---- Robustness and speed ----

TEST(TextFormatRobustness, EveryTruncationFailsCleanly) {
  const std::string text = canonicalText();
  for (size_t n = 0; n < text.size(); ++n) {
    auto graph = parseGraph(std::string_view(text).substr(0, n), "t.cir");
    if (!graph) {
      EXPECT_EQ(graph.status().kind(), ErrorKind::kBadInput);
      EXPECT_EQ(graph.status().message().rfind("t.cir:", 0), 0u) << graph.status().message();
    }
  }
  // Only the text itself (or the text less its final newline) is a whole graph.
  EXPECT_TRUE(parseGraph(std::string_view(text).substr(0, text.size() - 1), "t.cir"));
  EXPECT_FALSE(parseGraph(std::string_view(text).substr(0, text.size() - 2), "t.cir"));
}

TEST(TextFormatRobustness, RandomByteEditsNeverCrash) {
  const std::string text = canonicalText();
  const std::string alphabet = "%@\"\\{}[]()<>,:=-.0123456789xefinabz \n/";
  std::mt19937 rng(1234);
  for (int round = 0; round < 3000; ++round) {
    std::string mutated = text;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      size_t at = rng() % mutated.size();
      switch (rng() % 3) {
        case 0: mutated[at] = alphabet[rng() % alphabet.size()]; break;
        case 1: mutated.erase(at, 1 + rng() % 8); break;
        default: mutated.insert(at, 1, static_cast<char>(rng() % 256)); break;
      }
    }
    auto graph = parseGraph(mutated, "t.cir");
    if (graph) {
      // Whatever parses prints to text that parses to the same print.
      std::string printed = printGraph(*graph);
      auto again = parseGraph(printed, "t.cir");
      ASSERT_TRUE(again) << again.status().message() << "\n" << printed;
      EXPECT_EQ(printGraph(*again), printed);
    } else {
      EXPECT_EQ(graph.status().message().rfind("t.cir:", 0), 0u) << graph.status().message();
    }
  }
}

TEST(TextFormatRobustness, HundredThousandLinesParseQuickly) {
  // 50k inferred nodes and 50k nodes with declared types: a chain, so every operand is a lookup.
  std::string text = "graph @big {\n  input %v0 : f32[64,64]\n";
  const int kNodes = 100000;
  for (int i = 1; i <= kNodes; ++i) {
    text += "  %v" + std::to_string(i) + " = relu(%v" + std::to_string(i - 1) + ")";
    text += i % 2 ? " : f32[64,64]\n" : "\n";
  }
  text += "  output %v" + std::to_string(kNodes) + "\n}\n";
  auto start = std::chrono::steady_clock::now();
  Graph g = parseOk(text);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(g.nodes.size(), static_cast<size_t>(kNodes));
  // Well under a second in a release build; the bound only catches quadratic behaviour.
  EXPECT_LT(seconds, 5.0);
  start = std::chrono::steady_clock::now();
  std::string printed = printGraph(g);
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 5.0);
}

}  // namespace
}  // namespace cleave
