//===- TensorMap.cpp - TMA tensor maps for generated kernels ---------------===//

#include "mk/runtime/driver/TensorMap.h"

#include <fmt/format.h>

#include <cstring>

namespace mkc {

mk_tensor_map encodeTensorMap(const cuda::Driver &driver, const mk_tensor_map_spec &spec,
                              const void *base) {
  static_assert(sizeof(CUtensorMap) == sizeof(mk_tensor_map), "mk_tensor_map is a CUtensorMap");
  auto describe = [&] {
    std::string dims, box;
    for (mk_u32 d = 0; d < spec.rank; ++d) {
      dims += fmt::format("{}{}", d ? "x" : "", spec.dims[d]);
      box += fmt::format("{}{}", d ? "x" : "", spec.box[d]);
    }
    return fmt::format("tensor {} ({}, element type {}, box {}, swizzle {})", spec.tensor, dims,
                       spec.element, box, spec.swizzle_bytes);
  };
  if (spec.rank < 1 || spec.rank > MK_MAP_MAX_RANK)
    throw cuda::Error(CUDA_ERROR_INVALID_VALUE,
                      fmt::format("a tensor map of rank {}: {}", spec.rank, describe()));
  // The exact type, not just the size: TMA reductions add as this type and fault on the others.
  CUtensorMapDataType type;
  cuuint64_t elementBytes;
  switch (spec.element) {
  case MK_MAP_ELEMENT_U8:
    type = CU_TENSOR_MAP_DATA_TYPE_UINT8, elementBytes = 1;
    break;
  case MK_MAP_ELEMENT_U16:
    type = CU_TENSOR_MAP_DATA_TYPE_UINT16, elementBytes = 2;
    break;
  case MK_MAP_ELEMENT_U32:
    type = CU_TENSOR_MAP_DATA_TYPE_UINT32, elementBytes = 4;
    break;
  case MK_MAP_ELEMENT_U64:
    type = CU_TENSOR_MAP_DATA_TYPE_UINT64, elementBytes = 8;
    break;
  case MK_MAP_ELEMENT_I32:
    type = CU_TENSOR_MAP_DATA_TYPE_INT32, elementBytes = 4;
    break;
  case MK_MAP_ELEMENT_F16:
    type = CU_TENSOR_MAP_DATA_TYPE_FLOAT16, elementBytes = 2;
    break;
  case MK_MAP_ELEMENT_BF16:
    type = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, elementBytes = 2;
    break;
  case MK_MAP_ELEMENT_F32:
    type = CU_TENSOR_MAP_DATA_TYPE_FLOAT32, elementBytes = 4;
    break;
  case MK_MAP_ELEMENT_F64:
    type = CU_TENSOR_MAP_DATA_TYPE_FLOAT64, elementBytes = 8;
    break;
  default:
    throw cuda::Error(CUDA_ERROR_INVALID_VALUE,
                      "a tensor map of " + describe() + ": no such element type");
  }
  CUtensorMapSwizzle swizzle;
  switch (spec.swizzle_bytes) {
  case 0:
    swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;
    break;
  case 32:
    swizzle = CU_TENSOR_MAP_SWIZZLE_32B;
    break;
  case 64:
    swizzle = CU_TENSOR_MAP_SWIZZLE_64B;
    break;
  case 128:
    swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
    break;
  default:
    throw cuda::Error(CUDA_ERROR_INVALID_VALUE,
                      "a tensor map of " + describe() + ": no such swizzle");
  }
  cuuint64_t dims[MK_MAP_MAX_RANK], strides[MK_MAP_MAX_RANK];
  cuuint32_t box[MK_MAP_MAX_RANK], elementStrides[MK_MAP_MAX_RANK];
  cuuint64_t stride = elementBytes;
  for (mk_u32 d = 0; d < spec.rank; ++d) {
    dims[d] = spec.dims[d];
    box[d] = spec.box[d];
    elementStrides[d] = 1;
    stride *= spec.dims[d];
    if (d + 1 < spec.rank)
      strides[d] = stride;
  }
  CUtensorMap map;
  CUresult result = driver.cuTensorMapEncodeTiled(
      &map, type, spec.rank, const_cast<void *>(base), dims, strides, box, elementStrides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  driver.check(result, ("cuTensorMapEncodeTiled for " + describe()).c_str());
  mk_tensor_map out;
  std::memcpy(&out, &map, sizeof out);
  return out;
}

} // namespace mkc
