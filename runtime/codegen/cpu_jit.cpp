// ORC LLJIT for fused kernels: one JIT per process, kernels cached by key, compiled at -O3 for the host.
#include "runtime/codegen/cpu_jit.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>

#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include "runtime/codegen/fused_kernel_ir.h"

namespace cleave::runtime::codegen {
namespace {

std::string llvmMessage(llvm::Error error) { return llvm::toString(std::move(error)); }

class HostJit {
 public:
  Expected<HostFusedKernel> kernel(const OpContext& ctx) {
    const std::string key = fusedKernelKey(ctx);
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    CLEAVE_TRY(start());
    CLEAVE_ASSIGN_OR_RETURN(FusedKernelSpec spec, fusedKernelSpec(ctx));
    const std::string name = "cleave_fused_" + std::to_string(cache_.size());
    auto context = std::make_unique<llvm::LLVMContext>();
    CLEAVE_ASSIGN_OR_RETURN(std::unique_ptr<llvm::Module> module,
                            buildFusedKernelModule(spec, FusedTarget::kHostCpu, name, *context, interleave_));
    module->setDataLayout(jit_->getDataLayout());
    module->setTargetTriple(machine_->getTargetTriple().str());
    for (llvm::Function& function : *module) {
      if (function.isDeclaration()) continue;
      function.addFnAttr("target-cpu", machine_->getTargetCPU());
      function.addFnAttr("target-features", machine_->getTargetFeatureString());
      // No red zone: with one, a signal handler that ran on the thread in the middle of a kernel
      // corrupted the heap (about 1 SIGTERM in 10 at a random point of a step; none without, in 40).
      function.addFnAttr(llvm::Attribute::NoRedZone);
      if (!vector_width_.empty()) function.addFnAttr("prefer-vector-width", vector_width_);
    }
    optimizeModule(*module, *machine_);
    if (std::getenv("CLEAVE_PRINT_FUSED_IR")) module->print(llvm::errs(), nullptr);
    if (llvm::Error error = jit_->addIRModule(llvm::orc::ThreadSafeModule(std::move(module), std::move(context))))
      return Status::internal("fused kernel: LLVM's JIT rejected the module: " + llvmMessage(std::move(error)));
    auto symbol = jit_->lookup(name);
    if (!symbol) return Status::internal("fused kernel: LLVM's JIT lost " + name + ": " + llvmMessage(symbol.takeError()));
    HostFusedKernel kernel{reinterpret_cast<FusedCpuFunction>(static_cast<uintptr_t>(symbol->getAddress())),
                           spec.along_last_axis ? spec.dims.back() : 0, spec.hasPerColumnResults() ? spec.dims.back() : 0,
                           spec.per_column, spec.total_summed_step >= 0, spec.numel};
    cache_.emplace(key, kernel);
    compiled_.fetch_add(1, std::memory_order_relaxed);
    return kernel;
  }

  int64_t compiled() const { return compiled_.load(std::memory_order_relaxed); }

 private:
  // Makes the JIT and the host's target machine at the first kernel.
  Status start() {
    if (jit_) return Status::ok();
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    auto host = llvm::orc::JITTargetMachineBuilder::detectHost();
    if (!host) return Status::internal("fused kernels: LLVM cannot describe this CPU: " + llvmMessage(host.takeError()));
    host->setCodeGenOptLevel(llvm::CodeGenOpt::Aggressive);
    auto machine = host->createTargetMachine();
    if (!machine) return Status::internal("fused kernels: no LLVM target for this CPU: " + llvmMessage(machine.takeError()));
    auto jit = llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(*host).create();
    if (!jit) return Status::internal("fused kernels: LLVM's JIT did not start: " + llvmMessage(jit.takeError()));
    // Symbols a kernel calls (powf) resolve to this process's libm.
    auto process = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess((*jit)->getDataLayout().getGlobalPrefix());
    if (!process) return Status::internal("fused kernels: " + llvmMessage(process.takeError()));
    (*jit)->getMainJITDylib().addGenerator(std::move(*process));
    // Transcendental bodies: 4 vector iterations side by side with AVX-512's 32 vector registers, 2
    // with 16 (an AVX2 host), where 4 would spill. Measured on a Zen 5 host (kernels_bench
    // --elementwise): bias+gelu 410 -> 325 us, gelu_grad 571 -> 398 us for 512x1024 at 1 thread.
    const std::string features = (*machine)->getTargetFeatureString().str();
    const bool avx512 = features.find("+avx512f") != std::string::npos;
    interleave_ = avx512 ? 4 : 2;
    // AVX-512 hosts: 512-bit vectors. LLVM's tuning for Intel's AVX-512 CPUs prefers 256 bits (the
    // older parts lowered their clock for 512-bit code), but OpenBLAS's sgemm kernels, which take
    // most of a step, already run with 512-bit vectors there. Measured on a Sapphire Rapids host
    // (kernels_bench --elementwise, 1 thread): bias+gelu [512,1024] 886 -> 628 us, layer_norm_grad
    // [512,256] 120 -> 90 us, attention's softmax 123 -> 103 us.
    if (avx512) vector_width_ = "512";
    machine_ = std::move(*machine);
    jit_ = std::move(*jit);
    return Status::ok();
  }

  std::mutex mutex_;
  std::unique_ptr<llvm::orc::LLJIT> jit_;
  std::unique_ptr<llvm::TargetMachine> machine_;
  std::unordered_map<std::string, HostFusedKernel> cache_;
  int interleave_ = 0;  // buildFusedKernelModule's, for this CPU
  std::string vector_width_;  // the functions' "prefer-vector-width", or "" for LLVM's choice
  std::atomic<int64_t> compiled_{0};
};

// One JIT for the process, never destroyed: kernels may run until exit.
HostJit& hostJit() {
  static HostJit* jit = new HostJit();
  return *jit;
}

}  // namespace

Expected<HostFusedKernel> hostFusedKernel(const OpContext& ctx) { return hostJit().kernel(ctx); }

int64_t hostFusedKernelsCompiled() { return hostJit().compiled(); }

}  // namespace cleave::runtime::codegen
