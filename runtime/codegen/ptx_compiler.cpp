// NVPTX code generation: the fused kernel's module optimised at -O3 and printed as PTX.
#include "runtime/codegen/ptx_compiler.h"

#include <cstdlib>
#include <mutex>

#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Linker/Linker.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>
#include <llvm/Transforms/IPO/Internalize.h>

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

// libdevice, CUDA's math library as LLVM bitcode: $CLEAVE_LIBDEVICE, else the toolkit's copy.
std::string libdevicePath() {
  if (const char* path = std::getenv("CLEAVE_LIBDEVICE")) return path;
  return "/usr/local/cuda/nvvm/libdevice/libdevice.10.bc";
}

// Links the libdevice functions `module` calls into it (internalised, so -O3 inlines them).
Status linkLibdevice(llvm::Module& module) {
  const std::string path = libdevicePath();
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return Status::badInput("fused kernels: a GPU pow needs CUDA's libdevice, not found at " + path +
                            " (set CLEAVE_LIBDEVICE, or compile with --fusion off)");
  auto libdevice = llvm::parseBitcodeFile((*buffer)->getMemBufferRef(), module.getContext());
  if (!libdevice) return Status::internal("fused kernels: cannot read " + path + ": " + llvm::toString(libdevice.takeError()));
  (*libdevice)->setTargetTriple(module.getTargetTriple());
  (*libdevice)->setDataLayout(module.getDataLayout());
  if (llvm::Linker::linkModules(module, std::move(*libdevice), llvm::Linker::LinkOnlyNeeded,
                                [](llvm::Module& linked, const llvm::StringSet<>& names) {
                                  llvm::internalizeModule(linked, [&names](const llvm::GlobalValue& value) {
                                    return !names.count(value.getName());
                                  });
                                }))
    return Status::internal("fused kernels: linking libdevice from " + path + " failed");
  return Status::ok();
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
  if (module->getFunction(kLibdevicePow)) CLEAVE_TRY(linkLibdevice(*module));
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
