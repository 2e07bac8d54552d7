// The JIT on a real driver: lib/gemm_allreduce.mlir compiled for 1x2 and loaded, its launch
// parameters read back from the module and its shared memory allowed; loaded once per context
// (again after the primary context is re-created); a second JIT on the same cache loads the
// same kernel without NVRTC.
//
// Without a driver (the CI machine) it prints "SKIP: <why>" and exits 0; ctest reports Skipped.

#include "mk/runtime/jit/Jit.h"

#include "mk/abi.h"

#include "../GpuChecks.h"

#include <stdlib.h>

#include <cstdio>
#include <optional>

namespace fs = std::filesystem;

using mkc::test::expect;
using mkc::test::failures;

namespace {

/// Whether `kernel` is usable in the current context, as its launch parameters say.
bool usable(const mkc::cuda::Driver &cu, const mkc::LoadedKernel &kernel) {
  int allowed = 0;
  return cu.cuFuncGetAttribute(&allowed, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                               kernel.function()) == CUDA_SUCCESS &&
         allowed == kernel.launch().dynamicSmemBytes;
}

} // namespace

int main() {
  const mkc::cuda::Driver *driver = mkc::test::driverOrSkip();
  if (!driver)
    return 0;
  const mkc::cuda::Driver &cu = *driver;
  std::string scratch = std::string(MKC_JIT_SCRATCH) + "/gpu-XXXXXX";
  fs::create_directories(MKC_JIT_SCRATCH);
  if (!::mkdtemp(scratch.data())) {
    std::perror("mkdtemp");
    return 1;
  }
  try {
    // The library's place at build time, unless the build was carried elsewhere.
    const char *lib = std::getenv("MKC_LIB_DIR");
    mkc::TileProgram program =
        mkc::TileProgram::fromFile(std::string(lib ? lib : MKC_LIB_DIR) + "/gemm_allreduce.mlir");
    mkc::JitOptions options;
    options.pipeline.topology = "1x2";
    options.pipeline.shapes = {"M=8192", "N=8192", "K=8192"};

    std::optional<mkc::cuda::PrimaryContext> context(std::in_place, cu);
    int optin = 0;
    cu.check(cu.cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                     context->device()),
             "cuDeviceGetAttribute");

    mkc::Jit jit(fs::path(scratch) / "cache");
    std::shared_ptr<const mkc::CompiledKernel> compiled = jit.compile(program, options);
    std::shared_ptr<const mkc::LoadedKernel> kernel = jit.load(*compiled);
    const mkc::LaunchParameters &launch = kernel->launch();
    std::printf("gemm_allreduce 1x2: grid %d (%s), %d flag words, %d bytes of shared memory "
                "(of %d)\n",
                launch.grid, launch.smSplit.str().c_str(), launch.flagWords,
                launch.dynamicSmemBytes, optin);
    // 2048 tiles take 16 rounds on the 132 SMs compiled for, and on 128 CTAs.
    expect(launch.grid == 128, "grid is the fewest CTAs that take the tiles in as many rounds");
    expect(launch.smSplit.str() == "compute=128",
           "the split is the all-reduce in place's, read back");
    expect(launch.flagWords > 1, "flag words");
    expect(launch.dynamicSmemBytes > 0 && launch.dynamicSmemBytes <= optin,
           "shared memory within the device's opt-in limit");
    expect(kernel->function() != nullptr && usable(cu, *kernel),
           "the kernel's dynamic shared memory is allowed");
    expect(kernel->context() == context->context(), "loaded into the current context");
    expect(jit.load(*compiled) == kernel && jit.stats().modulesLoaded == 1,
           "loaded once per context");

    mkc::Jit warm(fs::path(scratch) / "cache");
    std::shared_ptr<const mkc::LoadedKernel> again = warm.load(*warm.compile(program, options));
    expect(warm.stats().nvrtcCompiles == 0 && warm.stats().diskHits == 1,
           "a second JIT on the same cache does not run NVRTC");
    expect(again->launch().grid == launch.grid &&
               again->launch().dynamicSmemBytes == launch.dynamicSmemBytes && usable(cu, *again),
           "and loads the same kernel");
    again.reset();

    // Released to zero references, the primary context is destroyed with its modules; the one
    // retained next is a new context, which must get its own module.
    kernel.reset();
    context.reset();
    context.emplace(cu);
    std::shared_ptr<const mkc::LoadedKernel> reloaded = jit.load(*compiled);
    expect(jit.stats().modulesLoaded == 2 && usable(cu, *reloaded),
           "a re-created primary context gets its own module");
  } catch (const std::exception &error) {
    std::printf("FAIL %s\n", error.what());
    ++failures;
  }
  fs::remove_all(scratch);
  std::printf("%d failed\n", failures);
  return failures ? 1 : 0;
}
