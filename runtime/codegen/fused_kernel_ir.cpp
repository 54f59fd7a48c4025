// LLVM IR for fused nodes: the element computation of each fusable op, the host CPU's loop nest and
// the GPU's grid-stride loop around it.
#include "runtime/codegen/fused_kernel_ir.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numbers>
#include <utility>

#include <llvm/IR/Constants.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Support/raw_ostream.h>

namespace cleave::runtime::codegen {
namespace {

using llvm::Value;

// The type of `dim`s aligned to the right of a rank-`rank` shape (numpy broadcasting).
std::vector<int64_t> alignedShape(const Shape& shape, size_t rank) {
  std::vector<int64_t> aligned(rank - shape.size(), 1);
  aligned.insert(aligned.end(), shape.begin(), shape.end());
  return aligned;
}

// The default of attribute `name` of `op` when `attrs` lacks it.
const Attribute& attributeOf(OpId op, const AttrMap& attrs, const std::string& name) {
  auto it = attrs.find(name);
  return it != attrs.end() ? it->second : opDef(op).findAttr(name)->default_value;
}

// Ops computed by polynomials (exp, erf, tanh and what is built on them).
bool isTranscendentalStep(OpId op) {
  switch (op) {
    case OpId::exp:
    case OpId::erf:
    case OpId::tanh:
    case OpId::sigmoid:
    case OpId::gelu:
    case OpId::gelu_grad: return true;
    default: return false;
  }
}

// Emits the f32 computation of each step, one element at a time.
class ElementEmitter {
 public:
  ElementEmitter(llvm::IRBuilder<>& b, llvm::Module& module, FusedTarget target)
      : b_(b), module_(module), target_(target), f32_(b.getFloatTy()), i32_(b.getInt32Ty()) {}

  // The values of steps [0, count) from the operands' values (loaded and widened to f32).
  Expected<std::vector<Value*>> steps(const FusedKernelSpec& spec, const std::vector<Value*>& operands, size_t count) {
    std::vector<Value*> values;
    for (size_t s = 0; s < count; ++s) {
      const FusedStep& step = spec.body.steps[s];
      std::vector<Value*> args;
      std::vector<const FusedArg*> literal_of;
      for (const FusedArg& arg : step.args) {
        switch (arg.kind) {
          case FusedArg::Kind::kOperand: args.push_back(operands[arg.index]); break;
          case FusedArg::Kind::kStep: args.push_back(values[arg.index]); break;
          case FusedArg::Kind::kLiteral: args.push_back(constant(arg.literal)); break;
        }
        literal_of.push_back(arg.kind == FusedArg::Kind::kLiteral ? &arg : nullptr);
      }
      CLEAVE_ASSIGN_OR_RETURN(Value * value, step_value(step, args, literal_of, s));
      // A bf16 step stores its result as bf16 when unfused: round it the same way here.
      if (spec.steps[s].dtype == DType::kBF16) value = fromBf16(toBf16(value));
      values.push_back(value);
    }
    return values;
  }

  // expFloat, for the last-axis step's rows.
  Value* expOf(Value* x) {
    llvm::IRBuilderBase::FastMathFlagGuard guard(b_);
    llvm::FastMathFlags contract;
    contract.setAllowContract(true);
    b_.setFastMathFlags(contract);
    return exp(x);
  }

  // bf16 bits (i16) -> f32, exactly.
  Value* fromBf16(Value* bits) {
    Value* word = b_.CreateShl(b_.CreateZExt(bits, i32_), 16);
    return b_.CreateBitCast(word, f32_);
  }
  // f32 -> bf16 bits, rounding to nearest even; a NaN stays a quiet NaN (as floatToBfloat16).
  Value* toBf16(Value* value) {
    Value* word = b_.CreateBitCast(value, i32_);
    Value* nan = b_.CreateICmpUGT(b_.CreateAnd(word, 0x7fffffffu), b_.getInt32(0x7f800000u));
    Value* odd = b_.CreateAnd(b_.CreateLShr(word, 16), 1u);
    Value* rounded = b_.CreateLShr(b_.CreateAdd(b_.CreateAdd(word, b_.getInt32(0x7fffu)), odd), 16);
    Value* quiet = b_.CreateOr(b_.CreateLShr(word, 16), 0x40u);
    return b_.CreateTrunc(b_.CreateSelect(nan, quiet, rounded), b_.getInt16Ty());
  }

 private:
  Value* constant(double v) { return llvm::ConstantFP::get(f32_, static_cast<double>(static_cast<float>(v))); }
  Value* c(float v) { return llvm::ConstantFP::get(f32_, static_cast<double>(v)); }
  Value* add(Value* a, Value* x) { return b_.CreateFAdd(a, x); }
  Value* sub(Value* a, Value* x) { return b_.CreateFSub(a, x); }
  Value* mul(Value* a, Value* x) { return b_.CreateFMul(a, x); }
  Value* div(Value* a, Value* x) { return b_.CreateFDiv(a, x); }
  Value* lt(Value* a, Value* x) { return b_.CreateFCmpOLT(a, x); }
  Value* gt(Value* a, Value* x) { return b_.CreateFCmpOGT(a, x); }
  Value* select(Value* cond, Value* a, Value* x) { return b_.CreateSelect(cond, a, x); }
  Value* intrinsic(llvm::Intrinsic::ID id, Value* x) { return b_.CreateUnaryIntrinsic(id, x); }
  Value* abs(Value* x) { return intrinsic(llvm::Intrinsic::fabs, x); }
  Value* sqrt(Value* x) { return intrinsic(llvm::Intrinsic::sqrt, x); }

  // p·x + k for each coefficient k after the first, as the kernels' Horner loops write it.
  Value* horner(Value* x, std::initializer_list<float> coefficients) {
    auto it = coefficients.begin();
    Value* p = c(*it++);
    for (; it != coefficients.end(); ++it) p = add(mul(p, x), c(*it));
    return p;
  }

  // expFloat of runtime/cpu/cpu_vector_math.h, operation for operation.
  Value* exp(Value* x) {
    Value* is_nan = b_.CreateFCmpUNO(x, x);
    Value* underflows = lt(x, c(-104.0f));
    Value* clamped = select(gt(x, c(89.0f)), c(89.0f), x);
    clamped = select(b_.CreateOr(is_nan, underflows), c(0.0f), clamped);
    const float round = 12582912.0f;
    Value* n = sub(add(mul(clamped, c(1.44269504088896341f)), c(round)), c(round));
    Value* r = sub(clamped, mul(n, c(0.693359375f)));
    r = sub(r, mul(n, c(-2.12194440e-4f)));
    Value* p = horner(r, {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f,
                          5.0000001201e-1f});
    p = add(add(mul(p, mul(r, r)), r), c(1.0f));
    Value* exponent = b_.CreateFPToSI(n, i32_);
    Value* half = b_.CreateAShr(exponent, 1);
    Value* low = b_.CreateBitCast(b_.CreateShl(b_.CreateAdd(half, b_.getInt32(127)), 23), f32_);
    Value* high = b_.CreateBitCast(b_.CreateShl(b_.CreateAdd(b_.CreateSub(exponent, half), b_.getInt32(127)), 23), f32_);
    return select(is_nan, x, select(underflows, c(0.0f), mul(mul(p, low), high)));
  }

  // tanhFloat.
  Value* tanh(Value* x) {
    Value* z = mul(x, x);
    Value* small = horner(z, {-5.70498872745e-3f, 2.06390887954e-2f});
    small = sub(mul(small, z), c(5.37397155531e-2f));
    small = add(mul(small, z), c(1.33314422036e-1f));
    small = sub(mul(small, z), c(3.33332819422e-1f));
    small = add(mul(mul(small, z), x), x);
    Value* magnitude = sub(c(1.0f), div(c(2.0f), add(exp(mul(c(2.0f), abs(x))), c(1.0f))));
    Value* large = select(lt(x, c(0.0f)), b_.CreateFNeg(magnitude), magnitude);
    return select(lt(abs(x), c(0.625f)), small, large);
  }

  // erfFloat.
  Value* erf(Value* x) {
    Value* z = mul(x, x);
    Value* tail = c(1.2055332981e-4f);
    tail = sub(mul(tail, z), c(8.5483270768e-4f));
    tail = add(mul(tail, z), c(5.2239776254e-3f));
    tail = sub(mul(tail, z), c(2.6866170645e-2f));
    tail = add(mul(tail, z), c(1.1283791671e-1f));
    tail = sub(mul(tail, z), c(3.7612638903e-1f));
    tail = add(mul(tail, z), c(1.2837916709551257e-1f));
    Value* series = add(x, mul(x, tail));
    Value* a = abs(x);
    Value* t = div(c(1.0f), add(c(1.0f), mul(c(0.5f), a)));
    Value* p = c(0.17087277f);
    p = sub(mul(p, t), c(0.82215223f));
    p = add(mul(p, t), c(1.48851587f));
    p = sub(mul(p, t), c(1.13520398f));
    p = add(mul(p, t), c(0.27886807f));
    p = sub(mul(p, t), c(0.18628806f));
    p = add(mul(p, t), c(0.09678418f));
    p = add(mul(p, t), c(0.37409196f));
    p = add(mul(p, t), c(1.00002368f));
    p = sub(mul(p, t), c(1.26551223f));
    Value* complement = mul(t, exp(sub(p, mul(a, a))));
    Value* magnitude = sub(c(1.0f), complement);
    Value* large = select(lt(x, c(0.0f)), b_.CreateFNeg(magnitude), magnitude);
    return select(lt(a, c(0.5f)), series, large);
  }

  // powByMultiplying<twice> of cpu_kernels_elementwise.cpp.
  Value* powByMultiplying(Value* x, int twice) {
    const int whole = (twice < 0 ? -twice : twice) / 2;
    Value* result = c(1.0f);
    if (whole > 0) {
      Value* base = x;
      for (int bits = whole;;) {
        if (bits & 1) result = mul(result, base);
        bits >>= 1;
        if (bits == 0) break;
        base = mul(base, base);
      }
    }
    if (twice % 2 != 0) {
      const float inf = std::numeric_limits<float>::infinity();
      Value* root = select(b_.CreateFCmpOEQ(x, c(-inf)), c(inf), add(sqrt(x), c(0.0f)));
      result = mul(result, root);
    }
    if (twice < 0) result = div(c(1.0f), result);
    return result;
  }

  Expected<Value*> pow(Value* x, Value* exponent, const FusedArg* literal) {
    if (literal) {
      const double twice = 2.0 * static_cast<float>(literal->literal);
      if (twice == std::nearbyint(twice) && std::abs(twice) <= 8) return powByMultiplying(x, static_cast<int>(twice));
    }
    // Any other exponent: libm's powf on the CPU (what the unfused kernel calls), libdevice's
    // __nv_powf on the GPU (what CUDA's powf is; ptx_compiler.cpp links libdevice in).
    const char* name = target_ == FusedTarget::kNvptx ? kLibdevicePow : "powf";
    llvm::FunctionCallee powf = module_.getOrInsertFunction(name, f32_, f32_, f32_);
    return static_cast<Value*>(b_.CreateCall(powf, {x, exponent}));
  }

  Value* geluExact(Value* x) {
    Value* cdf = add(c(1.0f), erf(mul(x, c(static_cast<float>(std::numbers::sqrt2 / 2)))));
    return mul(mul(x, c(0.5f)), cdf);
  }
  Value* geluTanh(Value* x) {
    const float beta = static_cast<float>(std::numbers::sqrt2 * std::numbers::inv_sqrtpi);
    Value* cube = mul(mul(x, x), x);
    Value* inner = mul(c(beta), add(x, mul(c(0.044715f), cube)));
    return mul(mul(c(0.5f), x), add(c(1.0f), tanh(inner)));
  }
  Value* geluGradExact(Value* dy, Value* x) {
    Value* cdf = mul(c(0.5f), add(c(1.0f), erf(mul(x, c(static_cast<float>(std::numbers::sqrt2 / 2))))));
    Value* pdf = mul(exp(mul(mul(c(-0.5f), x), x)), c(static_cast<float>(std::numbers::inv_sqrtpi / std::numbers::sqrt2)));
    return mul(dy, add(cdf, mul(x, pdf)));
  }
  Value* geluGradTanh(Value* dy, Value* x) {
    const float beta = static_cast<float>(std::numbers::sqrt2 * std::numbers::inv_sqrtpi);
    const float kappa = 0.044715f;
    Value* x_sq = mul(x, x);
    Value* inner = mul(c(beta), add(x, mul(mul(c(kappa), x_sq), x)));
    Value* t = tanh(inner);
    Value* left = mul(c(0.5f), x);
    Value* right = add(c(1.0f), t);
    Value* left_derivative = mul(c(0.5f), right);
    Value* right_derivative =
        mul(mul(mul(left, sub(c(1.0f), mul(t, t))), c(beta)), add(c(1.0f), mul(c(3.0f * kappa), x_sq)));
    return mul(dy, add(left_derivative, right_derivative));
  }

  Expected<Value*> step_value(const FusedStep& step, const std::vector<Value*>& a,
                              const std::vector<const FusedArg*>& literal_of, size_t index) {
    // Inside a transcendental function (exp, erf, tanh and what is built on them) multiplies and
    // adds may fuse into FMAs, as in any vectorised libm; between steps every op rounds, as the
    // unfused kernels (and PyTorch) round each op's result. Nothing else is relaxed.
    llvm::IRBuilderBase::FastMathFlagGuard guard(b_);
    if (isTranscendentalStep(step.op)) {
      llvm::FastMathFlags contract;
      contract.setAllowContract(true);
      b_.setFastMathFlags(contract);
    }
    switch (step.op) {
      case OpId::add: return add(a[0], a[1]);
      case OpId::sub: return sub(a[0], a[1]);
      case OpId::mul: return mul(a[0], a[1]);
      case OpId::div: return div(a[0], a[1]);
      case OpId::pow: return pow(a[0], a[1], literal_of[1]);
      case OpId::neg: return b_.CreateFNeg(a[0]);
      case OpId::sqrt: return sqrt(a[0]);
      case OpId::exp: return exp(a[0]);
      case OpId::erf: return erf(a[0]);
      case OpId::tanh: return tanh(a[0]);
      case OpId::sigmoid: return div(c(1.0f), add(c(1.0f), exp(b_.CreateFNeg(a[0]))));
      case OpId::relu: return select(lt(a[0], c(0.0f)), c(0.0f), a[0]);
      case OpId::gelu:
        return std::get<std::string>(attributeOf(step.op, step.attrs, "approximate")) == "tanh" ? geluTanh(a[0])
                                                                                                 : geluExact(a[0]);
      case OpId::clip: {
        Value* lo = constant(std::get<double>(attributeOf(step.op, step.attrs, "min")));
        Value* hi = constant(std::get<double>(attributeOf(step.op, step.attrs, "max")));
        Value* raised = select(lt(a[0], lo), lo, a[0]);
        return select(gt(raised, hi), hi, raised);
      }
      case OpId::relu_grad: return select(gt(a[1], c(0.0f)), a[0], c(0.0f));
      case OpId::gelu_grad:
        return std::get<std::string>(attributeOf(step.op, step.attrs, "approximate")) == "tanh"
                   ? geluGradTanh(a[0], a[1])
                   : geluGradExact(a[0], a[1]);
      case OpId::tanh_grad: return mul(a[0], sub(c(1.0f), mul(a[1], a[1])));
      case OpId::sigmoid_grad: return mul(mul(a[0], sub(c(1.0f), a[1])), a[1]);
      default:
        return Status::internal("fused: step t" + std::to_string(index) + ": no code for op " +
                                std::string(opName(step.op)) + ", which the op table marks fusable");
    }
  }

  llvm::IRBuilder<>& b_;
  llvm::Module& module_;
  FusedTarget target_;
  llvm::Type* f32_;
  llvm::Type* i32_;
};

// The element type a tensor of `dtype` is stored as.
llvm::Type* storageType(llvm::IRBuilder<>& b, DType dtype) {
  return dtype == DType::kBF16 ? static_cast<llvm::Type*>(b.getInt16Ty()) : b.getFloatTy();
}

// What the optimiser is told of a loop (its !llvm.loop metadata).
struct LoopHints {
  int interleave = 0;      // > 0: the vectoriser runs that many vector iterations side by side
  bool no_unroll = false;  // no unrolling: a short loop of known length (a 64-wide softmax row) is
                           // vectorised, not unrolled first into scalar code the vectoriser misses
};

// for (iv = start; iv < end; ++iv) body(iv).
void emitLoop(llvm::IRBuilder<>& b, Value* start, Value* end, Value* step, const char* name,
              const std::function<Status(Value*)>& body, Status& status, LoopHints hints = {}) {
  llvm::Function* function = b.GetInsertBlock()->getParent();
  llvm::LLVMContext& context = b.getContext();
  llvm::BasicBlock* before = b.GetInsertBlock();
  llvm::BasicBlock* loop = llvm::BasicBlock::Create(context, name, function);
  llvm::BasicBlock* exit = llvm::BasicBlock::Create(context, std::string(name) + ".exit", function);
  b.CreateCondBr(b.CreateICmpSLT(start, end), loop, exit);
  b.SetInsertPoint(loop);
  llvm::PHINode* iv = b.CreatePHI(b.getInt64Ty(), 2, std::string(name) + ".iv");
  iv->addIncoming(start, before);
  if (status.isOk()) status = body(iv);
  Value* next = b.CreateAdd(iv, step, "", /*HasNUW=*/true, /*HasNSW=*/true);
  iv->addIncoming(next, b.GetInsertBlock());
  llvm::BranchInst* latch = b.CreateCondBr(b.CreateICmpSLT(next, end), loop, exit);
  std::vector<llvm::Metadata*> loop_id{nullptr};  // operand 0: the node itself
  if (hints.interleave > 0) {
    llvm::Metadata* count[] = {llvm::MDString::get(context, "llvm.loop.interleave.count"),
                               llvm::ConstantAsMetadata::get(b.getInt32(hints.interleave))};
    loop_id.push_back(llvm::MDNode::get(context, count));
  }
  if (hints.no_unroll) loop_id.push_back(llvm::MDNode::get(context, {llvm::MDString::get(context, "llvm.loop.unroll.disable")}));
  if (loop_id.size() > 1) {
    llvm::TempMDTuple placeholder = llvm::MDNode::getTemporary(context, {});
    loop_id[0] = placeholder.get();
    llvm::MDNode* id = llvm::MDNode::getDistinct(context, loop_id);
    id->replaceOperandWith(0, id);
    latch->setMetadata(llvm::LLVMContext::MD_loop, id);
  }
  b.SetInsertPoint(exit);
}

// Emits the loads, the steps and the stores of result element `index`, in column `column` of the
// collapsed space, operand k being read at offsets[k] (column sums aside: see emitColumnSums; a
// total sum's summed value is added into its column's double).
Status emitElement(llvm::IRBuilder<>& b, ElementEmitter& emitter, const FusedKernelSpec& spec,
                   const std::vector<Value*>& operand_pointers, const std::vector<Value*>& result_pointers,
                   const std::vector<Value*>& offsets, Value* index, Value* column) {
  std::vector<Value*> operands;
  for (size_t k = 0; k < spec.operands.size(); ++k) {
    llvm::Type* type = storageType(b, spec.operands[k].dtype);
    Value* loaded = b.CreateLoad(type, b.CreateInBoundsGEP(type, operand_pointers[k], offsets[k]));
    operands.push_back(spec.operands[k].dtype == DType::kBF16 ? emitter.fromBf16(loaded) : loaded);
  }
  // Along the last axis, the last step finishes each row afterwards (emitRowTail): its result slot
  // takes its input's value here.
  const size_t elementwise = spec.along_last_axis ? spec.row_step
                             : static_cast<size_t>(std::count_if(spec.body.steps.begin(), spec.body.steps.end(),
                                                                 [](const FusedStep& s) { return !isColumnSum(s) && !isTotalSum(s); }));
  CLEAVE_ASSIGN_OR_RETURN(std::vector<Value*> values, emitter.steps(spec, operands, elementwise));
  if (spec.total_summed_step >= 0) {  // the body's one result
    Value* slot = b.CreateInBoundsGEP(b.getDoubleTy(), result_pointers[0], column);
    Value* value = b.CreateFPExt(values[static_cast<size_t>(spec.total_summed_step)], b.getDoubleTy());
    b.CreateStore(b.CreateFAdd(b.CreateLoad(b.getDoubleTy(), slot), value), slot);
    return Status::ok();
  }
  for (size_t r = 0; r < spec.results.size(); ++r) {
    if (spec.per_column[r]) continue;
    const size_t step = static_cast<size_t>(spec.body.returned[r]);
    Value* value = nullptr;
    if (step < elementwise) {
      value = values[step];
    } else {
      const FusedArg& input = spec.body.steps[spec.row_step].args[0];
      value = input.kind == FusedArg::Kind::kOperand ? operands[input.index] : values[input.index];
    }
    llvm::Type* type = storageType(b, spec.results[r].dtype);
    Value* stored = spec.results[r].dtype == DType::kBF16 ? emitter.toBf16(value) : value;
    b.CreateStore(stored, b.CreateInBoundsGEP(type, result_pointers[r], index));
  }
  return Status::ok();
}

// Adds the row at `row_start`, columns [from, to), of each summed result (f32, just stored and
// still in cache) into its column sum's doubles. A loop of its own: in the element loop the
// doubles would halve the vector width of the steps' f32 arithmetic. A lone column sum adds the
// operand's row (at `operand_row`, its offset of the row) instead.
void emitColumnSums(llvm::IRBuilder<>& b, const FusedKernelSpec& spec, const std::vector<Value*>& operand_pointers,
                    const std::vector<Value*>& result_pointers, const std::vector<Value*>& operand_row, Value* row_start,
                    Value* from, Value* to, Status& status) {
  for (size_t r = 0; r < spec.results.size(); ++r) {
    Value* summed = nullptr;
    Value* start = row_start;
    if (spec.summed_operand >= 0) {  // the operand is the iteration space: contiguous, not broadcast
      summed = operand_pointers[static_cast<size_t>(spec.summed_operand)];
      start = operand_row[static_cast<size_t>(spec.summed_operand)];
    } else if (spec.summed_result[r] >= 0) {
      summed = result_pointers[static_cast<size_t>(spec.summed_result[r])];
    } else {
      continue;
    }
    emitLoop(b, from, to, b.getInt64(1), "column.sum", [&](Value* column) -> Status {
      Value* element = b.CreateLoad(b.getFloatTy(), b.CreateInBoundsGEP(b.getFloatTy(), summed, b.CreateAdd(start, column)));
      Value* slot = b.CreateInBoundsGEP(b.getDoubleTy(), result_pointers[r], column);
      b.CreateStore(b.CreateFAdd(b.CreateLoad(b.getDoubleTy(), slot), b.CreateFPExt(element, b.getDoubleTy())), slot);
      return Status::ok();
    }, status);
  }
}

// Each operand's offset for row `row` of the collapsed space (all dims but the last).
std::vector<Value*> rowOffsets(llvm::IRBuilder<>& b, const FusedKernelSpec& spec, Value* row) {
  std::vector<Value*> offsets(spec.operands.size(), b.getInt64(0));
  Value* rest = row;
  for (int d = static_cast<int>(spec.dims.size()) - 2; d >= 0; --d) {
    Value* index = b.CreateURem(rest, b.getInt64(spec.dims[d]));
    rest = b.CreateUDiv(rest, b.getInt64(spec.dims[d]));
    for (size_t k = 0; k < spec.operands.size(); ++k)
      if (spec.operand_strides[k][d] != 0)
        offsets[k] = b.CreateAdd(offsets[k], b.CreateMul(index, b.getInt64(spec.operand_strides[k][d])));
  }
  return offsets;
}

// offsets[k] + column · (operand k's stride along the last dim).
std::vector<Value*> elementOffsets(llvm::IRBuilder<>& b, const FusedKernelSpec& spec, const std::vector<Value*>& row,
                                   Value* column) {
  std::vector<Value*> offsets;
  for (size_t k = 0; k < spec.operands.size(); ++k) {
    const int64_t stride = spec.operand_strides[k].back();
    offsets.push_back(stride == 0 ? row[k] : b.CreateAdd(row[k], b.CreateMul(column, b.getInt64(stride))));
  }
  return offsets;
}

// Who walks a row's columns: on the host one thread, columns 0, 1, 2, ...; on the GPU a warp, lane
// l taking columns l, l + 32, ... and the lanes' partial maximum and sum combined by shuffles.
struct RowLanes {
  Value* first_column;
  Value* column_step;
  std::function<Value*(Value*)> combine_max;  // every lane's maximum (f32), in every lane
  std::function<Value*(Value*)> combine_sum;  // every lane's sum (f64), in every lane
  LoopHints column_loops = {};                 // of each loop over the row's columns
};

// Rows of up to 128 columns keep their loops whole for the vectoriser: unrolled first, a 64-wide
// softmax row became scalar code, 3x slower (kernels_bench --elementwise); longer rows vectorise
// either way and gain from unrolling after.
RowLanes oneThreadPerRow(llvm::IRBuilder<>& b, int64_t columns) {
  auto same = [](Value* v) { return v; };
  return {b.getInt64(0), b.getInt64(1), same, same, LoopHints{.no_unroll = columns <= 128}};
}

// `value` of lane (this lane xor lane_mask) of the warp (shfl.sync.bfly; f64 as two 32-bit halves).
Value* shuffleXor(llvm::IRBuilder<>& b, llvm::Module& module, Value* value, int lane_mask) {
  Value* all_lanes = b.getInt32(0xffffffffu);
  Value* mask = b.getInt32(lane_mask);
  Value* clamp = b.getInt32(0x1f);
  if (value->getType()->isFloatTy())
    return b.CreateCall(llvm::Intrinsic::getDeclaration(&module, llvm::Intrinsic::nvvm_shfl_sync_bfly_f32),
                        {all_lanes, value, mask, clamp});
  llvm::Function* shuffle = llvm::Intrinsic::getDeclaration(&module, llvm::Intrinsic::nvvm_shfl_sync_bfly_i32);
  Value* bits = b.CreateBitCast(value, b.getInt64Ty());
  Value* low = b.CreateCall(shuffle, {all_lanes, b.CreateTrunc(bits, b.getInt32Ty()), mask, clamp});
  Value* high = b.CreateCall(shuffle, {all_lanes, b.CreateTrunc(b.CreateLShr(bits, 32), b.getInt32Ty()), mask, clamp});
  Value* joined = b.CreateOr(b.CreateZExt(low, b.getInt64Ty()), b.CreateShl(b.CreateZExt(high, b.getInt64Ty()), 32));
  return b.CreateBitCast(joined, b.getDoubleTy());
}

// A warp per row. The butterfly leaves the same bits in every lane (each addition's operands are
// the same two partials, in either order).
RowLanes oneWarpPerRow(llvm::IRBuilder<>& b, llvm::Module& module, Value* lane) {
  auto butterfly = [&b, &module](const std::function<Value*(Value*, Value*)>& combine) {
    return [&b, &module, combine](Value* value) {
      for (int lane_mask = 16; lane_mask >= 1; lane_mask /= 2) value = combine(value, shuffleXor(b, module, value, lane_mask));
      return value;
    };
  };
  return {lane, b.getInt64(kWarpLanes),
          butterfly([&b](Value* mine, Value* theirs) { return b.CreateSelect(b.CreateFCmpOGT(theirs, mine), theirs, mine); }),
          butterfly([&b](Value* mine, Value* theirs) { return b.CreateFAdd(mine, theirs); })};
}

// The sum over a row's columns (this lane's, then every lane's) of term(c), a double, in any order
// (the loop vectorises), through `sum_slot`.
Value* emitRowSumOf(llvm::IRBuilder<>& b, int64_t columns, const RowLanes& lanes, llvm::AllocaInst* sum_slot,
                    const char* name, const std::function<Value*(Value*)>& term, Status& status) {
  llvm::Type* f64 = b.getDoubleTy();
  b.CreateStore(llvm::ConstantFP::get(f64, 0.0), sum_slot);
  emitLoop(b, lanes.first_column, b.getInt64(columns), lanes.column_step, name, [&](Value* c) -> Status {
    Value* value = term(c);
    llvm::IRBuilderBase::FastMathFlagGuard guard(b);
    llvm::FastMathFlags reassociate;
    reassociate.setAllowReassoc();
    b.setFastMathFlags(reassociate);
    b.CreateStore(b.CreateFAdd(b.CreateLoad(f64, sum_slot), value), sum_slot);
    return Status::ok();
  }, status, lanes.column_loops);
  return lanes.combine_sum(b.CreateLoad(f64, sum_slot));
}

// The sum over row y's columns of term(y[c] in double) (emitRowSumOf).
Value* emitRowSum(llvm::IRBuilder<>& b, Value* y, int64_t columns, const RowLanes& lanes, llvm::AllocaInst* sum_slot,
                  const char* name, const std::function<Value*(Value*)>& term, Status& status) {
  llvm::Type* f32 = b.getFloatTy();
  return emitRowSumOf(b, columns, lanes, sum_slot, name, [&](Value* c) {
    return term(b.CreateFPExt(b.CreateLoad(f32, b.CreateInBoundsGEP(f32, y, c)), b.getDoubleTy()));
  }, status);
}

// The row's mean and 1 / sqrt(variance + epsilon) of row x, in double, as rowMoments of
// runtime/cpu/cpu_kernel_support.h computes them (layer_norm and layer_norm_grad).
std::pair<Value*, Value*> emitRowMoments(llvm::IRBuilder<>& b, Value* x, int64_t columns, const RowLanes& lanes,
                                         llvm::AllocaInst* sum_slot, double epsilon, Status& status) {
  llvm::Type* f64 = b.getDoubleTy();
  Value* count = llvm::ConstantFP::get(f64, static_cast<double>(columns));
  Value* mean = b.CreateFDiv(emitRowSum(b, x, columns, lanes, sum_slot, "mean", [](Value* v) { return v; }, status), count);
  Value* squares = emitRowSum(b, x, columns, lanes, sum_slot, "squares", [&](Value* v) {
    Value* centred = b.CreateFSub(v, mean);
    return b.CreateFMul(centred, centred);
  }, status);
  Value* variance = b.CreateFAdd(b.CreateFDiv(squares, count), llvm::ConstantFP::get(f64, epsilon));
  Value* sqrt = b.CreateCall(llvm::Intrinsic::getDeclaration(b.GetInsertBlock()->getModule(), llvm::Intrinsic::sqrt, {f64}),
                             {variance});
  return {mean, b.CreateFDiv(llvm::ConstantFP::get(f64, 1.0), sqrt)};
}

// 1 / sqrt(mean(x²) + epsilon) of row x, in double, as rowRmsReciprocal of
// runtime/cpu/cpu_kernel_support.h computes it (rms_norm and rms_norm_grad).
Value* emitRowRmsReciprocal(llvm::IRBuilder<>& b, Value* x, int64_t columns, const RowLanes& lanes,
                            llvm::AllocaInst* sum_slot, double epsilon, Status& status) {
  llvm::Type* f64 = b.getDoubleTy();
  Value* squares = emitRowSum(b, x, columns, lanes, sum_slot, "squares", [&](Value* v) { return b.CreateFMul(v, v); }, status);
  Value* mean = b.CreateFAdd(b.CreateFDiv(squares, llvm::ConstantFP::get(f64, static_cast<double>(columns))),
                             llvm::ConstantFP::get(f64, epsilon));
  Value* sqrt = b.CreateCall(llvm::Intrinsic::getDeclaration(b.GetInsertBlock()->getModule(), llvm::Intrinsic::sqrt, {f64}),
                             {mean});
  return b.CreateFDiv(llvm::ConstantFP::get(f64, 1.0), sqrt);
}

// A layer norm's row y (holding its input), as the layer_norm kernel computes it: the mean and the
// sum of squared deviations in double, rstd = 1 / sqrt(squares / n + epsilon), then
// y = (y·rstd + (−rstd·mean))·scale + bias in f32. An RMS norm's as the rms_norm kernel does:
// rstd = 1 / sqrt(mean(y²) + epsilon) in double, then y = (y·rstd)·scale in f32.
void emitLayerNormTail(llvm::IRBuilder<>& b, const FusedKernelSpec& spec, const std::vector<Value*>& operand_pointers,
                       Value* y, const RowLanes& lanes, llvm::AllocaInst* sum_slot, Status& status) {
  const FusedStep& step = spec.body.steps.back();
  llvm::Type* f32 = b.getFloatTy();
  const int64_t columns = spec.dims.back();
  const double epsilon = std::get<double>(attributeOf(step.op, step.attrs, "epsilon"));
  Value* a = nullptr;
  Value* shift = nullptr;  // none for an RMS norm
  if (step.op == OpId::rms_norm) {
    a = b.CreateFPTrunc(emitRowRmsReciprocal(b, y, columns, lanes, sum_slot, epsilon, status), f32);
  } else {
    const auto [mean, rstd] = emitRowMoments(b, y, columns, lanes, sum_slot, epsilon, status);
    a = b.CreateFPTrunc(rstd, f32);
    shift = b.CreateFPTrunc(b.CreateFNeg(b.CreateFMul(rstd, mean)), f32);
  }
  // The scale and the bias: operands of f32[columns] (fused_body.cpp checks), read at column c.
  const FusedArg* scale = &step.args[1];
  const FusedArg* bias = step.args.size() > 2 ? &step.args[2] : nullptr;
  emitLoop(b, lanes.first_column, b.getInt64(columns), lanes.column_step, "normalise", [&](Value* c) -> Status {
    Value* at = b.CreateInBoundsGEP(f32, y, c);
    Value* normalised = b.CreateFMul(b.CreateLoad(f32, at), a);
    if (shift) normalised = b.CreateFAdd(normalised, shift);
    Value* v = b.CreateFMul(normalised, b.CreateLoad(f32, b.CreateInBoundsGEP(f32, operand_pointers[scale->index], c)));
    if (bias) v = b.CreateFAdd(v, b.CreateLoad(f32, b.CreateInBoundsGEP(f32, operand_pointers[bias->index], c)));
    b.CreateStore(v, at);
    return Status::ok();
  }, status, lanes.column_loops);
}

// layer_norm_grad's row at `row_start`, whose dx row y holds dy, as layerNormGradKernel computes
// it (runtime/cpu/cpu_kernels_gradient.cpp): with x̂ = (x − mean)·rstd and g = dy·scale in f32,
//   dx = rstd·(g − mean(g) − x̂·mean(g·x̂)), row sums in double;
// and dy·x̂ and dy added into the row block's doubles of dscale and dbias (host only).
// rms_norm_grad's as rmsNormGradKernel: x̂ = x·rstd, dx = rstd·(g − x̂·mean(g·x̂)), dscale only.
void emitLayerNormGradTail(llvm::IRBuilder<>& b, const FusedKernelSpec& spec, const std::vector<Value*>& operand_pointers,
                           const std::vector<Value*>& result_pointers, Value* y, Value* row_start, const RowLanes& lanes,
                           llvm::AllocaInst* sum_slot, Status& status) {
  const FusedStep& step = spec.body.steps[spec.row_step];
  llvm::Type* f32 = b.getFloatTy();
  llvm::Type* f64 = b.getDoubleTy();
  const int64_t columns = spec.dims.back();
  // x has the result's type (fused_body.cpp checks): its row starts where the result's does.
  Value* x = b.CreateInBoundsGEP(f32, operand_pointers[step.args[1].index], row_start);
  Value* scale = operand_pointers[step.args[2].index];
  const bool rms = step.op == OpId::rms_norm_grad;  // no mean, no dbias, no mean(g) term
  Value* partial[2] = {nullptr, nullptr};  // dscale's and dbias's doubles
  for (size_t r = 0; r < spec.results.size(); ++r)
    if (const size_t s = static_cast<size_t>(spec.body.returned[r]); s > spec.row_step) partial[s - spec.row_step - 1] = result_pointers[r];
  const double epsilon = std::get<double>(attributeOf(step.op, step.attrs, "epsilon"));
  Value* mean_f = nullptr;
  Value* rstd_f = nullptr;
  if (rms) {
    rstd_f = b.CreateFPTrunc(emitRowRmsReciprocal(b, x, columns, lanes, sum_slot, epsilon, status), f32);
  } else {
    const auto [mean, rstd] = emitRowMoments(b, x, columns, lanes, sum_slot, epsilon, status);
    mean_f = b.CreateFPTrunc(mean, f32);
    rstd_f = b.CreateFPTrunc(rstd, f32);
  }
  auto load = [&](Value* row, Value* c) { return b.CreateLoad(f32, b.CreateInBoundsGEP(f32, row, c)); };
  auto xhat = [&](Value* c) { return b.CreateFMul(rms ? load(x, c) : b.CreateFSub(load(x, c), mean_f), rstd_f); };
  auto g = [&](Value* c) { return b.CreateFMul(load(y, c), load(scale, c)); };
  // One pass for dscale's and dbias's terms and the row sums of g and g·x̂, each sum as its own pass
  // would make it (three passes: 77 us for [512,256] at 1 thread, one: 65-69; kernels_bench
  // --elementwise).
  llvm::Function* function = b.GetInsertBlock()->getParent();
  llvm::IRBuilder<> at_entry(&function->getEntryBlock(), function->getEntryBlock().begin());
  llvm::AllocaInst* gx_slot = at_entry.CreateAlloca(f64, nullptr, "row.sum.gx");
  b.CreateStore(llvm::ConstantFP::get(f64, 0.0), sum_slot);
  b.CreateStore(llvm::ConstantFP::get(f64, 0.0), gx_slot);
  emitLoop(b, lanes.first_column, b.getInt64(columns), lanes.column_step, "dscale.dbias.g", [&](Value* c) -> Status {
    Value* dy = load(y, c);
    Value* x_hat = xhat(c);
    Value* terms[2] = {b.CreateFMul(dy, x_hat), dy};
    for (int k = 0; k < (rms ? 1 : 2); ++k) {
      Value* slot = b.CreateInBoundsGEP(f64, partial[k], c);
      b.CreateStore(b.CreateFAdd(b.CreateLoad(f64, slot), b.CreateFPExt(terms[k], f64)), slot);
    }
    Value* g_c = b.CreateFMul(dy, load(scale, c));
    llvm::IRBuilderBase::FastMathFlagGuard guard(b);
    llvm::FastMathFlags reassociate;
    reassociate.setAllowReassoc();
    b.setFastMathFlags(reassociate);
    if (!rms) b.CreateStore(b.CreateFAdd(b.CreateLoad(f64, sum_slot), b.CreateFPExt(g_c, f64)), sum_slot);
    b.CreateStore(b.CreateFAdd(b.CreateLoad(f64, gx_slot), b.CreateFPExt(b.CreateFMul(g_c, x_hat), f64)), gx_slot);
    return Status::ok();
  }, status, lanes.column_loops);
  Value* count = llvm::ConstantFP::get(f64, static_cast<double>(columns));
  Value* g_mean = rms ? nullptr : b.CreateFPTrunc(b.CreateFDiv(lanes.combine_sum(b.CreateLoad(f64, sum_slot)), count), f32);
  Value* gx_mean = b.CreateFPTrunc(b.CreateFDiv(lanes.combine_sum(b.CreateLoad(f64, gx_slot)), count), f32);
  emitLoop(b, lanes.first_column, b.getInt64(columns), lanes.column_step, "dx", [&](Value* c) -> Status {
    Value* centred = rms ? g(c) : b.CreateFSub(g(c), g_mean);
    Value* dx = b.CreateFMul(rstd_f, b.CreateFSub(centred, b.CreateFMul(xhat(c), gx_mean)));
    b.CreateStore(dx, b.CreateInBoundsGEP(f32, y, c));
    return Status::ok();
  }, status, lanes.column_loops);
}

// The result of the last-axis step, whose row at `row_start` holds its input. A softmax: the row's
// maximum, e^(x - max) and their sum in double, then the products by 1/sum, as the softmax kernel;
// a layer norm or an RMS norm: emitLayerNormTail.
void emitRowTail(llvm::IRBuilder<>& b, ElementEmitter& emitter, const FusedKernelSpec& spec,
                 const std::vector<Value*>& operand_pointers, const std::vector<Value*>& result_pointers,
                 Value* row_start, const RowLanes& lanes, llvm::AllocaInst* max_slot, llvm::AllocaInst* sum_slot,
                 Status& status) {
  size_t r = 0;
  while (static_cast<size_t>(spec.body.returned[r]) != spec.row_step) ++r;
  llvm::Type* f32 = b.getFloatTy();
  Value* y = b.CreateInBoundsGEP(f32, result_pointers[r], row_start);
  if (isRowGradientOp(spec.body.steps[spec.row_step].op)) {
    emitLayerNormGradTail(b, spec, operand_pointers, result_pointers, y, row_start, lanes, sum_slot, status);
    return;
  }
  if (spec.body.steps[spec.row_step].op == OpId::layer_norm || spec.body.steps[spec.row_step].op == OpId::rms_norm) {
    emitLayerNormTail(b, spec, operand_pointers, y, lanes, sum_slot, status);
    return;
  }
  Value* first = lanes.first_column;
  Value* step = lanes.column_step;
  Value* columns = b.getInt64(spec.dims.back());
  // Each loop vectorises: the maximum may ignore NaNs (a NaN still makes the row NaN through its
  // exp and the sum), and the sum may be added in any order (in double, as the kernel's 8 lanes).
  b.CreateStore(llvm::ConstantFP::getInfinity(f32, /*Negative=*/true), max_slot);
  emitLoop(b, first, columns, step, "max", [&](Value* c) -> Status {
    llvm::IRBuilderBase::FastMathFlagGuard guard(b);
    llvm::FastMathFlags no_nans;
    no_nans.setNoNaNs();
    no_nans.setNoSignedZeros();
    b.setFastMathFlags(no_nans);
    Value* v = b.CreateLoad(f32, b.CreateInBoundsGEP(f32, y, c));
    Value* m = b.CreateLoad(f32, max_slot);
    b.CreateStore(b.CreateSelect(b.CreateFCmpOGT(v, m), v, m), max_slot);
    return Status::ok();
  }, status, lanes.column_loops);
  Value* max = lanes.combine_max(b.CreateLoad(f32, max_slot));
  emitLoop(b, first, columns, step, "exp", [&](Value* c) -> Status {
    Value* at = b.CreateInBoundsGEP(f32, y, c);
    b.CreateStore(emitter.expOf(b.CreateFSub(b.CreateLoad(f32, at), max)), at);
    return Status::ok();
  }, status, lanes.column_loops);
  Value* sum = emitRowSum(b, y, spec.dims.back(), lanes, sum_slot, "sum", [](Value* e) { return e; }, status);
  Value* scale = b.CreateFPTrunc(b.CreateFDiv(llvm::ConstantFP::get(b.getDoubleTy(), 1.0), sum), f32);
  emitLoop(b, first, columns, step, "scale", [&](Value* c) -> Status {
    Value* at = b.CreateInBoundsGEP(f32, y, c);
    b.CreateStore(b.CreateFMul(b.CreateLoad(f32, at), scale), at);
    return Status::ok();
  }, status, lanes.column_loops);
}

// One whole row of the collapsed space (along-last-axis bodies): its elements, then the row tail.
Status emitRow(llvm::IRBuilder<>& b, ElementEmitter& emitter, const FusedKernelSpec& spec,
               const std::vector<Value*>& operand_pointers, const std::vector<Value*>& result_pointers, Value* row,
               const RowLanes& lanes, llvm::AllocaInst* max_slot, llvm::AllocaInst* sum_slot) {
  Value* columns = b.getInt64(spec.dims.back());
  Value* row_start = b.CreateMul(row, columns);
  const std::vector<Value*> row_offsets = rowOffsets(b, spec, row);
  Status status;
  emitLoop(b, lanes.first_column, columns, lanes.column_step, "column", [&](Value* column) -> Status {
    return emitElement(b, emitter, spec, operand_pointers, result_pointers, elementOffsets(b, spec, row_offsets, column),
                       b.CreateAdd(row_start, column), column);
  }, status, lanes.column_loops);
  CLEAVE_TRY(status);
  emitRowTail(b, emitter, spec, operand_pointers, result_pointers, row_start, lanes, max_slot, sum_slot, status);
  return status;
}

// Stack slots for a row's running maximum (f32) and sum (f64), at the function's entry.
std::pair<llvm::AllocaInst*, llvm::AllocaInst*> rowSlots(llvm::IRBuilder<>& b) {
  return {b.CreateAlloca(b.getFloatTy(), nullptr, "row.max"), b.CreateAlloca(b.getDoubleTy(), nullptr, "row.sum")};
}

bool hasTranscendentalStep(const FusedKernelSpec& spec) {
  return std::any_of(spec.body.steps.begin(), spec.body.steps.end(),
                     [](const FusedStep& step) { return isTranscendentalStep(step.op); });
}

// The host function: rows of the collapsed space, the last dim as the inner (vectorised) loop.
Status buildHostKernel(const FusedKernelSpec& spec, const std::string& name, llvm::Module& module, int interleave) {
  llvm::LLVMContext& context = module.getContext();
  llvm::IRBuilder<> b(context);
  llvm::Type* i64 = b.getInt64Ty();
  llvm::Type* bytes = b.getInt8PtrTy();
  // 1. The body, with each tensor a noalias parameter (the plan never aliases a fused node's
  //    results with its operands: the op is not in_place).
  std::vector<llvm::Type*> params;
  for (const TensorType& t : spec.operands) params.push_back(storageType(b, t.dtype)->getPointerTo());
  for (size_t r = 0; r < spec.results.size(); ++r)
    params.push_back((spec.per_column[r] ? b.getDoubleTy() : storageType(b, spec.results[r].dtype))->getPointerTo());
  params.push_back(i64);
  params.push_back(i64);
  auto* body_type = llvm::FunctionType::get(b.getVoidTy(), params, false);
  auto* body = llvm::Function::Create(body_type, llvm::Function::InternalLinkage, name + ".body", module);
  body->addFnAttr(llvm::Attribute::NoInline);
  body->addFnAttr(llvm::Attribute::NoUnwind);
  const size_t tensors = spec.operands.size() + spec.results.size();
  for (size_t p = 0; p < tensors; ++p) body->addParamAttr(static_cast<unsigned>(p), llvm::Attribute::NoAlias);
  b.SetInsertPoint(llvm::BasicBlock::Create(context, "entry", body));
  std::vector<Value*> operand_pointers, result_pointers;
  for (size_t p = 0; p < spec.operands.size(); ++p) operand_pointers.push_back(body->getArg(p));
  for (size_t p = 0; p < spec.results.size(); ++p) result_pointers.push_back(body->getArg(spec.operands.size() + p));
  Value* begin = body->getArg(tensors);
  Value* end = body->getArg(tensors + 1);
  Value* columns = b.getInt64(spec.dims.back());
  ElementEmitter emitter(b, module, FusedTarget::kHostCpu);
  Status status;
  Value* first_row = b.CreateUDiv(begin, columns);
  Value* end_row = b.CreateUDiv(b.CreateAdd(end, b.getInt64(spec.dims.back() - 1)), columns);
  if (spec.along_last_axis) {  // [begin, end) holds whole rows (hostFusedKernel's row_length)
    const std::pair<llvm::AllocaInst*, llvm::AllocaInst*> slots = rowSlots(b);
    const RowLanes lanes = oneThreadPerRow(b, spec.dims.back());
    emitLoop(b, first_row, end_row, b.getInt64(1), "row", [&](Value* row) -> Status {
      return emitRow(b, emitter, spec, operand_pointers, result_pointers, row, lanes, slots.first, slots.second);
    }, status);
  } else emitLoop(b, first_row, end_row, b.getInt64(1), "row", [&](Value* row) -> Status {
    Value* row_start = b.CreateMul(row, columns);
    Value* from = b.CreateSelect(b.CreateICmpSGT(begin, row_start), b.CreateSub(begin, row_start), b.getInt64(0));
    Value* to = b.CreateSelect(b.CreateICmpSLT(b.CreateSub(end, row_start), columns), b.CreateSub(end, row_start), columns);
    const std::vector<Value*> row_offsets = rowOffsets(b, spec, row);
    Status inner;
    emitLoop(b, from, to, b.getInt64(1), "column", [&](Value* column) -> Status {
      return emitElement(b, emitter, spec, operand_pointers, result_pointers, elementOffsets(b, spec, row_offsets, column),
                         b.CreateAdd(row_start, column), column);
    }, inner, {hasTranscendentalStep(spec) ? interleave : 0});
    emitColumnSums(b, spec, operand_pointers, result_pointers, row_offsets, row_start, from, to, inner);
    return inner;
  }, status);
  CLEAVE_TRY(status);
  b.CreateRetVoid();

  // 2. The entry point: pointers from the two arrays, then the body.
  auto* entry_type = llvm::FunctionType::get(b.getVoidTy(), {bytes->getPointerTo(), bytes->getPointerTo(), i64, i64}, false);
  auto* entry = llvm::Function::Create(entry_type, llvm::Function::ExternalLinkage, name, module);
  entry->addFnAttr(llvm::Attribute::NoUnwind);
  b.SetInsertPoint(llvm::BasicBlock::Create(context, "entry", entry));
  std::vector<Value*> args;
  auto pointerAt = [&](Value* array, size_t index, llvm::Type* element) {
    Value* slot = b.CreateInBoundsGEP(bytes, array, b.getInt64(index));
    return b.CreateBitCast(b.CreateLoad(bytes, slot), element->getPointerTo());
  };
  for (size_t k = 0; k < spec.operands.size(); ++k)
    args.push_back(pointerAt(entry->getArg(0), k, storageType(b, spec.operands[k].dtype)));
  for (size_t r = 0; r < spec.results.size(); ++r)
    args.push_back(pointerAt(entry->getArg(1), r, spec.per_column[r] ? b.getDoubleTy() : storageType(b, spec.results[r].dtype)));
  args.push_back(entry->getArg(2));
  args.push_back(entry->getArg(3));
  b.CreateCall(body, args);
  b.CreateRetVoid();
  return Status::ok();
}

// The GPU kernel: one result element per thread and iteration of a grid-stride loop; along the
// last axis, one row per warp (kWarpLanes threads: coalesced loads, shuffled reductions).
Status buildNvptxKernel(const FusedKernelSpec& spec, const std::string& name, llvm::Module& module) {
  if (spec.along_last_axis && isRowGradientOp(spec.body.steps[spec.row_step].op))
    return Status::badInput("fused kernel " + name + ": " + std::string(opName(spec.body.steps[spec.row_step].op)) +
                            " has no GPU code yet");
  if (spec.summed_operand >= 0)
    return Status::badInput("fused kernel " + name + ": a lone column sum has no GPU code (the reduce_sum kernel runs it)");
  if (spec.total_summed_step >= 0)
    return Status::badInput("fused kernel " + name + ": a total sum has no GPU code (its chain's kernel, then the "
                            "reduce_sum kernel, run it)");
  llvm::LLVMContext& context = module.getContext();
  llvm::IRBuilder<> b(context);
  llvm::Type* i64 = b.getInt64Ty();
  std::vector<llvm::Type*> params;
  for (const TensorType& t : spec.operands) params.push_back(storageType(b, t.dtype)->getPointerTo());
  for (size_t r = 0; r < spec.results.size(); ++r)
    if (spec.summed_result[r] < 0) params.push_back(storageType(b, spec.results[r].dtype)->getPointerTo());
  params.push_back(i64);
  auto* type = llvm::FunctionType::get(b.getVoidTy(), params, false);
  auto* kernel = llvm::Function::Create(type, llvm::Function::ExternalLinkage, name, module);
  const size_t tensors = params.size() - 1;
  for (size_t p = 0; p < tensors; ++p) kernel->addParamAttr(static_cast<unsigned>(p), llvm::Attribute::NoAlias);
  b.SetInsertPoint(llvm::BasicBlock::Create(context, "entry", kernel));
  std::vector<Value*> operand_pointers, result_pointers;
  for (size_t p = 0; p < spec.operands.size(); ++p) operand_pointers.push_back(kernel->getArg(p));
  size_t next_param = spec.operands.size();
  for (size_t r = 0; r < spec.results.size(); ++r)
    result_pointers.push_back(spec.summed_result[r] < 0 ? kernel->getArg(next_param++) : nullptr);
  Value* count = kernel->getArg(tensors);
  auto special = [&](llvm::Intrinsic::ID id) {
    return b.CreateZExt(b.CreateCall(llvm::Intrinsic::getDeclaration(&module, id)), i64);
  };
  Value* thread = special(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x);
  Value* block = special(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
  Value* block_size = special(llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x);
  Value* grid_size = special(llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x);
  Value* first = b.CreateAdd(b.CreateMul(block, block_size), thread);
  Value* stride = b.CreateMul(grid_size, block_size);
  Value* columns = b.getInt64(spec.dims.back());
  ElementEmitter emitter(b, module, FusedTarget::kNvptx);
  Status status;
  if (spec.along_last_axis) {  // one row per warp; `count` counts rows. Every lane of a warp takes
                               // the same rows, so all 32 reach each shuffle.
    const std::pair<llvm::AllocaInst*, llvm::AllocaInst*> slots = rowSlots(b);
    Value* warp_lanes = b.getInt64(kWarpLanes);
    const RowLanes lanes = oneWarpPerRow(b, module, b.CreateURem(thread, warp_lanes));
    emitLoop(b, b.CreateUDiv(first, warp_lanes), count, b.CreateUDiv(stride, warp_lanes), "row", [&](Value* row) -> Status {
      return emitRow(b, emitter, spec, operand_pointers, result_pointers, row, lanes, slots.first, slots.second);
    }, status);
  } else emitLoop(b, first, count, stride, "element", [&](Value* index) -> Status {
    const std::vector<Value*> row_offsets = rowOffsets(b, spec, b.CreateUDiv(index, columns));
    Value* column = b.CreateURem(index, columns);
    return emitElement(b, emitter, spec, operand_pointers, result_pointers, elementOffsets(b, spec, row_offsets, column),
                       index, column);
  }, status);
  CLEAVE_TRY(status);
  b.CreateRetVoid();
  // Marks the function a kernel (an entry point the driver can launch).
  llvm::Metadata* annotation[] = {llvm::ValueAsMetadata::get(kernel), llvm::MDString::get(context, "kernel"),
                                  llvm::ValueAsMetadata::get(b.getInt32(1))};
  module.getOrInsertNamedMetadata("nvvm.annotations")->addOperand(llvm::MDNode::get(context, annotation));
  return Status::ok();
}

}  // namespace

Expected<FusedKernelSpec> fusedKernelSpec(const OpContext& ctx) {
  FusedKernelSpec spec;
  CLEAVE_ASSIGN_OR_RETURN(spec.body, parseFusedBody(ctx.getString("body")));
  spec.operands.assign(ctx.operands.begin(), ctx.operands.end());
  CLEAVE_ASSIGN_OR_RETURN(spec.steps, inferFusedStepTypes(spec.body, spec.operands));
  for (int r : spec.body.returned) {
    spec.results.push_back(spec.steps[r]);
    int summed = -1;
    if (const FusedArg& input = spec.body.steps[r].args[0]; isColumnSum(spec.body.steps[r])) {
      if (input.kind == FusedArg::Kind::kOperand) spec.summed_operand = input.index;  // a lone column sum
      else summed = static_cast<int>(std::find(spec.body.returned.begin(), spec.body.returned.end(), input.index) -
                                     spec.body.returned.begin());
    }
    if (isTotalSum(spec.body.steps[r])) spec.total_summed_step = spec.body.steps[r].args[0].index;
    spec.summed_result.push_back(summed);
    spec.per_column.push_back(isPerColumn(spec.body.steps[r]) || isTotalSum(spec.body.steps[r]));
  }
  const Shape& shape = fusedIterationShape(spec.body, spec.steps, spec.operands);
  spec.numel = TensorType{DType::kF32, shape}.numel();
  // 1. Each operand's row-major strides over the result's rank, 0 along broadcast dims.
  const size_t rank = shape.size();
  std::vector<std::vector<int64_t>> strides;
  for (const TensorType& operand : spec.operands) {
    const std::vector<int64_t> aligned = alignedShape(operand.shape, rank);
    std::vector<int64_t> s(rank, 0);
    int64_t step = 1;
    for (size_t d = rank; d-- > 0;) {
      s[d] = aligned[d] == shape[d] && shape[d] != 1 ? step : 0;
      step *= aligned[d];
    }
    strides.push_back(std::move(s));
  }
  // 2. Drop size-1 dims; merge a dim into the one before it where every operand either steps
  //    through both contiguously or is broadcast along both.
  // 3. Along the last axis the rows stay rows: the last dim is kept whole and apart.
  spec.along_last_axis = opDef(spec.body.steps.back().op).fusable_along_last_axis;
  spec.row_step = spec.body.steps.size() - 1;
  while (spec.row_step > 0 && spec.body.steps[spec.row_step].result > 0) --spec.row_step;
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> merged(spec.operands.size());
  for (size_t d = 0; d < rank; ++d) {
    const bool kept_apart = (spec.along_last_axis || spec.hasPerColumnResults()) && d + 1 == rank;
    if (shape[d] == 1 && !kept_apart) continue;
    bool mergeable = !dims.empty() && !kept_apart;
    for (size_t k = 0; k < spec.operands.size() && mergeable; ++k) {
      const int64_t previous = merged[k].back();
      mergeable = (previous == 0 && strides[k][d] == 0) || (previous != 0 && previous == strides[k][d] * shape[d]);
    }
    if (mergeable) {
      dims.back() *= shape[d];
      for (size_t k = 0; k < spec.operands.size(); ++k) merged[k].back() = strides[k][d];
    } else {
      dims.push_back(shape[d]);
      for (size_t k = 0; k < spec.operands.size(); ++k) merged[k].push_back(strides[k][d]);
    }
  }
  if (dims.empty()) {  // a one-element result
    dims.push_back(1);
    for (auto& s : merged) s.push_back(0);
  }
  spec.dims = std::move(dims);
  spec.operand_strides = std::move(merged);
  return spec;
}

bool FusedKernelSpec::hasPerColumnResults() const {
  return std::any_of(per_column.begin(), per_column.end(), [](bool p) { return p; });
}

std::string fusedKernelKey(const OpContext& ctx) {
  std::string key = ctx.getString("body");
  for (const TensorType& t : ctx.operands) key += "|" + t.str();
  return key;
}

Expected<std::unique_ptr<llvm::Module>> buildFusedKernelModule(const FusedKernelSpec& spec, FusedTarget target,
                                                               const std::string& name, llvm::LLVMContext& context,
                                                               int interleave) {
  auto module = std::make_unique<llvm::Module>(name, context);
  if (target == FusedTarget::kHostCpu) CLEAVE_TRY(buildHostKernel(spec, name, *module, interleave));
  else CLEAVE_TRY(buildNvptxKernel(spec, name, *module));
  std::string problems;
  llvm::raw_string_ostream out(problems);
  if (llvm::verifyModule(*module, &out))
    return Status::internal("fused kernel " + name + ": invalid LLVM IR: " + out.str());
  return module;
}

void optimizeModule(llvm::Module& module, llvm::TargetMachine& machine) {
  llvm::LoopAnalysisManager loops;
  llvm::FunctionAnalysisManager functions;
  llvm::CGSCCAnalysisManager call_graph;
  llvm::ModuleAnalysisManager modules;
  llvm::PassBuilder builder(&machine);
  builder.registerModuleAnalyses(modules);
  builder.registerCGSCCAnalyses(call_graph);
  builder.registerFunctionAnalyses(functions);
  builder.registerLoopAnalyses(loops);
  builder.crossRegisterProxies(loops, functions, call_graph, modules);
  builder.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(module, modules);
}

}  // namespace cleave::runtime::codegen
