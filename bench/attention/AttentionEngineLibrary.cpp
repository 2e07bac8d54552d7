//===- AttentionEngineLibrary.cpp - the attention engine's test kernels, for Python ----===//
//
// libmkc-attention-engine.so: the plain attention forward of
// test/device/kernels/attention_engine.cu on PyTorch's tensors, so that bench/attention_engine.py
// checks it against PyTorch and times it beside cuDNN and FlashAttention in one process. The
// kernels are compiled by NVRTC on the first call and loaded into the context current then
// (PyTorch's); each call launches one on the caller's stream, asynchronously.
//
//   int mkc_attention_engine_run(q, k, v, o, lse, dtype, B, H, Hkv, Sq, Skv, D, causal, scale,
//                                split, stream)
//
// q and o are [B, H, Sq, D], k and v [B, Hkv, Skv, D], dense, of dtype 0 (bf16) or 1 (f16); lse
// [B, H, Sq] f32. With split > 0 the keys are folded in as two sources, the first `split` blocks
// of 128 and the rest (as a ring's shards are). Returns 0, or -1 with the reason in
// mkc_attention_engine_error().
//
//===----------------------------------------------------------------------------------===//

#include "TestKernels.h"

#include "mk/abi.h"
#include "mk/runtime/driver/CudaDriver.h"
#include "mk/runtime/driver/TensorMap.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>

using mkc::cuda::Driver;

namespace {

#define CU(call) MK_CU_CHECK(Driver::get(), call)

std::string lastError;

/// The compiled kernels, loaded once into the context current at the first call.
class Kernels {
public:
  Kernels() {
    const mkc::nvrtc::Result result = mkc::test::compileKernels("attention_engine.cu");
    if (!result.ok)
      throw std::runtime_error("NVRTC failed on attention_engine.cu:\n" + result.log);
    CU(cuModuleLoadData(&module_, result.cubin.data()));
    CUdevice device;
    CU(cuCtxGetDevice(&device));
    CU(cuDeviceGetAttribute(&sms_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device));
    CU(cuDeviceGetAttribute(&l2Bytes_, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, device));
    CU(cuMemAlloc(&tileCounter_, sizeof(unsigned)));
    CU(cuMemsetD32(tileCounter_, 0, 1));
  }

  /// The kernel `name` and its dynamic shared memory, with the limit raised to it.
  CUfunction function(const std::string &name, int &smem) {
    auto [entry, inserted] = functions_.try_emplace(name);
    if (inserted) {
      CU(cuModuleGetFunction(&entry->second.first, module_, name.c_str()));
      CUdeviceptr address;
      size_t bytes;
      CU(cuModuleGetGlobal(&address, &bytes, module_, (name + "_smem").c_str()));
      CU(cuMemcpyDtoH(&entry->second.second, address, sizeof(int)));
      CU(cuFuncSetAttribute(entry->second.first, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                            entry->second.second));
    }
    smem = entry->second.second;
    return entry->second.first;
  }
  int sms() const { return sms_; }
  int l2Bytes() const { return l2Bytes_; }
  /// The causal kernels' tile counter; the calls of this process run one at a time on it.
  CUdeviceptr tileCounter() const { return tileCounter_; }

private:
  CUmodule module_ = nullptr;
  int sms_ = 0, l2Bytes_ = 0;
  CUdeviceptr tileCounter_ = 0;
  std::map<std::string, std::pair<CUfunction, int>> functions_;
};

/// A 3-D map over (D, rows, heads) of the tensor at `base`, boxes of 64 x `boxRows`.
mk_tensor_map map3d(const void *base, mk_u32 element, long long d, long long rows, long long heads,
                    unsigned boxRows) {
  mk_tensor_map_spec spec{};
  spec.element = element;
  spec.rank = 3;
  spec.dims[0] = d;
  spec.dims[1] = rows;
  spec.dims[2] = heads;
  spec.box[0] = 64;
  spec.box[1] = boxRows;
  spec.box[2] = 1;
  spec.swizzle_bytes = 128;
  return mkc::encodeTensorMap(Driver::get(), spec, base);
}

void run(const void *q, const void *k, const void *v, void *o, float *lse, int dtype, int B, int H,
         int Hkv, int Sq, int Skv, int D, int causal, float scale, int split, void *stream) {
  if (dtype != 0 && dtype != 1)
    throw std::invalid_argument("dtype " + std::to_string(dtype) + ": 0 (bf16) or 1 (f16)");
  if (D != 64 && D != 128)
    throw std::invalid_argument("head dim " + std::to_string(D) + ": 64 or 128");
  if (B < 1 || H < 1 || Hkv < 1 || H % Hkv != 0)
    throw std::invalid_argument("B, H, Hkv >= 1 and H a multiple of Hkv");
  if (Sq < 1 || Skv < 1)
    throw std::invalid_argument("sequence lengths >= 1");
  if (split < 0)
    throw std::invalid_argument("split " + std::to_string(split) + ": 0 (one source) or more");
  if (!(scale > 0.0f))
    throw std::invalid_argument("the softmax scale must be positive");
  static Kernels kernels;
  const std::string name = std::string("attention_") + (dtype == 0 ? "bf16" : "f16") + "_d" +
                           std::to_string(D) + (D == 128 ? "x2" : "x4") + (causal ? "_causal" : "");
  int smem = 0;
  CUfunction f = kernels.function(name, smem);
  const mk_u32 element = dtype == 0 ? MK_MAP_ELEMENT_BF16 : MK_MAP_ELEMENT_F16;
  const long long heads = static_cast<long long>(B) * H, kvHeads = static_cast<long long>(B) * Hkv;
  mk_tensor_map qMap = map3d(q, element, D, Sq, heads, 128),
                kMap = map3d(k, element, D, Skv, kvHeads, 128),
                vMap = map3d(v, element, D, Skv, kvHeads, 128),
                oMap = map3d(o, element, D, Sq, heads, 64);
  int headsTotal = static_cast<int>(heads);
  float scaleLog2 = scale * 1.4426950408889634f;
  const long long tiles = heads * ((Sq + 127) / 128);
  const unsigned grid = static_cast<unsigned>(std::min<long long>(tiles, kernels.sms()));
  // Causal tiles go by sections of heads whose keys and values fill half the L2 (with grouped
  // queries, H / Hkv query heads share a key head's).
  const long long kvHeadBytes = std::max(1LL, 2LL * Skv * D * 2 * Hkv / H);
  int sectionHeads =
      static_cast<int>(std::clamp<long long>(kernels.l2Bytes() / 2 / kvHeadBytes, 1, headsTotal));
  CUdeviceptr counter = kernels.tileCounter();
  void *params[] = {&qMap, &kMap, &vMap,      &oMap,    &lse,          &H,    &Hkv, &headsTotal,
                    &Sq,   &Skv,  &scaleLog2, &counter, &sectionHeads, &split};
  CU(cuLaunchKernel(f, grid, 1, 1, MK_CTA_THREADS, 1, 1, static_cast<unsigned>(smem),
                    static_cast<CUstream>(stream), params, nullptr));
}

} // namespace

extern "C" __attribute__((visibility("default"))) int
mkc_attention_engine_run(const void *q, const void *k, const void *v, void *o, float *lse,
                         int dtype, int B, int H, int Hkv, int Sq, int Skv, int D, int causal,
                         float scale, int split, void *stream) {
  try {
    run(q, k, v, o, lse, dtype, B, H, Hkv, Sq, Skv, D, causal, scale, split, stream);
    return 0;
  } catch (const std::exception &error) {
    lastError = error.what();
    return -1;
  }
}

extern "C" __attribute__((visibility("default"))) const char *mkc_attention_engine_error() {
  return lastError.c_str();
}
