//===- KernelLayout.cpp - the tensor maps and engines a kernel takes ------===//

#include "mk/Conversion/MkToEmitC/KernelLayout.h"
#include "mk/Conversion/MkToEmitC/TypeConverter.h"

#include "llvm/Support/raw_ostream.h"

namespace mlir::mk::to_emitc {

/// A tensor map's element type (mk/abi.h): exact for what TMA reductions add, else by size.
static StringRef mapElement(Type element) {
  unsigned bits = element.getIntOrFloatBitWidth();
  if (element.isBF16())
    return "MK_MAP_ELEMENT_BF16";
  if (isa<FloatType>(element) && bits >= 16)
    return bits == 16   ? "MK_MAP_ELEMENT_F16"
           : bits == 32 ? "MK_MAP_ELEMENT_F32"
                        : "MK_MAP_ELEMENT_F64";
  if (element.isInteger(32))
    return "MK_MAP_ELEMENT_I32";
  return bits == 8    ? "MK_MAP_ELEMENT_U8"
         : bits == 16 ? "MK_MAP_ELEMENT_U16"
         : bits == 32 ? "MK_MAP_ELEMENT_U32"
                      : "MK_MAP_ELEMENT_U64";
}

std::string gemmConfigArguments(GemmEngineAttr engine) {
  std::string element = elementName(engine.getElement());
  std::string bn = std::to_string(engine.getTileN());
  std::string buffers = std::to_string(engine.getStagingBuffers());
  std::string aRows = std::to_string(engine.getARows());
  std::string depth = engine.getStages() > 0 ? std::to_string(engine.getStages())
                                             : "mk::gemm_max_stages<" + element + ", " + bn + ", " +
                                                   buffers + ", " + aRows + ">()";
  return element + ", " + bn + ", " + depth + ", " +
         (engine.getBKMajor().getValue() ? "true" : "false") + ", " + buffers + ", " +
         std::to_string(engine.getCluster()) + ", " + aRows;
}

int64_t KernelLayout::tensorMap(DistTensorType type, int64_t index, std::optional<int64_t> gpu,
                                ArrayRef<int64_t> box) {
  SmallVector<int64_t> extents;
  for (int64_t d = type.getRank() - 1; d >= 0; --d)
    extents.push_back(type.getLocalExtent(d, mesh));
  return tensorMap(index, gpu, type.getElementType(), extents, box);
}

int64_t KernelLayout::tensorMap(int64_t index, std::optional<int64_t> gpu, Type element,
                                ArrayRef<int64_t> extents, ArrayRef<int64_t> box) {
  std::string spec;
  llvm::raw_string_ostream os(spec);
  os << "{" << index << ", " << (gpu ? std::to_string(*gpu) : "MK_MAP_LOCAL") << ", "
     << mapElement(element) << ", " << extents.size() << ", {";
  llvm::interleaveComma(extents, os, [&](int64_t extent) { os << extent << "ull"; });
  os << "}, {";
  llvm::interleaveComma(box, os);
  os << "}, 128}";
  auto found = llvm::find(tensorMaps, spec);
  if (found != tensorMaps.end())
    return found - tensorMaps.begin();
  tensorMaps.push_back(spec);
  return tensorMaps.size() - 1;
}

int64_t KernelLayout::tensorMapsOfNode(DistTensorType type, int64_t index, ArrayRef<int64_t> box) {
  int64_t gpus = mesh.getGpus(), first = tensorMap(type, index, 0, box);
  for (int64_t g = 1; g < gpus; ++g)
    if (tensorMap(type, index, g, box) != first + g) {
      // Not a run yet (some map was listed alone before): list them all again, together.
      SmallVector<std::string> run;
      for (int64_t h = 0; h < gpus; ++h)
        run.push_back(tensorMaps[tensorMap(type, index, h, box)]);
      first = tensorMaps.size();
      tensorMaps.insert(tensorMaps.end(), run.begin(), run.end());
      break;
    }
  return first;
}

} // namespace mlir::mk::to_emitc
