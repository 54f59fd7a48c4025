// Tests for the ONNX importer on the committed fixtures (tests/fixtures, made by make_onnx.py).
#include "frontend/onnx/onnx_importer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "ir/verifier.h"

namespace cleave {
namespace {

std::string fixture(const std::string& name) { return std::string(CLEAVE_SOURCE_DIR) + "/tests/fixtures/" + name + "/model.onnx"; }

// Op name -> node count.
std::map<std::string, int> opCounts(const Graph& graph) {
  std::map<std::string, int> counts;
  for (const Node& node : graph.nodes) ++counts[std::string(opName(node.op))];
  return counts;
}

Graph importOk(const std::string& name, int64_t batch = 0) {
  OnnxImportOptions options;
  options.batch = batch;
  auto graph = importOnnxModel(fixture(name), options);
  EXPECT_TRUE(graph.hasValue()) << graph.status().message();
  if (!graph) return Graph{};
  EXPECT_TRUE(verifyGraph(*graph).isOk()) << verifyGraph(*graph).message();
  return std::move(graph).value();
}

TEST(OnnxImporter, ConverterTableIsConsistent) {
  Status status = checkOnnxConverterTable();
  EXPECT_TRUE(status.isOk()) << status.message();
}

TEST(OnnxImporter, MlpWeightsBecomeParametersWithTheirData) {
  Graph graph = importOk("mlp");
  ASSERT_EQ(graph.inputs.size(), 1u);
  EXPECT_EQ(graph.values[graph.inputs[0]].name, "input");
  EXPECT_EQ(graph.values[graph.inputs[0]].type.str(), "f32[4,784]");
  ASSERT_EQ(graph.outputs.size(), 1u);
  EXPECT_EQ(graph.values[graph.outputs[0]].name, "output");
  EXPECT_EQ(graph.values[graph.outputs[0]].type.str(), "f32[4,10]");
  ASSERT_EQ(graph.params.size(), 6u);
  for (const Param& param : graph.params) {
    EXPECT_EQ(param.init.kind, "data");
    ASSERT_NE(param.init.data, nullptr);
    EXPECT_EQ(param.init.data->type, graph.values[param.value].type);
    EXPECT_TRUE(param.trainable);
  }
  EXPECT_EQ(graph.parameterCount(), 784 * 48 + 48 + 48 * 32 + 32 + 32 * 10 + 10);
  auto counts = opCounts(graph);
  EXPECT_EQ(counts["gemm"], 3);
  EXPECT_EQ(counts["erf"], 1);  // gelu arrives as x * 0.5 * (1 + erf(x / sqrt 2))
  EXPECT_EQ(counts["relu"], 1);
}

TEST(OnnxImporter, ShapeSubgraphFoldsAndBatchOverridesTheSymbolicDim) {
  Graph graph = importOk("cnn", /*batch=*/3);
  EXPECT_EQ(graph.values[graph.inputs[0]].type.str(), "f32[3,1,16,16]");
  EXPECT_EQ(graph.values[graph.outputs[0]].type.str(), "f32[3,10]");
  auto counts = opCounts(graph);
  EXPECT_EQ(counts["conv2d"], 2);
  EXPECT_EQ(counts["max_pool2d"], 1);
  EXPECT_EQ(counts["global_avg_pool"], 1);
  EXPECT_EQ(counts["reshape"], 1);
  EXPECT_EQ(counts.count("constant"), 0u) << "Shape -> Gather -> Unsqueeze -> Concat should fold into reshape";
  for (const Node& node : graph.nodes) {
    EXPECT_EQ(node.loc.file, fixture("cnn"));
    EXPECT_FALSE(node.loc.node_name.empty());
    if (node.op == OpId::reshape) {
      EXPECT_EQ(std::get<std::vector<int64_t>>(node.attrs.at("shape")), (std::vector<int64_t>{3, -1}));
    }
  }
  // Without a batch the symbolic dim becomes 1.
  Graph default_batch = importOk("cnn");
  EXPECT_EQ(default_batch.values[default_batch.inputs[0]].type.str(), "f32[1,1,16,16]");
}

TEST(OnnxImporter, GptAtOpset14HasDecomposedLayerNormAndOpset17HasLayerNorm) {
  Graph gpt14 = importOk("gpt14", 2);
  auto counts14 = opCounts(gpt14);
  EXPECT_EQ(counts14["reduce_mean"], 10);
  EXPECT_EQ(counts14["softmax"], 2);
  EXPECT_EQ(counts14["split"], 2);
  EXPECT_EQ(counts14["where"], 2);
  EXPECT_EQ(counts14.count("layer_norm"), 0u);
  EXPECT_EQ(gpt14.values[gpt14.inputs[0]].type.str(), "i64[2,16]");
  EXPECT_EQ(gpt14.values[gpt14.outputs[0]].type.str(), "f32[2,16,64]");
  Graph gpt17 = importOk("gpt17", 2);
  auto counts17 = opCounts(gpt17);
  EXPECT_EQ(counts17["layer_norm"], 5);
  EXPECT_EQ(counts17.count("reduce_mean"), 0u);
}

TEST(OnnxImporter, Opset11And13FormsOfTheSameModelImportAlike) {
  // Opset 11 passes Squeeze/Unsqueeze axes and Split sizes as attributes, opset 13 as inputs.
  Graph ops11 = importOk("ops11");
  Graph ops13 = importOk("ops13");
  for (const Graph* graph : {&ops11, &ops13}) {
    auto counts = opCounts(*graph);
    EXPECT_EQ(counts["squeeze"], 1);
    EXPECT_EQ(counts["unsqueeze"], 1);
    EXPECT_EQ(counts["split"], 1);
    EXPECT_EQ(counts["clip"], 1);
    EXPECT_EQ(graph->values[graph->outputs[0]].type.str(), "f32[2,4,4]");
    for (const Node& node : graph->nodes) {
      if (node.op == OpId::conv2d) {
        EXPECT_EQ(std::get<int64_t>(node.attrs.at("groups")), 4);  // depthwise
      }
      if (node.op == OpId::clip) {
        EXPECT_EQ(std::get<double>(node.attrs.at("min")), 0.0);  // ReLU6
        EXPECT_EQ(std::get<double>(node.attrs.at("max")), 6.0);
      }
    }
  }
}

TEST(OnnxImporter, TorchvisionResNetAndMobileNetImport) {
  Graph resnet = importOk("resnet", 4);
  auto resnet_counts = opCounts(resnet);
  EXPECT_EQ(resnet_counts["conv2d"], 20);  // stem, 16 in the blocks, 3 downsampling 1x1s (BN folded in)
  EXPECT_EQ(resnet_counts["add"], 8);      // one residual add per BasicBlock
  EXPECT_EQ(resnet_counts["max_pool2d"], 1);
  EXPECT_EQ(resnet_counts["global_avg_pool"], 1);
  EXPECT_EQ(resnet.values[resnet.outputs[0]].type.str(), "f32[4,10]");
  Graph mobilenet = importOk("mobilenet", 4);
  int depthwise = 0;
  for (const Node& node : mobilenet.nodes)
    if (node.op == OpId::conv2d && std::get<int64_t>(node.attrs.at("groups")) > 1) ++depthwise;
  EXPECT_EQ(depthwise, 17);                   // one per inverted residual block
  EXPECT_EQ(opCounts(mobilenet)["clip"], 35);  // ReLU6 after every expansion and depthwise conv, and the stem and head
  EXPECT_EQ(mobilenet.values[mobilenet.outputs[0]].type.str(), "f32[4,10]");
}

TEST(OnnxImporter, InitializersTheExporterMergedBecomeSeparateParameters) {
  // PyTorch merges the five equal LayerNorm weights (and biases) into one initializer and names the
  // others through Identity nodes; each layer norm gets its own parameter back, under its own name.
  Graph gpt = importOk("gpt17", 2);
  std::vector<std::string> norm_scales;
  for (const Node& node : gpt.nodes)
    if (node.op == OpId::layer_norm) norm_scales.push_back(gpt.values[node.operands[1]].name);
  EXPECT_EQ(norm_scales, (std::vector<std::string>{"blocks.0.ln1.weight", "blocks.0.ln2.weight", "blocks.1.ln1.weight",
                                                   "blocks.1.ln2.weight", "ln.weight"}));
  for (const std::string& name : norm_scales) {
    ValueId v = gpt.findValue(name);
    ASSERT_NE(v, kNoValue) << name;
    auto param = std::find_if(gpt.params.begin(), gpt.params.end(), [&](const Param& p) { return p.value == v; });
    ASSERT_NE(param, gpt.params.end()) << name << " is not a parameter";
    EXPECT_TRUE(param->trainable);
  }
  EXPECT_EQ(opCounts(gpt).count("identity"), 0u);
}

TEST(OnnxImporter, WindowDefaultsAndAutoPadBecomeExplicitAttributes) {
  Graph forms = importOk("forms");
  for (const Node& node : forms.nodes) {
    auto ints = [&](const char* name) { return std::get<std::vector<int64_t>>(node.attrs.at(name)); };
    if (node.op == OpId::max_pool2d) {
      EXPECT_EQ(ints("strides"), (std::vector<int64_t>{1, 1}));  // ONNX's default, not the kernel
    }
    if (node.op == OpId::avg_pool2d) {
      EXPECT_EQ(ints("pads"), (std::vector<int64_t>{1, 1, 1, 1}));  // SAME_UPPER, 5 -> 3 at stride 2
    }
    if (node.op == OpId::conv2d) {
      EXPECT_EQ(ints("pads"), (std::vector<int64_t>{1, 1, 0, 0}));  // SAME_LOWER: the odd pad first
    }
  }
  auto counts = opCounts(forms);
  EXPECT_EQ(counts["layer_norm"], 1);
  EXPECT_EQ(counts["reduce_mean"], 2);  // LayerNormalization's Mean and InvStdDev outputs
  EXPECT_EQ(counts["cast"], 1);         // Pow's i32 exponent input, cast to f32
  EXPECT_EQ(forms.values[forms.outputs[7]].type.str(), "bool[1,2,5,5]");  // Dropout's mask
}

TEST(OnnxImporter, InputValuesFreezeInputsIntoConstants) {
  OnnxImportOptions options;
  TensorData shape{{DType::kI64, {2}}, {}};
  shape.bytes.resize(16);
  const int64_t dims[2] = {4, -1};
  std::memcpy(shape.bytes.data(), dims, sizeof dims);
  options.input_values["shape"] = shape;
  auto graph = importOnnxModel(fixture("dynamic_reshape"), options);
  ASSERT_TRUE(graph.hasValue()) << graph.status().message();
  ASSERT_EQ(graph->inputs.size(), 1u);  // x; "shape" became a constant
  EXPECT_EQ(graph->values[graph->outputs[0]].type.str(), "f32[4,64]");

  options.input_values.clear();
  options.input_values["no_such_input"] = shape;
  auto unknown = importOnnxModel(fixture("dynamic_reshape"), options);
  ASSERT_FALSE(unknown.hasValue());
  EXPECT_NE(unknown.status().message().find("'no_such_input', which the model lacks"), std::string::npos);
}

TEST(OnnxImporter, SupportCheckReportsOpsetAndOpTypes) {
  auto unsupported = checkOnnxSupport(fixture("unsupported"));
  ASSERT_TRUE(unsupported.hasValue()) << unsupported.status().message();
  EXPECT_EQ(unsupported->opset, 13);
  EXPECT_EQ(unsupported->unsupported_ops, (std::vector<std::string>{"Hardmax", "LRN"}));
  EXPECT_FALSE(unsupported->supported());
  auto gpt = checkOnnxSupport(fixture("gpt17"));
  ASSERT_TRUE(gpt.hasValue());
  EXPECT_EQ(gpt->opset, 17);
  EXPECT_TRUE(gpt->supported());
}

TEST(OnnxImporter, SerializedTensorsReadWithTheirNames) {
  std::string dir = std::string(CLEAVE_SOURCE_DIR) + "/tests/fixtures/tensors/";
  std::string name;
  auto raw = readOnnxTensorFile(dir + "raw_f32.pb", &name);
  ASSERT_TRUE(raw.hasValue()) << raw.status().message();
  EXPECT_EQ(name, "raw_f32");
  EXPECT_EQ(raw->type.str(), "f32[2,3]");
  EXPECT_EQ(raw->as<float>()[5], 1.25f);
  auto typed = readOnnxTensorFile(dir + "typed_i64.pb", &name);
  ASSERT_TRUE(typed.hasValue()) << typed.status().message();
  EXPECT_EQ(name, "typed_i64");
  EXPECT_EQ(typed->type.str(), "i64[3]");
  EXPECT_EQ(typed->as<int64_t>()[0], -1);
  EXPECT_EQ(typed->as<int64_t>()[2], 7);
  auto missing = readOnnxTensorFile(dir + "missing.pb");
  ASSERT_FALSE(missing.hasValue());
  EXPECT_EQ(missing.status().kind(), ErrorKind::kBadInput);
}

TEST(OnnxImporter, UnsupportedOpsAreListedInOneError) {
  auto graph = importOnnxModel(fixture("unsupported"), {});
  ASSERT_FALSE(graph.hasValue());
  EXPECT_EQ(graph.status().kind(), ErrorKind::kBadInput);
  EXPECT_EQ(graph.status().message(), fixture("unsupported") +
                                          ": unsupported ONNX ops at opset 13: Hardmax (1 node: hardmax); "
                                          "LRN (2 nodes: lrn_1, lrn_2)");
}

// torch.export's exporter (opset 18+, IR 10) and a hand-built opset 21 model import without libonnx's
// checker: local functions inline, Reduce* axes inputs, Split's num_outputs and Pad's axes convert.
TEST(OnnxImporter, Opset21FormsAndLocalFunctionsImport) {
  Graph graph = importOk("forms21");
  std::map<std::string, int> ops = opCounts(graph);
  EXPECT_GT(ops["matmul"], 0) << "Einsum lowers to batched matmuls";
  EXPECT_EQ(ops["gather_elements"], 1);
  EXPECT_EQ(ops["gelu"], 2);
  EXPECT_EQ(ops["split"], 1);
  // The local function's body, under the call's name.
  bool inlined = std::any_of(graph.nodes.begin(), graph.nodes.end(), [](const Node& node) {
    return node.loc.node_name.find("ScaledAdd") != std::string::npos || node.loc.node_name.rfind("function_call", 0) == 0;
  });
  EXPECT_TRUE(inlined);
  auto support = checkOnnxSupport(fixture("forms21"));
  ASSERT_TRUE(support.hasValue()) << support.status().message();
  EXPECT_EQ(support->opset, 21);
  EXPECT_TRUE(support->supported()) << support->unsupported_ops.size();
}

// GPT-2's LM head reads the token embedding transposed; the legacy exporter folds that transpose
// into an initializer of its own, which must stay tied to the embedding (one parameter, as in PyTorch).
TEST(OnnxImporter, TransposedTiedWeightsStayOneParameter) {
  Graph graph = importOk("modern/gpt2_legacy17", 2);
  bool untied = false;
  for (const Param& param : graph.params) untied |= graph.values[param.value].name.rfind("onnx__MatMul", 0) == 0;
  EXPECT_FALSE(untied) << "the folded transpose of wte became a parameter of its own";
  EXPECT_GT(opCounts(graph)["transpose"], 0);
}

// torch.onnx's dynamo exporter writes the scalars of a decomposed GELU (√2, 1, 0.5) and attention's
// scale as initializers named val_<n>: they are constants, not parameters to train; the model's
// weights (module paths, and the transposed copies tied to them) are.
TEST(OnnxImporter, ExporterScalarsAreConstantsNotParameters) {
  for (const std::string& name : {"modern/bert_dynamo18", "modern/vit_dynamo18"}) {
    Graph graph = importOk(name, 2);
    for (const Param& param : graph.params) {
      const std::string& value = graph.values[param.value].name;
      EXPECT_FALSE(value.rfind("val_", 0) == 0 && graph.values[param.value].type.numel() == 1) << name << ": " << value;
    }
    int scalars = 0;
    for (const Node& node : graph.nodes) {
      if (node.op != OpId::constant) continue;
      const std::string& value = graph.values[node.results[0]].name;
      scalars += value.rfind("val_", 0) == 0 && graph.values[node.results[0]].type.numel() == 1;
    }
    EXPECT_GE(scalars, 3) << name;  // the GELU's √2, 1 and 0.5 at least
    EXPECT_EQ(opCounts(graph)["erf"], 2) << name;
  }
}

// torch.export's exporter marks buffers in its value_info metadata (a field newer than libonnx's
// schema): Llama's and Qwen2's rotary inv_freq is frozen, every parameter it marks PARAMETER trains.
// The TorchScript exporter marks nothing, so its exports keep every float weight trainable.
TEST(OnnxImporter, TorchExportBuffersAreFrozen) {
  for (const char* name : {"modern/llama_dynamo18", "modern/qwen2_dynamo21"}) {
    Graph graph = importOk(name, 2);
    std::vector<std::string> frozen;
    for (const Param& param : graph.params)
      if (!param.trainable) frozen.push_back(graph.values[param.value].name);
    EXPECT_EQ(frozen, std::vector<std::string>{"model.model.rotary_emb.inv_freq"}) << name;
    EXPECT_GT(graph.params.size(), 20u) << name;
  }
  Graph legacy = importOk("modern/llama_legacy17", 2);
  for (const Param& param : legacy.params) EXPECT_TRUE(param.trainable) << legacy.values[param.value].name;
}

// nn.Embedding's padding_idx: torch.export's exporter records aten.embedding.default's arguments in
// the Gather's metadata and the importer keeps padding_idx (BERT's word embedding: 0; its position
// and token-type embeddings have none); the TorchScript exporter records nothing.
TEST(OnnxImporter, TorchExportEmbeddingsKeepTheirPaddingIndex) {
  auto paddings = [](const Graph& graph) {
    std::vector<int64_t> found;
    for (const Node& node : graph.nodes)
      if (node.op == OpId::gather && graph.findParam(node.operands[0]))
        found.push_back(node.attrs.count("padding_idx") ? std::get<int64_t>(node.attrs.at("padding_idx")) : -1);
    return found;
  };
  for (const char* name : {"modern/bert_mlm_dynamo18", "modern/bert_mlm_dynamo21"}) {
    std::vector<int64_t> found = paddings(importOk(name, 2));
    EXPECT_EQ(std::count(found.begin(), found.end(), 0), 1) << name;
    EXPECT_EQ(std::count(found.begin(), found.end(), -1), static_cast<long>(found.size()) - 1) << name;
  }
  for (int64_t padding : paddings(importOk("modern/bert_mlm_legacy17", 2))) EXPECT_EQ(padding, -1);
}

// Training-mode BatchNormalization: batch statistics, and the running statistics become buffers
// (non-trainable parameters) that each step updates.
TEST(OnnxImporter, TrainingBatchNormUpdatesItsRunningStatistics) {
  Graph graph = importOk("modern/resnet_bn_train_legacy17", 4);
  EXPECT_EQ(opCounts(graph)["batch_norm"], 0);
  EXPECT_EQ(graph.updates.size(), 2u * 9);  // mean and var of 9 BatchNorms
  for (const StateUpdate& update : graph.updates) {
    const Param* param = graph.findParam(update.target);
    ASSERT_NE(param, nullptr);
    EXPECT_FALSE(param->trainable) << graph.values[update.target].name;
  }
}

TEST(OnnxImporter, ErrorsNameTheFileAndNode) {
  auto dynamic = importOnnxModel(fixture("dynamic_reshape"), {});
  ASSERT_FALSE(dynamic.hasValue());
  EXPECT_EQ(dynamic.status().kind(), ErrorKind::kBadInput);
  EXPECT_NE(dynamic.status().message().find(fixture("dynamic_reshape") + " (node 'reshape_by_input'): Reshape: input 1"),
            std::string::npos)
      << dynamic.status().message();

  auto missing = importOnnxModel("/no/such/model.onnx", {});
  ASSERT_FALSE(missing.hasValue());
  EXPECT_EQ(missing.status().kind(), ErrorKind::kBadInput);
  EXPECT_NE(missing.status().message().find("/no/such/model.onnx"), std::string::npos);

  // A file that is not ONNX at all (a .cir text file) fails to parse or check.
  auto not_onnx = importOnnxModel(std::string(CLEAVE_SOURCE_DIR) + "/examples/mlp.cir", {});
  ASSERT_FALSE(not_onnx.hasValue());
  EXPECT_EQ(not_onnx.status().kind(), ErrorKind::kBadInput);
}

}  // namespace
}  // namespace cleave
