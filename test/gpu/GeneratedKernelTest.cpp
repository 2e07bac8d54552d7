// The kernels mkc generates load on a real driver: each tensor-parallel library program, compiled
// through the whole pipeline and NVRTC in this process, gives a module whose kernel and launch
// parameters (grid, flag words, dynamic shared memory, ABI version) the runtime can read, and the
// shared memory it asks for is granted. Launching them needs the runtime (symmetric memory, the
// proxy) and is tested there.
//
// Without a driver (the CI machine) it prints "SKIP: <why>" and exits 0; ctest reports Skipped.

#include "mk/Pipeline.h"
#include "mk/Target/DeviceHeaders.h"
#include "mk/Target/Nvrtc.h"
#include "mk/runtime/driver/CudaDriver.h"

#include "mk/abi.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Target/Cpp/CppEmitter.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

struct Case {
  const char *program;
  const char *topology;
};

/// Compiles lib/<program>.mlir for `topology` to a cubin; empty on failure (diagnostics printed).
std::string compile(const Case &c) {
  mlir::DialectRegistry registry;
  mlir::mk::registerPipelineDialects(registry);
  mlir::MLIRContext context(registry);
  // The library's place at build time, unless the build was carried elsewhere.
  const char *lib = std::getenv("MKC_LIB_DIR");
  std::string path = std::string(lib ? lib : MKC_LIB_DIR) + "/" + c.program + ".mlir";
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::parseSourceFile<mlir::ModuleOp>(path, &context);
  if (!module)
    return {};
  mlir::PassManager pm(&context);
  mlir::mk::PipelineOptions options;
  options.topology = c.topology;
  options.shapes = {"M=8192", "N=8192", "K=8192"};
  mlir::mk::buildSchedulePipeline(pm, options);
  mlir::mk::buildEmitCPipeline(pm, options);
  std::string source;
  llvm::raw_string_ostream os(source);
  if (mlir::failed(pm.run(*module)) || mlir::failed(mlir::mk::printCuda(*module, os)))
    return {};
  mkc::nvrtc::Result result =
      mkc::nvrtc::compile(source, std::string(c.program) + ".cu", {}, mkc::deviceHeaders());
  if (!result.ok)
    std::fprintf(stderr, "%s", result.log.c_str());
  return result.cubin;
}

/// The manifest (mk/abi.h) of kernel `name` in `module`, without its engine copies.
mk_kernel_manifest readManifest(const mkc::cuda::Driver &cu, CUmodule module,
                                const std::string &name) {
  std::string symbol = name + "_manifest";
  CUdeviceptr address;
  size_t bytes;
  cu.check(cu.cuModuleGetGlobal(&address, &bytes, module, symbol.c_str()), symbol.c_str());
  mk_kernel_manifest manifest{};
  if (bytes >= sizeof manifest)
    cu.check(cu.cuMemcpyDtoH(&manifest, address, sizeof manifest), "cuMemcpyDtoH");
  return manifest;
}

} // namespace

int main() {
  const mkc::cuda::Driver &cu = mkc::cuda::Driver::get();
  if (!cu.available()) {
    std::printf("SKIP: no usable CUDA driver: %s\n", cu.unavailableReason().c_str());
    return 0;
  }
  mkc::cuda::PrimaryContext context(cu);
  int optinSmem = 0, sms = 0;
  cu.check(cu.cuDeviceGetAttribute(
               &optinSmem, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, context.device()),
           "cuDeviceGetAttribute");
  cu.check(
      cu.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, context.device()),
      "cuDeviceGetAttribute");

  int failures = 0;
  for (const Case &c : {Case{"gemm_allreduce", "1x2"}, Case{"gemm_allreduce", "2x4"},
                        Case{"gemm_reducescatter", "2x4"}, Case{"allgather_gemm", "2x4"}}) {
    std::string cubin = compile(c);
    if (cubin.empty()) {
      std::printf("FAIL %s %s: did not compile\n", c.program, c.topology);
      ++failures;
      continue;
    }
    try {
      CUmodule module;
      cu.check(cu.cuModuleLoadData(&module, cubin.data()), "cuModuleLoadData");
      CUfunction kernel;
      cu.check(cu.cuModuleGetFunction(&kernel, module, c.program), "cuModuleGetFunction");
      mk_kernel_manifest manifest = readManifest(cu, module, c.program);
      int grid = static_cast<int>(manifest.grid);
      int flags = static_cast<int>(manifest.flag_words);
      int smem = static_cast<int>(manifest.dynamic_smem_bytes);
      int abi = static_cast<int>(manifest.abi_version);
      cu.check(cu.cuFuncSetAttribute(kernel, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem),
               "cuFuncSetAttribute");
      int registers = 0, localBytes = 0;
      cu.check(cu.cuFuncGetAttribute(&registers, CU_FUNC_ATTRIBUTE_NUM_REGS, kernel),
               "cuFuncGetAttribute");
      cu.check(cu.cuFuncGetAttribute(&localBytes, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, kernel),
               "cuFuncGetAttribute");
      // The roles take at most one CTA per SM (the compiler's grid may leave some out).
      bool ok = grid > 0 && grid <= sms && flags > 1 && smem > 0 && smem <= optinSmem &&
                abi == MK_ABI_VERSION && localBytes == 0;
      std::printf("%s %s %s: grid %d, %d flag words, %d bytes of shared memory (of %d), ABI %d, "
                  "%d registers, %d bytes local\n",
                  ok ? "PASS" : "FAIL", c.program, c.topology, grid, flags, smem, optinSmem, abi,
                  registers, localBytes);
      failures += !ok;
      cu.check(cu.cuModuleUnload(module), "cuModuleUnload");
    } catch (const mkc::cuda::Error &error) {
      std::printf("FAIL %s %s: %s\n", c.program, c.topology, error.what());
      ++failures;
    }
  }
  std::printf("%d failed\n", failures);
  return failures ? 1 : 0;
}
