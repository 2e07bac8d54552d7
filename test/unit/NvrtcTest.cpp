// NVRTC without a GPU, through its child processes: compiling with the embedded device headers, the
// ptxas report, and diagnostics that point at the generated source.

#include "mk/Target/Nvrtc.h"
#include "mk/Target/DeviceHeaders.h"

#include <catch2/catch.hpp>

using namespace mkc;

TEST_CASE("NVRTC compiles a kernel against the embedded ABI header to an sm_90a cubin", "[nvrtc]") {
  const char *source = R"(
#include "mk/abi.h"
extern "C" __global__ void __launch_bounds__(MK_CTA_THREADS, 1) probe(const mk_kernel_args args) {
  if (threadIdx.x == 0) args.flags[blockIdx.x] = args.launches->epoch;
}
)";
  nvrtc::Result result = nvrtc::compile(source, "probe.cu", nvrtc::Options{}, deviceHeaders());
  INFO(result.log);
  REQUIRE(result.ok);
  CHECK(result.cubin.size() > 0);
  CHECK(result.cubin.compare(0, 4,
                             "\x7f"
                             "ELF") == 0);
  CHECK(result.ptx.find(".target sm_90a") != std::string::npos);
  REQUIRE(result.kernels.size() == 1);
  CHECK(result.kernels[0].name == "probe");
  CHECK(result.kernels[0].registers > 0);
  CHECK(result.kernels[0].spillStoreBytes == 0);
}

TEST_CASE("a compute_ target gives PTX and no cubin", "[nvrtc]") {
  nvrtc::Options options;
  options.arch = "compute_90a";
  nvrtc::Result result =
      nvrtc::compile("extern \"C\" __global__ void k(int *p) { *p = 1; }", "k.cu", options);
  INFO(result.log);
  REQUIRE(result.ok);
  CHECK(result.cubin.empty());
  CHECK(result.ptx.find(".visible .entry k") != std::string::npos);
}

TEST_CASE("NVRTC errors show the generated line they point at", "[nvrtc]") {
  nvrtc::Result result = nvrtc::compile("__global__ void k() {\n  undeclared_name = 1;\n}\n",
                                        "generated.cu", nvrtc::Options{});
  CHECK_FALSE(result.ok);
  CHECK(result.log.find("generated.cu(2): error") != std::string::npos);
  CHECK(result.log.find("    2 |   undeclared_name = 1;") != std::string::npos);
}

TEST_CASE("the ptxas report is parsed per kernel", "[nvrtc]") {
  const char *log = "ptxas info    : 0 bytes gmem\n"
                    "ptxas info    : Compiling entry function 'a' for 'sm_90a'\n"
                    "ptxas info    : Function properties for a\n"
                    "    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n"
                    "ptxas info    : Used 168 registers, used 1 barriers, 380 bytes cmem[0]\n"
                    "ptxas info    : Compiling entry function 'b' for 'sm_90a'\n"
                    "ptxas info    : Used 12 registers\n";
  auto kernels = nvrtc::parsePtxasReport(log);
  REQUIRE(kernels.size() == 2);
  CHECK(kernels[0].name == "a");
  CHECK(kernels[0].registers == 168);
  CHECK(kernels[0].stackFrameBytes == 16);
  CHECK(kernels[0].spillStoreBytes == 8);
  CHECK(kernels[0].spillLoadBytes == 4);
  CHECK(kernels[1].registers == 12);
  CHECK(kernels[1].spillStoreBytes == 0);
}

TEST_CASE("NVRTC reports its version", "[nvrtc]") { CHECK(nvrtc::version().starts_with("13.")); }
