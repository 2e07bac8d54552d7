// The device library compiled by NVRTC for sm_90a, without a GPU: every API function is
// instantiated by the test kernels (kernels/*.cu), which must compile with no spills and no
// stack frame under __launch_bounds__(MK_CTA_THREADS, 1). The same kernels run in DeviceGpuTest.

#include "TestKernels.h"

#include "mk/Target/DeviceHeaders.h"
#include "mk/Target/Nvrtc.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

using namespace mkc;

namespace {

/// Compiles `file`, requires each of `kernels` in the ptxas report with 0 spill bytes and 0 stack
/// frame, prints their register counts, and returns the result.
nvrtc::Result requireClean(const char *file, const std::vector<std::string> &kernels) {
  nvrtc::Result result = test::compileKernels(file);
  INFO(result.log);
  REQUIRE(result.ok);
  CHECK(result.log.find("warning") == std::string::npos);
  for (const std::string &name : kernels) {
    INFO("kernel " << name);
    auto found = std::find_if(result.kernels.begin(), result.kernels.end(),
                              [&](const nvrtc::KernelResources &k) { return k.name == name; });
    REQUIRE(found != result.kernels.end());
    std::cout << file << ": " << name << ": " << found->registers << " registers\n";
    CHECK(found->registers <= 255);
    CHECK(found->spillStoreBytes == 0);
    CHECK(found->spillLoadBytes == 0);
    CHECK(found->stackFrameBytes == 0);
  }
  CHECK(result.kernels.size() == kernels.size());
  return result;
}

bool contains(const std::string &text, const char *what) {
  return text.find(what) != std::string::npos;
}

} // namespace

TEST_CASE("matmul compiles without spills: 128x256x64, 128x128x64, 64x64x64, bf16 and f16, "
          "every operand layout",
          "[device][gemm]") {
  nvrtc::Result result =
      requireClean("matmul.cu", {"matmul_bf16_128x256x64_nn", "matmul_bf16_128x256x64_nt",
                                 "matmul_bf16_128x256x64_tn", "matmul_bf16_128x256x64_tt",
                                 "matmul_bf16_128x128x64_nn", "matmul_bf16_128x128x64_tt",
                                 "matmul_bf16_64x64x64_nt", "matmul_bf16_64x64x64_tn",
                                 "matmul_f16_128x256x64_nn", "matmul_f16_64x64x64_tt"});
  CHECK(contains(result.ptx, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"));
  CHECK(contains(result.ptx, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"));
  CHECK(contains(result.ptx, "ldmatrix.sync.aligned.m8n8.x4.shared.b16"));
  CHECK(contains(result.ptx, "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"));
  CHECK(contains(result.ptx, "cp.async.cg.shared.global"));
}

TEST_CASE("tile functions compile without spills: splat, convert, arithmetic, activations, load, "
          "store, accumulate",
          "[device][tile]") {
  nvrtc::Result result = requireClean(
      "tile.cu", {"tile_ops_f32", "tile_ops_bf16", "tile_ops_f16", "tile_convert",
                  "accumulate_sum_bf16", "accumulate_max_bf16", "accumulate_min_bf16",
                  "accumulate_sum_f32", "accumulate_sum_f16", "accumulate_sum_bf16_128x256",
                  "accumulate_max_f32_128x256", "accumulate_chunks_sum_bf16_128x256"});
  CHECK(contains(result.ptx, "st.global.v4"));
}

TEST_CASE("rank-1 tiles, reductions, broadcasts, attention steps and routing compile without "
          "spills",
          "[device][vector]") {
  requireClean("vector.cu",
               {"vector_ops_f32", "vector_ops_bf16", "vector_ops_f32_128x256",
                "attention_block_bf16", "route_census_64", "route_counts_64", "route_rows_bf16",
                "route_pack_bf16", "return_rows_bf16", "combine_returned_bf16"});
}

TEST_CASE("communication functions compile without spills: copy_region(_bulk), signal, wait, "
          "proxy_push",
          "[device][comm]") {
  nvrtc::Result result = requireClean(
      "comm.cu", {"copy_region_bf16", "copy_region_bulk_bf16", "copy_region_f32",
                  "copy_region_bulk_f32", "signal_wait", "proxy_push", "proxy_enqueue_latency",
                  "proxy_enqueue_rate", "clock_probe", "tma_reduce_sum_bf16", "hold_sms"});
  CHECK(contains(result.ptx, "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"));
  CHECK(contains(result.ptx, "cp.async.bulk.global.shared::cta.bulk_group"));
  CHECK(contains(result.ptx, "red.release.sys.global.add.u32"));
  CHECK(contains(result.ptx, "ld.acquire.sys.global.u32"));
  CHECK(contains(result.ptx, "st.release.sys.u64"));
}

TEST_CASE("the fused-op tests' references compile without spills", "[device]") {
  requireClean("reference.cu", {"fill_bf16", "gemm_f32", "sum_squares", "compare_bf16"});
}

TEST_CASE("each public device header compiles on its own", "[device]") {
  for (const char *header : {"mk/device.cuh", "mk/device/tile.cuh", "mk/device/vector.cuh",
                             "mk/device/attention.cuh", "mk/device/attention_engine.cuh",
                             "mk/device/routing.cuh", "mk/device/gemm.cuh", "mk/device/comm.cuh"}) {
    INFO(header);
    std::string source = std::string("#include \"") + header + "\"\n" +
                         "extern \"C\" __global__ void k(float *p) { *p = 1; }\n";
    nvrtc::Result result = nvrtc::compile(source, "k.cu", nvrtc::Options{}, deviceHeaders());
    INFO(result.log);
    CHECK(result.ok);
  }
}

TEST_CASE("the device headers include no host or CCCL header", "[device]") {
  for (const nvrtc::Header &header : deviceHeaders()) {
    std::string_view text = header.contents;
    for (size_t at = text.find("#include <"); at != std::string_view::npos;
         at = text.find("#include <", at + 1)) {
      std::string_view included = text.substr(at, text.find('\n', at) - at);
      INFO(header.name << ": " << included);
      CHECK((included == "#include <cuda_bf16.h>" || included == "#include <cuda_fp16.h>"));
    }
  }
}

TEST_CASE("the GEMM engine compiles to HGMMA fed by TMA, without spills or local memory",
          "[device][gemm_engine]") {
  nvrtc::Result result = requireClean(
      "gemm_engine.cu",
      {"gemm_bf16_256x4_kn", "gemm_bf16_256x3_kn", "gemm_bf16_256x3e4_kn", "gemm_bf16_256x4_nk",
       "gemm_bf16_128x6_kn", "gemm_f16_64x8_kn", "gemm_bf16_256x4_kn_c2", "gemm_bf16_256x3e4_kn_c2",
       "gemm_bf16_256x4_nk_c2", "gemm_bf16_128x6_kn_c2", "gemm_bf16_256x3e4_kn_c2_twin",
       "gemm_bf16_256x4_kn_c2_twin", "gemm_bf16_256x3e4_kn_c2_twin_tma",
       "gemm_bf16_256x4_kn_c2_twin_tma", "transpose_16"});
  CHECK(contains(result.ptx, "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16"));
  CHECK(contains(result.ptx, "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16"));
  CHECK(contains(result.ptx, "cp.async.bulk.tensor.2d.shared::cluster.global"));
  CHECK(contains(result.ptx, "cp.async.bulk.tensor.2d.global.shared::cta"));
  // Clustered: B's panel multicast, stages released in both CTAs.
  CHECK(contains(result.ptx, ".multicast::cluster"));
  CHECK(contains(result.ptx, "mbarrier.arrive.shared::cluster.b64"));
  CHECK(contains(result.ptx, "setmaxnreg.inc.sync.aligned.u32 232"));
  CHECK(!contains(result.ptx, "ld.local"));
  CHECK(!contains(result.ptx, "st.local"));
}

TEST_CASE("the attention engine compiles to HGMMA fed by TMA, P from registers, without spills",
          "[device][attention_engine]") {
  nvrtc::Result result =
      requireClean("attention_engine.cu", {"attention_bf16_d128x2", "attention_bf16_d128x2_causal",
                                           "attention_bf16_d64x4", "attention_bf16_d64x4_causal",
                                           "attention_f16_d128x2", "attention_f16_d128x2_causal",
                                           "attention_f16_d64x4", "attention_f16_d64x4_causal"});
  // S = Q K^T from shared memory; O += P V with P in registers ({...} as A), V MN-major.
  CHECK(contains(result.ptx, "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16"));
  CHECK(contains(result.ptx, "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16"));
  CHECK(contains(result.ptx, "cp.async.bulk.tensor.3d.shared::cluster.global"));
  CHECK(contains(result.ptx, "cp.async.bulk.tensor.3d.global.shared::cta"));
  CHECK(contains(result.ptx, "ex2.approx.ftz.f32"));
  CHECK(contains(result.ptx, "bar.arrive"));
  CHECK(contains(result.ptx, "setmaxnreg.inc.sync.aligned.u32 232"));
  CHECK(!contains(result.ptx, "ld.local"));
  CHECK(!contains(result.ptx, "st.local"));
}
