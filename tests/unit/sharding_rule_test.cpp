// Sharding rules of every op in the table, pinned to text snapshots (factors, kinds, sizes and dim
// mappings), and the ShardingRuleBuilder operations they are written with.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "ir/op_table.h"
#include "ir/sharding_rule_builder.h"

namespace cleave {
namespace {

TensorType f32(Shape shape) { return {DType::kF32, std::move(shape)}; }
TensorType i64(Shape shape) { return {DType::kI64, std::move(shape)}; }
TensorType boolean(Shape shape) { return {DType::kBool, std::move(shape)}; }
AttrMap attrs(std::initializer_list<std::pair<const std::string, Attribute>> list) { return AttrMap(list); }
std::vector<int64_t> ints(std::initializer_list<int64_t> values) { return values; }
Attribute tensorAttr(TensorType type) {
  auto t = std::make_shared<TensorData>();
  t->type = type;
  t->bytes.resize(static_cast<size_t>(type.bytes()));
  return std::shared_ptr<const TensorData>(t);
}

// The rule's text form followed by its factor sizes, e.g. "([i,j],[j,k])->([i,k]) {j=reduction} sizes=[2,3,4]".
std::string describe(const ShardingRule& rule) {
  std::string s = rule.str() + " sizes=[";
  for (size_t f = 0; f < rule.factor_sizes.size(); ++f) s += (f ? "," : "") + std::to_string(rule.factor_sizes[f]);
  return s + "]";
}

// One op instance and the rule it must get.
struct RuleCase {
  std::string op;
  std::vector<TensorType> operands;
  AttrMap attrs;
  std::string expected;
};

// Representative instances of every op in the table (broadcasting, transposes, groups, keepdims,
// negative axes, size-1 dims, optional operands), each with the rule the op gave before its sharding
// rule was written through ShardingRuleBuilder.
const std::vector<RuleCase>& ruleCases() {
  static const std::vector<RuleCase> cases = {
      // linear_algebra
      {"matmul", {f32({3, 4}), f32({4, 5})}, {}, "([i,j],[j,k])->([i,k]) {j=reduction} sizes=[3,4,5]"},
      {"matmul", {f32({2, 3, 4}), f32({4, 5})}, {}, "([i,j,k],[k,l])->([i,j,l]) {k=reduction} sizes=[2,3,4,5]"},
      {"matmul", {f32({2, 1, 3, 4}), f32({5, 4, 6})}, {},
       "([i,1,k,l],[j,l,m])->([i,j,k,m]) {l=reduction} sizes=[2,5,3,4,6]"},
      {"matmul", {f32({4, 3}), f32({5, 4})}, attrs({{"transpose_a", int64_t{1}}, {"transpose_b", int64_t{1}}}),
       "([j,i],[k,j])->([i,k]) {j=reduction} sizes=[3,4,5]"},
      {"matmul", {f32({2, 3, 4}), f32({2, 4, 5})}, {}, "([i,j,k],[i,k,l])->([i,j,l]) {k=reduction} sizes=[2,3,4,5]"},
      // fused_matmul: the inner product's factors, each tensor's dims through its permutation
      {"fused_matmul", {f32({2, 5, 3, 4}), f32({2, 5, 3, 4})},
       attrs({{"perm_a", std::vector<int64_t>{0, 2, 1, 3}}, {"perm_b", std::vector<int64_t>{0, 2, 1, 3}},
              {"transpose_b", int64_t{1}}}),
       "([i,k,j,l],[i,m,j,l])->([i,j,k,m]) {l=reduction} sizes=[2,3,5,4,5]"},
      {"fused_matmul", {f32({2, 3, 5, 5}), f32({2, 5, 3, 4})},
       attrs({{"perm_b", std::vector<int64_t>{0, 2, 1, 3}}, {"perm_result", std::vector<int64_t>{0, 2, 1, 3}}}),
       "([i,j,k,l],[i,l,j,m])->([i,k,j,m]) {l=reduction} sizes=[2,3,5,5,4]"},
      {"fused_matmul", {f32({2, 5, 6}), f32({4, 6}), f32({4})}, attrs({{"transpose_b", int64_t{1}}}), "([i,j,k],[l,k],[l])->([i,j,l]) {k=reduction} sizes=[2,5,6,4]"},
      {"gemm", {f32({3, 4}), f32({4, 5}), f32({5})}, {}, "([i,j],[j,k],[k])->([i,k]) {j=reduction} sizes=[3,4,5]"},
      {"gemm", {f32({3, 4}), f32({5, 4}), f32({3, 5})}, attrs({{"transpose_b", int64_t{1}}}),
       "([i,j],[k,j],[i,k])->([i,k]) {j=reduction} sizes=[3,4,5]"},
      {"gemm", {f32({4, 3}), f32({4, 5}), f32({1, 5})}, attrs({{"transpose_a", int64_t{1}}}),
       "([j,i],[j,k],[1,k])->([i,k]) {j=reduction} sizes=[3,4,5]"},
      {"gemm", {f32({3, 4}), f32({4, 5})}, {}, "([i,j],[j,k])->([i,k]) {j=reduction} sizes=[3,4,5]"},
      // elementwise
      {"add", {f32({2, 1, 4}), f32({3, 1})}, {}, "([i,1,k],[j,1])->([i,j,k]) sizes=[2,3,4]"},
      {"add", {f32({2, 3}), f32({2, 3})}, {}, "([i,j],[i,j])->([i,j]) sizes=[2,3]"},
      {"sub", {f32({}), f32({3})}, {}, "([],[i])->([i]) sizes=[3]"},
      {"mul", {f32({2, 3}), f32({3})}, {}, "([i,j],[j])->([i,j]) sizes=[2,3]"},
      {"div", {f32({1, 3}), f32({2, 1})}, {}, "([1,j],[i,1])->([i,j]) sizes=[2,3]"},
      {"pow", {f32({2, 3}), f32({3})}, {}, "([i,j],[j])->([i,j]) sizes=[2,3]"},
      {"equal", {i64({2, 3}), i64({1})}, {}, "([i,j],[1])->([i,j]) sizes=[2,3]"},
      {"less", {f32({4}), f32({4})}, {}, "([i],[i])->([i]) sizes=[4]"},
      {"less_equal", {i64({2, 3}), i64({1})}, {}, "([i,j],[1])->([i,j]) sizes=[2,3]"},
      {"greater", {f32({2, 1}), f32({1, 2})}, {}, "([i,1],[1,j])->([i,j]) sizes=[2,2]"},
      {"greater_equal", {f32({3}), f32({})}, {}, "([i],[])->([i]) sizes=[3]"},
      {"sqrt", {f32({2, 3})}, {}, "([i,j])->([i,j]) sizes=[2,3]"},
      {"exp", {f32({4})}, {}, "([i])->([i]) sizes=[4]"},
      {"log", {f32({2, 1, 3})}, {}, "([i,j,k])->([i,j,k]) sizes=[2,1,3]"},
      {"neg", {f32({})}, {}, "([])->([]) sizes=[]"},
      {"erf", {f32({5})}, {}, "([i])->([i]) sizes=[5]"},
      {"tanh", {f32({2, 3})}, {}, "([i,j])->([i,j]) sizes=[2,3]"},
      {"sigmoid", {f32({2, 3})}, {}, "([i,j])->([i,j]) sizes=[2,3]"},
      {"relu", {f32({2, 3, 4})}, {}, "([i,j,k])->([i,j,k]) sizes=[2,3,4]"},
      {"gelu", {f32({4})}, attrs({{"approximate", std::string("tanh")}}), "([i])->([i]) sizes=[4]"},
      {"clip", {f32({4, 2})}, attrs({{"min", 0.0}, {"max", 6.0}}), "([i,j])->([i,j]) sizes=[4,2]"},
      {"cast", {f32({4})}, attrs({{"to", std::string("i32")}}), "([i])->([i]) sizes=[4]"},
      {"where", {boolean({2, 1}), f32({3}), f32({2, 3})}, {}, "([i,1],[j],[i,j])->([i,j]) sizes=[2,3]"},
      {"dropout", {f32({4, 3})}, attrs({{"ratio", 0.1}}), "([i,j])->([i,j]) sizes=[4,3]"},
      {"identity", {f32({2, 3})}, {}, "([i,j])->([i,j]) sizes=[2,3]"},
      // reduction
      {"reduce_sum", {f32({2, 3, 4})}, attrs({{"axes", ints({1})}}),
       "([i,j,k])->([i,1,k]) {j=reduction} sizes=[2,3,4]"},
      {"reduce_sum", {f32({2, 3})}, {}, "([i,j])->([1,1]) {i=reduction,j=reduction} sizes=[2,3]"},
      {"reduce_mean", {f32({2, 3, 4})}, attrs({{"axes", ints({1})}, {"keepdims", int64_t{0}}}),
       "([i,j,k])->([i,k]) {j=reduction} sizes=[2,3,4]"},
      {"reduce_max", {f32({2, 3, 4})}, attrs({{"axes", ints({-1, 0})}}),
       "([i,j,k])->([1,j,1]) {i=reduction,k=reduction} sizes=[2,3,4]"},
      {"reduce_max", {f32({2, 3, 4})}, attrs({{"axes", ints({0, 2})}, {"keepdims", int64_t{0}}}),
       "([i,j,k])->([j]) {i=reduction,k=reduction} sizes=[2,3,4]"},
      {"softmax", {f32({2, 3})}, {}, "([i,j])->([i,j]) {j=need_replication} sizes=[2,3]"},
      {"softmax", {f32({2, 3, 4})}, attrs({{"axis", int64_t{1}}}),
       "([i,j,k])->([i,j,k]) {j=need_replication} sizes=[2,3,4]"},
      {"log_softmax", {f32({2, 3})}, attrs({{"axis", int64_t{0}}}),
       "([i,j])->([i,j]) {i=need_replication} sizes=[2,3]"},
      {"layer_norm", {f32({2, 3, 4}), f32({3, 4}), f32({3, 4})}, attrs({{"axis", int64_t{1}}}),
       "([i,j,k],[j,k],[j,k])->([i,j,k]) {j=need_replication,k=need_replication} sizes=[2,3,4]"},
      {"layer_norm", {f32({2, 3, 4}), f32({4})}, {}, "([i,j,k],[k])->([i,j,k]) {k=need_replication} sizes=[2,3,4]"},
      {"batch_norm", {f32({2, 3, 4, 4}), f32({3}), f32({3}), f32({3}), f32({3})}, {},
       "([i,j,k,l],[j],[j],[j],[j])->([i,j,k,l]) sizes=[2,3,4,4]"},
      // convolution
      {"conv2d", {f32({1, 3, 8, 8}), f32({4, 3, 3, 3}), f32({4})}, attrs({{"pads", ints({1, 1, 1, 1})}}),
       "([i,k,l,m],[j,k,n,o],[j])->([i,j,p,q]) {k=reduction,l=need_replication,m=need_replication,n=need_replication,o=need_replication,p=need_replication,q=need_replication} sizes=[1,4,3,8,8,3,3,8,8]"},
      {"conv2d", {f32({2, 4, 9, 9}), f32({6, 2, 3, 3})},
       attrs({{"strides", ints({2, 1})}, {"pads", ints({1, 0, 1, 2})}, {"dilations", ints({1, 2})}, {"groups", int64_t{2}}}),
        "([i,k,m,n],[j,l,o,p])->([i,j,q,r]) {j=need_replication,k=need_replication,l=need_replication,m=need_replication,n=need_replication,o=need_replication,p=need_replication,q=need_replication,r=need_replication} sizes=[2,6,4,2,9,9,3,3,5,7]"},
      {"max_pool2d", {f32({2, 3, 9, 9})}, attrs({{"kernel", ints({3, 2})}, {"strides", ints({2, 2})}}),
       "([i,j,k,l])->([i,j,m,n]) {k=need_replication,l=need_replication,m=need_replication,n=need_replication} sizes=[2,3,9,9,4,4]"},
      {"avg_pool2d", {f32({2, 3, 9, 9})}, attrs({{"kernel", ints({3, 3})}, {"count_include_pad", int64_t{1}}}),
       "([i,j,k,l])->([i,j,m,n]) {k=need_replication,l=need_replication,m=need_replication,n=need_replication} sizes=[2,3,9,9,3,3]"},
      {"global_avg_pool", {f32({2, 3, 5, 5})}, {},
       "([i,j,k,l])->([i,j,1,1]) {k=reduction,l=reduction} sizes=[2,3,5,5]"},
      // shape
      {"reshape", {f32({2, 3, 4})}, attrs({{"shape", ints({0, -1, 2})}}),
       "([i,j,k])->([i,l,m]) {j=need_replication,k=need_replication,l=need_replication,m=need_replication} sizes=[2,3,4,6,2]"},
      {"reshape", {f32({2, 3, 4})}, attrs({{"shape", ints({6, 4})}}),
       "([i,j,l])->([k,l]) {i=need_replication,j=need_replication,k=need_replication} sizes=[2,3,6,4]"},
      {"reshape", {f32({2, 12})}, attrs({{"shape", ints({2, 3, 4})}}),
       "([i,j])->([i,k,l]) {j=need_replication,k=need_replication,l=need_replication} sizes=[2,12,3,4]"},
      {"reshape", {f32({2, 3, 4})}, attrs({{"shape", ints({2, 3, 4})}}), "([i,j,k])->([i,j,k]) sizes=[2,3,4]"},
      {"reshape", {f32({2, 1, 6, 5})}, attrs({{"shape", ints({2, 3, 1, 2, 5})}}),
       "([i,1,j,m])->([i,k,1,l,m]) {j=need_replication,k=need_replication,l=need_replication} sizes=[2,6,3,2,5]"},
      {"reshape", {f32({6})}, attrs({{"shape", ints({1, 6, 1})}}),
       "([i])->([1,j,1]) {i=need_replication,j=need_replication} sizes=[6,6]"},
      {"flatten", {f32({2, 3, 4})}, attrs({{"axis", int64_t{2}}}),
       "([i,j,l])->([k,l]) {i=need_replication,j=need_replication,k=need_replication} sizes=[2,3,6,4]"},
      {"flatten", {f32({2, 3, 4})}, {},
       "([i,j,k])->([i,l]) {j=need_replication,k=need_replication,l=need_replication} sizes=[2,3,4,12]"},
      {"transpose", {f32({2, 3, 4})}, attrs({{"perm", ints({2, 0, 1})}}), "([i,j,k])->([k,i,j]) sizes=[2,3,4]"},
      {"transpose", {f32({2, 3})}, {}, "([i,j])->([j,i]) sizes=[2,3]"},
      {"concat", {f32({2, 3}), f32({2, 4}), f32({2, 1})}, attrs({{"axis", int64_t{1}}}),
       "([i,j],[i,k],[i,1])->([i,l]) {j=need_replication,k=need_replication,l=need_replication} sizes=[2,3,4,8]"},
      {"concat", {f32({2, 3}), f32({1, 3})}, attrs({{"axis", int64_t{0}}}),
       "([j,i],[1,i])->([k,i]) {j=need_replication,k=need_replication} sizes=[3,2,3]"},
      {"split", {f32({2, 6})}, attrs({{"axis", int64_t{-1}}, {"sizes", ints({2, 4})}}),
       "([i,j])->([i,k],[i,l]) {j=need_replication,k=need_replication,l=need_replication} sizes=[2,6,2,4]"},
      {"split", {f32({3, 2})}, attrs({{"axis", int64_t{0}}, {"sizes", ints({1, 2})}}),
       "([j,i])->([1,i],[k,i]) {j=need_replication,k=need_replication} sizes=[2,3,2]"},
      {"slice", {f32({5, 6})}, attrs({{"starts", ints({-1, 1})}, {"ends", ints({0, 5})}, {"axes", ints({0, 1})}, {"steps", ints({-2, 2})}}),
       "([i,j])->([k,l]) {i=need_replication,j=need_replication,k=need_replication,l=need_replication} sizes=[5,6,2,2]"},
      {"slice", {f32({4, 6, 2})}, attrs({{"starts", ints({0})}, {"ends", ints({1})}, {"axes", ints({1})}}),
       "([i,k,j])->([i,1,j]) {k=need_replication} sizes=[4,2,6]"},
      {"gather", {f32({10, 4}), i64({2, 3})}, attrs({{"axis", int64_t{0}}}),
       "([i,j],[k,l])->([k,l,j]) {i=need_replication} sizes=[10,4,2,3]"},
      {"gather", {f32({2, 10, 4}), i64({3})}, attrs({{"axis", int64_t{1}}}),
       "([i,j,k],[l])->([i,l,k]) {j=need_replication} sizes=[2,10,4,3]"},
      {"expand", {f32({3, 1})}, attrs({{"shape", ints({2, 3, 4})}}), "([j,1])->([i,j,k]) sizes=[2,3,4]"},
      {"squeeze", {f32({1, 3, 1})}, attrs({{"axes", ints({0})}}), "([1,i,j])->([i,j]) sizes=[3,1]"},
      {"squeeze", {f32({1, 3, 1})}, {}, "([1,i,1])->([i]) sizes=[3]"},
      {"unsqueeze", {f32({3, 4})}, attrs({{"axes", ints({1})}}), "([i,j])->([i,1,j]) sizes=[3,4]"},
      {"unsqueeze", {f32({3})}, attrs({{"axes", ints({0, 2})}}), "([i])->([1,i,1]) sizes=[3]"},
      {"trilu", {f32({2, 3, 3})}, attrs({{"upper", int64_t{0}}, {"k", int64_t{1}}}),
       "([i,j,k])->([i,j,k]) {j=need_replication,k=need_replication} sizes=[2,3,3]"},
      {"trilu", {f32({4, 5})}, {}, "([i,j])->([i,j]) {i=need_replication,j=need_replication} sizes=[4,5]"},
      {"constant", {}, attrs({{"value", tensorAttr(f32({2, 3}))}}), "()->([i,j]) sizes=[2,3]"},
      {"constant", {}, attrs({{"value", tensorAttr(f32({}))}}), "()->([]) sizes=[]"},
      // loss
      {"softmax_cross_entropy", {f32({4, 10}), i64({4})}, {},
       "([i,j],[i])->([]) {i=reduction,j=need_replication} sizes=[4,10]"},
      {"softmax_cross_entropy", {f32({4, 5, 10}), i64({4, 5})}, {},
       "([i,j,k],[i,j])->([]) {i=reduction,j=reduction,k=need_replication} sizes=[4,5,10]"},
      {"mse", {f32({4, 3}), f32({4, 3})}, {}, "([i,j],[i,j])->([]) {i=reduction,j=reduction} sizes=[4,3]"},
      // gradient
      {"relu_grad", {f32({2, 3}), f32({2, 3})}, {}, "([i,j],[i,j])->([i,j]) sizes=[2,3]"},
      {"gelu_grad", {f32({4}), f32({4})}, attrs({{"approximate", std::string("tanh")}}), "([i],[i])->([i]) sizes=[4]"},
      {"tanh_grad", {f32({2, 3, 4}), f32({2, 3, 4})}, {}, "([i,j,k],[i,j,k])->([i,j,k]) sizes=[2,3,4]"},
      {"sigmoid_grad", {f32({5}), f32({5})}, {}, "([i],[i])->([i]) sizes=[5]"},
      {"softmax_grad", {f32({2, 3}), f32({2, 3})}, {}, "([i,j],[i,j])->([i,j]) {j=need_replication} sizes=[2,3]"},
      {"log_softmax_grad", {f32({2, 3, 4}), f32({2, 3, 4})}, attrs({{"axis", int64_t{1}}}),
       "([i,j,k],[i,j,k])->([i,j,k]) {j=need_replication} sizes=[2,3,4]"},
      {"layer_norm_grad", {f32({2, 3, 4}), f32({2, 3, 4}), f32({4})}, {},
       "([i,j,k],[i,j,k],[k])->([i,j,k],[k],[k]) {i=reduction,j=reduction,k=need_replication} sizes=[2,3,4]"},
      {"layer_norm_grad", {f32({2, 3, 4}), f32({2, 3, 4}), f32({3, 4})}, attrs({{"axis", int64_t{1}}}),
       "([i,j,k],[i,j,k],[j,k])->([i,j,k],[j,k],[j,k]) {i=reduction,j=need_replication,k=need_replication} sizes=[2,3,4]"},
      {"conv2d_grad_input", {f32({1, 4, 8, 8}), f32({4, 3, 3, 3})},
       attrs({{"input_shape", ints({1, 3, 8, 8})}, {"pads", ints({1, 1, 1, 1})}}),
        "([i,j,l,m],[j,k,n,o])->([i,k,p,q]) {j=reduction,l=need_replication,m=need_replication,n=need_replication,o=need_replication,p=need_replication,q=need_replication} sizes=[1,4,3,8,8,3,3,8,8]"},
      {"conv2d_grad_input", {f32({2, 6, 7, 7}), f32({6, 2, 3, 3})},
       attrs({{"input_shape", ints({2, 4, 9, 9})}, {"groups", int64_t{2}}}),
        "([i,j,l,m],[j,1,n,o])->([i,k,p,q]) {j=need_replication,k=need_replication,l=need_replication,m=need_replication,n=need_replication,o=need_replication,p=need_replication,q=need_replication} sizes=[2,6,4,7,7,3,3,9,9]"},
      {"conv2d_grad_weight", {f32({1, 4, 8, 8}), f32({1, 3, 8, 8})},
       attrs({{"weight_shape", ints({4, 3, 3, 3})}, {"pads", ints({1, 1, 1, 1})}}),
        "([i,j,l,m],[i,k,n,o])->([j,k,p,q]) {i=reduction,l=need_replication,m=need_replication,n=need_replication,o=need_replication,p=need_replication,q=need_replication} sizes=[1,4,3,8,8,8,8,3,3]"},
      {"conv2d_grad_weight", {f32({2, 6, 7, 7}), f32({2, 4, 9, 9})},
       attrs({{"weight_shape", ints({6, 2, 3, 3})}, {"groups", int64_t{2}}}),
        "([i,j,l,m],[i,k,n,o])->([j,1,p,q]) {i=reduction,j=need_replication,k=need_replication,l=need_replication,m=need_replication,n=need_replication,o=need_replication,p=need_replication,q=need_replication} sizes=[2,6,4,7,7,9,9,3,3]"},
      {"max_pool2d_grad", {f32({2, 3, 4, 4}), f32({2, 3, 9, 9})}, attrs({{"kernel", ints({3, 2})}, {"strides", ints({2, 2})}}),
       "([i,j,k,l],[i,j,m,n])->([i,j,m,n]) {k=need_replication,l=need_replication,m=need_replication,n=need_replication} sizes=[2,3,4,4,9,9]"},
      {"avg_pool2d_grad", {f32({2, 3, 3, 3})}, attrs({{"input_shape", ints({2, 3, 9, 9})}, {"kernel", ints({3, 3})}}),
       "([i,j,k,l])->([i,j,m,n]) {k=need_replication,l=need_replication,m=need_replication,n=need_replication} sizes=[2,3,3,3,9,9]"},
      {"gather_grad", {f32({2, 3, 4}), i64({2, 3})}, attrs({{"data_shape", ints({10, 4})}}),
       "([i,j,l],[i,j])->([k,l]) {i=reduction,j=reduction,k=need_replication} sizes=[2,3,10,4]"},
      {"gather_grad", {f32({2, 3, 4}), i64({3})}, attrs({{"data_shape", ints({2, 10, 4})}, {"axis", int64_t{1}}}),
       "([j,i,l],[i])->([j,k,l]) {i=reduction,k=need_replication} sizes=[3,2,10,4]"},
      {"slice_grad", {f32({2, 2})}, attrs({{"input_shape", ints({5, 6})}, {"starts", ints({-1, 1})}, {"ends", ints({0, 5})},
                                           {"axes", ints({0, 1})}, {"steps", ints({-2, 2})}}),
                                            "([i,k])->([j,l]) {i=need_replication,j=need_replication,k=need_replication,l=need_replication} sizes=[2,5,2,6]"},
      {"slice_grad", {f32({4, 1, 2})}, attrs({{"input_shape", ints({4, 6, 2})}, {"starts", ints({0})}, {"ends", ints({1})},
                                              {"axes", ints({1})}}),
                                               "([i,j,l])->([i,k,l]) {j=need_replication,k=need_replication} sizes=[4,1,6,2]"},
      {"softmax_cross_entropy_grad", {f32({}), f32({4, 10}), i64({4})}, {},
       "([],[i,j],[i])->([i,j]) {j=need_replication} sizes=[4,10]"},
      {"softmax_cross_entropy_grad", {f32({}), f32({4, 5, 10}), i64({4, 5})}, {},
       "([],[i,j,k],[i,j])->([i,j,k]) {k=need_replication} sizes=[4,5,10]"},
      // optimizer
      {"sgd_update", {f32({3, 4}), f32({3, 4}), i64({})}, attrs({{"lr", 0.1}}),
       "([i,j],[i,j],[])->([i,j]) sizes=[3,4]"},
      {"sgd_update", {f32({5}), f32({5}), i64({}), f32({5})}, attrs({{"lr", 0.1}, {"momentum", 0.9}}),
       "([i],[i],[],[i])->([i],[i]) sizes=[5]"},
      {"adamw_update", {f32({3, 4}), f32({3, 4}), f32({3, 4}), f32({3, 4}), i64({})}, {},
       "([i,j],[i,j],[i,j],[i,j],[])->([i,j],[i,j],[i,j]) sizes=[3,4]"},
      // communication
      {"all_reduce", {f32({2, 3}), f32({4})}, attrs({{"axis", std::string("dp")}, {"group_size", int64_t{2}}}),
       "([i,j],[k])->([l,m],[n]) {i=need_replication,j=need_replication,k=need_replication,l=need_replication,m=need_replication,n=need_replication} sizes=[2,3,4,2,3,4]"},
      {"grad_all_reduce", {f32({2, 3})}, attrs({{"axis", std::string("tp")}, {"group_size", int64_t{2}}}),
       "([i,j])->([k,l]) {i=need_replication,j=need_replication,k=need_replication,l=need_replication} sizes=[2,3,2,3]"},
      {"all_gather", {f32({2, 3})}, attrs({{"axis", std::string("tp")}, {"group_size", int64_t{2}}, {"dim", int64_t{1}}}),
       "([i,j])->([k,l]) {i=need_replication,j=need_replication,k=need_replication,l=need_replication} sizes=[2,3,2,6]"},
      {"reduce_scatter", {f32({4, 3})}, attrs({{"axis", std::string("tp")}, {"group_size", int64_t{2}}, {"dim", int64_t{0}}}),
       "([i,j])->([k,l]) {i=need_replication,j=need_replication,k=need_replication,l=need_replication} sizes=[4,3,2,3]"},
      {"shard_slice", {f32({4, 6})}, attrs({{"axis", std::string("dp")}, {"group_size", int64_t{2}}, {"dim", int64_t{-1}}}),
       "([i,j])->([k,l]) {i=need_replication,j=need_replication,k=need_replication,l=need_replication} sizes=[4,6,4,3]"},
      {"all_to_all", {f32({4, 6})}, attrs({{"axis", std::string("tp")}, {"group_size", int64_t{2}}, {"split_dim", int64_t{0}},
                                           {"concat_dim", int64_t{1}}}),
                                            "([i,j])->([k,l]) {i=need_replication,j=need_replication,k=need_replication,l=need_replication} sizes=[4,6,2,12]"},
      {"send", {f32({2, 3})}, attrs({{"peer_stage", int64_t{1}}, {"tag", int64_t{7}}}),
       "([i,j])->() {i=need_replication,j=need_replication} sizes=[2,3]"},
      {"recv", {}, attrs({{"peer_stage", int64_t{0}}, {"tag", int64_t{7}}, {"shape", ints({2, 3})}, {"dtype", std::string("f32")}}),
       "()->([i,j]) {i=need_replication,j=need_replication} sizes=[2,3]"},
  };
  return cases;
}

// A C++ string literal of `s` (for the failure message, so that a new snapshot can be pasted in).
std::string quoted(const std::string& s) { return "\"" + s + "\""; }

TEST(ShardingRuleSnapshots, RulesMatchTheirSnapshots) {
  for (const RuleCase& c : ruleCases()) {
    std::optional<OpId> id = lookupOp(c.op);
    ASSERT_TRUE(id.has_value()) << c.op;
    const OpDef& def = opDef(*id);
    auto results = inferResultTypes(def, c.operands, c.attrs);
    EXPECT_TRUE(results.hasValue()) << c.op << ": " << results.status().message();
    if (!results) continue;
    ASSERT_NE(def.sharding, nullptr) << c.op;
    ShardingRule rule = def.sharding(OpContext{def, c.operands, *results, c.attrs});
    EXPECT_EQ(describe(rule), c.expected) << c.op << " snapshot: " << quoted(describe(rule));
  }
}

// ---- ShardingRuleBuilder operations ----

TEST(ShardingRuleBuilder, AddFactorMapsChosenDimsAndTakesTheFirstDimsSize) {
  std::vector<TensorType> operands = {f32({2, 3}), f32({3})}, results = {f32({2})};
  ShardingRuleBuilder rule(operands, results);
  EXPECT_EQ(rule.addFactor({0}, {0}), 0);
  EXPECT_EQ(rule.addFactor({1, 0}, {}, FactorKind::kReduction), 1);
  EXPECT_EQ(describe(rule.build()), "([i,j],[j])->([i]) {j=reduction} sizes=[2,3]");
}

TEST(ShardingRuleBuilder, ReferencesToMissingOperandsAndDimsAreSkipped) {
  std::vector<TensorType> operands = {f32({4})}, results = {f32({4})};
  ShardingRuleBuilder rule(operands, results);
  rule.addFactor({0, 0, 0}, {0, 0});  // operands 1 and 2 and result 1 do not exist
  rule.addOperandFactor(0, 5, FactorKind::kNeedReplication);  // no dim 5: a factor mapped nowhere
  rule.mapOperand(3, {0});
  EXPECT_EQ(describe(rule.build()), "([i])->([i]) {j=need_replication} sizes=[4,1]");
}

TEST(ShardingRuleBuilder, PointwiseMapsTensorsOfTheShapesRank) {
  std::vector<TensorType> operands = {f32({2, 3}), f32({}), f32({5, 7})}, results = {f32({2, 3})};
  ShardingRuleBuilder rule(operands, results);
  rule.addPointwise({2, 3}, [](int d) { return d == 1 ? FactorKind::kNeedReplication : FactorKind::kPassThrough; });
  EXPECT_EQ(describe(rule.build()), "([i,j],[],[i,j])->([i,j]) {j=need_replication} sizes=[2,3]");
}

TEST(ShardingRuleBuilder, PointwiseIfSkipsDims) {
  std::vector<TensorType> operands = {f32({2, 3, 4})}, results = {f32({2, 5, 4})};
  ShardingRuleBuilder rule(operands, results);
  EXPECT_EQ(rule.addPointwiseIf({2, 3, 4}, [](int d) { return d != 1; }), (std::vector<int>{0, 1}));
  EXPECT_EQ(describe(rule.build()), "([i,1,j])->([i,1,j]) sizes=[2,4]");
}

TEST(ShardingRuleBuilder, BroadcastingPointwiseAlignsFromTheRight) {
  std::vector<TensorType> operands = {f32({3, 1}), f32({2, 1, 4}), f32({})}, results = {f32({2, 3, 4})};
  ShardingRuleBuilder rule(operands, results);
  rule.addBroadcastingPointwise({2, 3, 4});
  EXPECT_EQ(describe(rule.build()), "([j,1],[i,1,k],[])->([i,j,k]) sizes=[2,3,4]");
}

TEST(ShardingRuleBuilder, ReductionDropsOrKeepsReducedDims) {
  std::vector<TensorType> operands = {f32({2, 3, 4})};
  std::vector<TensorType> dropped = {f32({3})}, kept = {f32({1, 3, 1})};
  ShardingRuleBuilder drop(operands, dropped), keep(operands, kept);
  drop.addReduction({true, false, true}, false);
  keep.addReduction({true, false, true}, true);
  EXPECT_EQ(describe(drop.build()), "([i,j,k])->([j]) {i=reduction,k=reduction} sizes=[2,3,4]");
  EXPECT_EQ(describe(keep.build()), "([i,j,k])->([1,j,1]) {i=reduction,k=reduction} sizes=[2,3,4]");
}

TEST(ShardingRuleBuilder, ContractionGivesBatchThenMKN) {
  std::vector<TensorType> operands = {f32({2, 1, 3, 4}), f32({5, 6, 4})}, results = {f32({2, 5, 3, 6})};
  ShardingRuleBuilder rule(operands, results);
  rule.addContraction(false, true);
  EXPECT_EQ(describe(rule.build()), "([i,1,k,l],[j,m,l])->([i,j,k,m]) {l=reduction} sizes=[2,5,3,4,6]");
}

TEST(ShardingRuleBuilder, MapBroadcastOperandTakesTheResultsFactors) {
  std::vector<TensorType> operands = {f32({3, 4}), f32({4, 5}), f32({1, 5})}, results = {f32({3, 5})};
  ShardingRuleBuilder rule(operands, results);
  rule.addContraction(false, false);
  rule.mapBroadcastOperand(2, 0);
  EXPECT_EQ(describe(rule.build()), "([i,j],[j,k],[1,k])->([i,k]) {j=reduction} sizes=[3,4,5]");
}

TEST(ShardingRuleBuilder, ReshapePassesEqualLeadingAndTrailingDims) {
  std::vector<TensorType> operands = {f32({2, 6, 1, 5})}, results = {f32({2, 3, 2, 5})};
  ShardingRuleBuilder rule(operands, results);
  rule.addReshape();
  EXPECT_EQ(describe(rule.build()),
            "([i,j,1,m])->([i,k,l,m]) {j=need_replication,k=need_replication,l=need_replication} sizes=[2,6,3,2,5]");
}

}  // namespace
}  // namespace cleave
