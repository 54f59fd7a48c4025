// NVPTX code generation: the fused kernel's module optimised at -O3 and printed as PTX.
#include "runtime/codegen/ptx_compiler.h"

#include <mutex>

#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>

#include "runtime/codegen/fused_kernel_ir.h"

extern "C" {
void LLVMInitializeNVPTXTargetInfo();
void LLVMInitializeNVPTXTarget();
void LLVMInitializeNVPTXTargetMC();
void LLVMInitializeNVPTXAsmPrinter();
}

namespace cleave::runtime::codegen {
namespace {

constexpr const char* kTriple = "nvptx64-nvidia-cuda";

void initializeNvptx() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
}

}  // namespace

Expected<std::string> fusedKernelPtx(const OpContext& ctx, const std::string& kernel_name) {
  initializeNvptx();
  std::string error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(kTriple, error);
  if (!target) return Status::internal("fused kernels: this LLVM has no NVPTX backend: " + error);
  std::unique_ptr<llvm::TargetMachine> machine(target->createTargetMachine(
      kTriple, kFusedPtxArchitecture, "+ptx75", llvm::TargetOptions(), llvm::None, llvm::None, llvm::CodeGenOpt::Aggressive));
  if (!machine) return Status::internal("fused kernels: LLVM could not make an NVPTX target machine");

  CLEAVE_ASSIGN_OR_RETURN(FusedKernelSpec spec, fusedKernelSpec(ctx));
  llvm::LLVMContext context;
  CLEAVE_ASSIGN_OR_RETURN(std::unique_ptr<llvm::Module> module,
                          buildFusedKernelModule(spec, FusedTarget::kNvptx, kernel_name, context));
  module->setTargetTriple(kTriple);
  module->setDataLayout(machine->createDataLayout());
  optimizeModule(*module, *machine);
  llvm::SmallString<0> ptx;
  llvm::raw_svector_ostream out(ptx);
  llvm::legacy::PassManager emit;
  if (machine->addPassesToEmitFile(emit, out, nullptr, llvm::CGFT_AssemblyFile))
    return Status::internal("fused kernels: LLVM's NVPTX backend cannot emit PTX");
  emit.run(*module);
  return std::string(ptx.str());
}

}  // namespace cleave::runtime::codegen
