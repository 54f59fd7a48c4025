// Unit tests of the pass registry, pipeline parsing, the pass manager and the first passes.
#include "passes/core/pass_manager.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <set>

#include "ir/verifier.h"

namespace cleave {
namespace {

// Parses `pipeline` and runs it over `graph`; fails the test when the pipeline does not parse.
Status runPipeline(const std::string& pipeline, Graph& graph) {
  auto parsed = parsePipeline(pipeline);
  EXPECT_TRUE(parsed.hasValue()) << parsed.status().message();
  if (!parsed) return parsed.status();
  return PassManager(std::move(*parsed)).run(graph);
}

ValueId addOne(Graph& graph, OpId op, std::vector<ValueId> operands, AttrMap attrs = {}, std::string name = "") {
  auto results = graph.addNode(op, std::move(operands), std::move(attrs), {}, name.empty() ? std::vector<std::string>{}
                                                                                          : std::vector<std::string>{name});
  EXPECT_TRUE(results.hasValue()) << results.status().message();
  return results ? (*results)[0] : kNoValue;
}

ValueId addInput(Graph& graph, const std::string& name, TensorType type) {
  auto v = graph.addInput(name, std::move(type));
  EXPECT_TRUE(v.hasValue());
  return *v;
}

std::vector<std::string> opNames(const Graph& graph) {
  std::vector<std::string> names;
  for (const Node& node : graph.nodes) names.emplace_back(opName(node.op));
  return names;
}

std::string nameOf(const Graph& graph, ValueId v) { return graph.values[v].name; }

const TensorType kMatrix{DType::kF32, {2, 2}};

// ---- registry and pipeline parsing ----

TEST(PassRegistry, ListsEveryPassOnceSortedByName) {
  std::set<std::string> seen;
  std::string previous;
  for (const PassInfo& pass : allPasses()) {
    EXPECT_TRUE(seen.insert(pass.name).second) << pass.name << " is registered twice";
    EXPECT_LT(previous, pass.name);
    EXPECT_NE(pass.run, nullptr) << pass.name;
    EXPECT_FALSE(pass.summary.empty()) << pass.name;
    previous = pass.name;
  }
  for (const char* name : {"verify", "infer-shapes", "dce", "cse", "fold-constants"}) {
    EXPECT_TRUE(seen.count(name)) << name;
    ASSERT_NE(findPass(name), nullptr) << name;
    EXPECT_EQ(findPass(name)->name, name);
  }
  EXPECT_EQ(findPass("no-such-pass"), nullptr);
}

TEST(PipelineParsing, PassesInOrderWithDefaults) {
  auto pipeline = parsePipeline("dce,cse, infer-shapes");
  ASSERT_TRUE(pipeline.hasValue()) << pipeline.status().message();
  ASSERT_EQ(pipeline->size(), 3u);
  EXPECT_EQ((*pipeline)[0].pass->name, "dce");
  EXPECT_EQ((*pipeline)[1].pass->name, "cse");
  EXPECT_EQ((*pipeline)[2].pass->name, "infer-shapes");
  EXPECT_EQ((*pipeline)[2].options.getInt("batch"), 0);
}

TEST(PipelineParsing, EmptyPipelineIsAllowed) {
  auto pipeline = parsePipeline("");
  ASSERT_TRUE(pipeline.hasValue());
  EXPECT_TRUE(pipeline->empty());
}

TEST(PipelineParsing, OptionsInBraces) {
  auto pipeline = parsePipeline("infer-shapes{batch=8},fold-constants{max-elements=10},dce");
  ASSERT_TRUE(pipeline.hasValue()) << pipeline.status().message();
  ASSERT_EQ(pipeline->size(), 3u);
  EXPECT_EQ((*pipeline)[0].options.getInt("batch"), 8);
  EXPECT_EQ((*pipeline)[1].options.getInt("max-elements"), 10);
  auto spaced = parsePipeline("infer-shapes{ batch=4 } , dce");
  ASSERT_TRUE(spaced.hasValue()) << spaced.status().message();
  EXPECT_EQ((*spaced)[0].options.getInt("batch"), 4);
  auto defaulted = parsePipeline("fold-constants{}");
  ASSERT_TRUE(defaulted.hasValue()) << defaulted.status().message();
  EXPECT_EQ((*defaulted)[0].options.getInt("max-elements"), 1000000);
}

// Expects `pipeline` to fail to parse with a usage error whose message contains `fragment`.
void expectUsageError(const std::string& pipeline, const std::string& fragment) {
  auto parsed = parsePipeline(pipeline);
  ASSERT_FALSE(parsed.hasValue()) << pipeline;
  EXPECT_EQ(parsed.status().kind(), ErrorKind::kUsage) << pipeline;
  EXPECT_NE(parsed.status().message().find(fragment), std::string::npos)
      << pipeline << " gave: " << parsed.status().message();
}

TEST(PipelineParsing, Errors) {
  expectUsageError("dce,nope", "unknown pass 'nope' (passes: ");
  expectUsageError("nope", "cse, dce, fold-constants");
  expectUsageError("dce{x=1}", "pass 'dce' has no option 'x' (it takes none)");
  expectUsageError("infer-shapes{bach=1}", "has no option 'bach' (options: batch)");
  expectUsageError("infer-shapes{batch=abc}", "option 'batch' needs an integer, got 'abc'");
  expectUsageError("infer-shapes{batch=3.5}", "needs an integer");
  expectUsageError("dce,,cse", "expected a pass name at column 5");
  expectUsageError("dce,", "expected a pass name");
  expectUsageError("infer-shapes{batch=1", "missing '}'");
  expectUsageError("infer-shapes{batch}", "expected '=' after option 'batch'");
  expectUsageError("infer-shapes{batch=}", "option 'batch' has no value");
  expectUsageError("dce cse", "expected ',' or '{' after pass 'dce'");
  expectUsageError("infer-shapes{batch=-2}", "infer-shapes: batch must not be negative, got -2");
  expectUsageError("fold-constants{max-elements=-1}", "max-elements must not be negative");
}

// ---- the pass manager ----

TEST(PassManager, CallsBackAfterEachPassInOrder) {
  Graph graph;
  ValueId x = addInput(graph, "x", kMatrix);
  graph.outputs = {addOne(graph, OpId::relu, {x})};
  auto pipeline = parsePipeline("verify,dce,cse");
  ASSERT_TRUE(pipeline.hasValue());
  PassManager manager(std::move(*pipeline));
  std::vector<std::string> ran;
  manager.setAfterPassCallback([&](const PassInfo& pass, const Graph&) { ran.push_back(pass.name); });
  ASSERT_TRUE(manager.run(graph).isOk());
  EXPECT_EQ(ran, (std::vector<std::string>{"verify", "dce", "cse"}));
}

TEST(PassManager, InvalidGraphAfterAPassIsAnInternalErrorNamingIt) {
  const PassInfo breaks_outputs{"drop-outputs", "clears the outputs (a broken pass)", {},
                                [](Graph& graph, const PassOptions&) {
                                  graph.outputs.clear();
                                  return Status::ok();
                                }};
  Graph graph;
  ValueId x = addInput(graph, "x", kMatrix);
  graph.outputs = {addOne(graph, OpId::relu, {x})};
  Pipeline pipeline{PassStep{&breaks_outputs, PassOptions::defaultsFor(breaks_outputs)}};
  bool called_back = false;
  PassManager manager(std::move(pipeline));
  manager.setAfterPassCallback([&](const PassInfo&, const Graph&) { called_back = true; });
  Status status = manager.run(graph);
  ASSERT_FALSE(status.isOk());
  EXPECT_EQ(status.kind(), ErrorKind::kInternal);
  EXPECT_NE(status.message().find("pass 'drop-outputs' left an invalid graph: "), std::string::npos) << status.message();
  EXPECT_FALSE(called_back);
}

TEST(PassManager, AnUndeclaredOptionIsAnInternalErrorNamingThePassNotAnExit) {
  const PassInfo asks_wrongly{"asks-wrongly", "reads an option it does not declare (a broken pass)",
                              {{"depth", int64_t{2}, "a declared option"}},
                              [](Graph&, const PassOptions& options) {
                                EXPECT_EQ(options.getInt("depth"), 2);
                                EXPECT_EQ(options.getInt("width"), 0);      // not declared
                                EXPECT_EQ(options.getString("depth"), "");  // declared as an integer
                                return Status::ok();
                              }};
  Graph graph;
  ValueId x = addInput(graph, "x", kMatrix);
  graph.outputs = {addOne(graph, OpId::relu, {x})};
  Pipeline pipeline{PassStep{&asks_wrongly, PassOptions::defaultsFor(asks_wrongly)}};
  Status status = PassManager(std::move(pipeline)).run(graph);
  ASSERT_FALSE(status.isOk());
  EXPECT_EQ(status.kind(), ErrorKind::kInternal);
  EXPECT_EQ(status.message(), "pass 'asks-wrongly': pass option 'width' is not declared by its pass");
}

TEST(PassManager, PassErrorStopsThePipeline) {
  Graph graph;
  ValueId x = addInput(graph, "x", kMatrix);
  graph.outputs = {addOne(graph, OpId::reshape, {x}, {{"shape", std::vector<int64_t>{4}}}, "flat")};
  auto pipeline = parsePipeline("infer-shapes{batch=3},dce");
  ASSERT_TRUE(pipeline.hasValue());
  std::vector<std::string> ran;
  PassManager manager(std::move(*pipeline));
  manager.setAfterPassCallback([&](const PassInfo& pass, const Graph&) { ran.push_back(pass.name); });
  Status status = manager.run(graph);
  ASSERT_FALSE(status.isOk());
  EXPECT_EQ(status.kind(), ErrorKind::kBadInput);
  EXPECT_NE(status.message().find("reshape '%flat': "), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("(with batch 3)"), std::string::npos) << status.message();
  EXPECT_TRUE(ran.empty());
}

// ---- passes ----

TEST(InferShapesPass, BatchOptionPropagates) {
  Graph graph;
  ValueId x = addInput(graph, "x", TensorType{DType::kF32, {4, 8}});
  auto w = graph.addParam("w", TensorType{DType::kF32, {8, 16}}, Initializer{});
  ASSERT_TRUE(w.hasValue());
  ValueId h = addOne(graph, OpId::matmul, {x, *w});
  ValueId y = addOne(graph, OpId::reduce_sum, {h}, {{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{0}}});
  graph.outputs = {y};
  ASSERT_TRUE(runPipeline("infer-shapes{batch=32}", graph).isOk());
  EXPECT_EQ(graph.values[x].type, (TensorType{DType::kF32, {32, 8}}));
  EXPECT_EQ(graph.values[*w].type, (TensorType{DType::kF32, {8, 16}}));
  EXPECT_EQ(graph.values[h].type, (TensorType{DType::kF32, {32, 16}}));
  EXPECT_EQ(graph.values[y].type, (TensorType{DType::kF32, {32}}));
}

TEST(InferShapesPass, WithoutBatchRecomputesStaleTypes) {
  Graph graph;
  ValueId x = addInput(graph, "x", kMatrix);
  ValueId y = addOne(graph, OpId::relu, {x});
  graph.outputs = {y};
  graph.values[x].type = TensorType{DType::kF32, {5, 3}};  // an edited input: the graph is stale
  EXPECT_FALSE(verifyGraph(graph).isOk());
  ASSERT_TRUE(runPipeline("infer-shapes", graph).isOk());
  EXPECT_EQ(graph.values[y].type, (TensorType{DType::kF32, {5, 3}}));
}

TEST(DcePass, RemovesNodesThatReachNoOutput) {
  Graph graph;
  ValueId x = addInput(graph, "x", kMatrix);
  ASSERT_TRUE(graph.addParam("unused", kMatrix, Initializer{}).hasValue());
  ValueId a = addOne(graph, OpId::relu, {x}, {}, "a");
  ValueId dead = addOne(graph, OpId::neg, {x}, {}, "dead");
  addOne(graph, OpId::exp, {dead}, {}, "also_dead");
  graph.outputs = {addOne(graph, OpId::add, {a, a}, {}, "y")};
  ASSERT_TRUE(runPipeline("dce", graph).isOk());
  EXPECT_EQ(opNames(graph), (std::vector<std::string>{"relu", "add"}));
  EXPECT_EQ(graph.findValue("dead"), kNoValue);
  EXPECT_EQ(graph.findValue("also_dead"), kNoValue);
  EXPECT_NE(graph.findValue("unused"), kNoValue);  // parameters stay
  EXPECT_EQ(graph.params.size(), 1u);
  EXPECT_EQ(graph.inputs.size(), 1u);
  EXPECT_EQ(nameOf(graph, graph.outputs[0]), "y");
}

TEST(DcePass, KeepsNodesThatFeedAStateUpdate) {
  Graph graph;
  ValueId x = addInput(graph, "x", kMatrix);
  auto w = graph.addParam("w", kMatrix, Initializer{});
  ASSERT_TRUE(w.hasValue());
  ValueId next = addOne(graph, OpId::neg, {*w}, {}, "w_next");
  graph.updates.push_back(StateUpdate{*w, next});
  graph.outputs = {addOne(graph, OpId::relu, {x}, {}, "y")};
  ASSERT_TRUE(runPipeline("dce", graph).isOk());
  EXPECT_EQ(opNames(graph), (std::vector<std::string>{"neg", "relu"}));
  ASSERT_EQ(graph.updates.size(), 1u);
  EXPECT_EQ(nameOf(graph, graph.updates[0].new_value), "w_next");
}

TEST(CsePass, MergesEqualNodesAndRewritesUses) {
  Graph graph;
  ValueId x = addInput(graph, "x", kMatrix);
  ValueId a = addOne(graph, OpId::relu, {x}, {}, "a");
  ValueId b = addOne(graph, OpId::relu, {x}, {}, "b");
  ValueId c = addOne(graph, OpId::exp, {a}, {}, "c");
  ValueId d = addOne(graph, OpId::exp, {b}, {}, "d");  // equal to c once b is a
  graph.outputs = {addOne(graph, OpId::add, {c, d}, {}, "y")};
  ASSERT_TRUE(runPipeline("cse", graph).isOk());
  EXPECT_EQ(opNames(graph), (std::vector<std::string>{"relu", "exp", "add"}));
  const Node& add = graph.nodes[2];
  EXPECT_EQ(nameOf(graph, add.operands[0]), "c");
  EXPECT_EQ(nameOf(graph, add.operands[1]), "c");
  EXPECT_EQ(graph.findValue("b"), kNoValue);
}

TEST(CsePass, KeepsNodesWithDifferentAttributesDropoutAndOutputs) {
  Graph graph;
  ValueId x = addInput(graph, "x", kMatrix);
  ValueId s0 = addOne(graph, OpId::softmax, {x}, {{"axis", int64_t{0}}}, "s0");
  ValueId s1 = addOne(graph, OpId::softmax, {x}, {{"axis", int64_t{1}}}, "s1");
  ValueId d0 = addOne(graph, OpId::dropout, {x}, {{"ratio", 0.5}}, "d0");
  ValueId d1 = addOne(graph, OpId::dropout, {x}, {{"ratio", 0.5}}, "d1");
  ValueId o0 = addOne(graph, OpId::relu, {x}, {}, "o0");
  ValueId o1 = addOne(graph, OpId::relu, {x}, {}, "o1");  // an output: keeps its name
  ValueId sum = addOne(graph, OpId::add, {s0, s1}, {}, "sum");
  ValueId noise = addOne(graph, OpId::add, {d0, d1}, {}, "noise");
  graph.outputs = {sum, noise, o0, o1};
  ASSERT_TRUE(runPipeline("cse", graph).isOk());
  EXPECT_EQ(graph.nodes.size(), 8u);
  std::vector<std::string> outputs;
  for (ValueId v : graph.outputs) outputs.push_back(nameOf(graph, v));
  EXPECT_EQ(outputs, (std::vector<std::string>{"sum", "noise", "o0", "o1"}));
}

TEST(CsePass, MergesEqualConstantsByContents) {
  auto tensor = [](int64_t v) {
    TensorData t{TensorType{DType::kI64, {1}}, std::vector<uint8_t>(8)};
    std::memcpy(t.bytes.data(), &v, 8);
    return std::make_shared<const TensorData>(std::move(t));
  };
  Graph graph;
  ValueId a = addOne(graph, OpId::constant, {}, {{"value", tensor(3)}}, "a");
  ValueId b = addOne(graph, OpId::constant, {}, {{"value", tensor(3)}}, "b");
  ValueId c = addOne(graph, OpId::constant, {}, {{"value", tensor(4)}}, "c");
  ValueId ab = addOne(graph, OpId::add, {a, b}, {}, "ab");
  graph.outputs = {addOne(graph, OpId::add, {ab, c}, {}, "y")};
  ASSERT_TRUE(runPipeline("cse", graph).isOk());
  EXPECT_EQ(opNames(graph), (std::vector<std::string>{"constant", "constant", "add", "add"}));
  EXPECT_EQ(nameOf(graph, graph.nodes[2].operands[1]), "a");
}

TEST(FoldConstantsPass, FoldsChainsAndLeavesDeadConstantsForDce) {
  auto vector = [](std::vector<int64_t> values) {
    TensorData t{TensorType{DType::kI64, {static_cast<int64_t>(values.size())}}, std::vector<uint8_t>(values.size() * 8)};
    std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
    return std::make_shared<const TensorData>(std::move(t));
  };
  Graph graph;
  ValueId x = addInput(graph, "x", TensorType{DType::kI64, {2}});
  ValueId a = addOne(graph, OpId::constant, {}, {{"value", vector({1, 2})}}, "a");
  ValueId b = addOne(graph, OpId::constant, {}, {{"value", vector({10, 20})}}, "b");
  ValueId sum = addOne(graph, OpId::add, {a, b}, {}, "sum");
  ValueId twice = addOne(graph, OpId::mul, {sum, sum}, {}, "twice");
  graph.outputs = {addOne(graph, OpId::add, {x, twice}, {}, "y")};
  ASSERT_TRUE(runPipeline("fold-constants", graph).isOk());
  EXPECT_EQ(opNames(graph), (std::vector<std::string>{"constant", "constant", "constant", "constant", "add"}));
  const Node& folded = graph.nodes[3];
  EXPECT_EQ(nameOf(graph, folded.results[0]), "twice");
  const auto& value = std::get<std::shared_ptr<const TensorData>>(folded.attrs.at("value"));
  ASSERT_EQ(value->type, (TensorType{DType::kI64, {2}}));
  EXPECT_EQ(value->as<int64_t>()[0], 121);
  EXPECT_EQ(value->as<int64_t>()[1], 484);
  ASSERT_TRUE(runPipeline("dce", graph).isOk());
  EXPECT_EQ(opNames(graph), (std::vector<std::string>{"constant", "add"}));
}

TEST(FoldConstantsPass, SkipsLargeResultsAndNodesWithNonConstantOperands) {
  TensorData big{TensorType{DType::kF32, {4, 4}}, std::vector<uint8_t>(64, 0)};
  Graph graph;
  ValueId x = addInput(graph, "x", TensorType{DType::kF32, {4, 4}});
  ValueId c = addOne(graph, OpId::constant, {}, {{"value", std::make_shared<const TensorData>(big)}}, "c");
  ValueId e = addOne(graph, OpId::exp, {c}, {}, "e");
  graph.outputs = {addOne(graph, OpId::add, {x, e}, {}, "y")};
  ASSERT_TRUE(runPipeline("fold-constants{max-elements=15}", graph).isOk());
  EXPECT_EQ(opNames(graph), (std::vector<std::string>{"constant", "exp", "add"}));
  ASSERT_TRUE(runPipeline("fold-constants{max-elements=16}", graph).isOk());
  EXPECT_EQ(opNames(graph), (std::vector<std::string>{"constant", "constant", "add"}));
}

TEST(FoldConstantsPass, EvaluationErrorNamesTheNode) {
  auto scalar = [](int64_t v) {
    TensorData t{TensorType{DType::kI64, {}}, std::vector<uint8_t>(8)};
    std::memcpy(t.bytes.data(), &v, 8);
    return std::make_shared<const TensorData>(std::move(t));
  };
  Graph graph;
  ValueId one = addOne(graph, OpId::constant, {}, {{"value", scalar(1)}}, "one");
  ValueId zero = addOne(graph, OpId::constant, {}, {{"value", scalar(0)}}, "zero");
  graph.outputs = {addOne(graph, OpId::div, {one, zero}, {}, "q")};
  Status status = runPipeline("fold-constants", graph);
  ASSERT_FALSE(status.isOk());
  EXPECT_EQ(status.kind(), ErrorKind::kBadInput);
  EXPECT_NE(status.message().find("div '%q': div: integer division by zero"), std::string::npos) << status.message();
}

}  // namespace
}  // namespace cleave
