//===- Manifest.cpp - a kernel's launch parameters, for the runtime -------===//

#include "mk/Conversion/MkToEmitC/Manifest.h"

#include "mk/abi.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

namespace mlir::mk::to_emitc {

/// `{a, b, ...}` of `items`.
template <typename Range> static std::string braced(const Range &items) {
  return "{" + llvm::join(items, ", ") + "}";
}

FailureOr<std::string> kernelManifest(Location loc, const KernelLayout &layout) {
  std::string smem = "0";
  for (const std::string &need : layout.smemNeeds)
    smem = "mk::max_bytes(" + smem + ", " + need + ")";
  SmallVector<std::string> tensorBytes, argumentTypes, roles;
  for (int64_t bytes : layout.tensorBytes)
    tensorBytes.push_back(std::to_string(bytes) + "ull");
  for (const ArgumentType &argument : layout.argumentTypes) {
    // The elements that lower (bf16, f16, f32, i32) have names shorter than MK_ELEMENT_NAME_BYTES.
    std::string element;
    llvm::raw_string_ostream(element) << argument.element;
    SmallVector<std::string> extents =
        llvm::map_to_vector(argument.extents, [](int64_t e) { return std::to_string(e) + "ull"; });
    argumentTypes.push_back("{\"" + element + "\", " + std::to_string(extents.size()) + ", 0, " +
                            braced(extents) + "}");
  }
  for (auto [index, role] : llvm::enumerate(layout.split.roles))
    roles.push_back("{\"" + role.kind + "\", " + std::to_string(role.ctas) + ", " +
                    (layout.poolRole == index ? "MK_ROLE_POOL" : "0") + "}");
  if (layout.tensorMaps.size() > MK_MAX_TENSOR_MAPS)
    return emitError(loc) << "takes " << layout.tensorMaps.size()
                          << " TMA tensor maps, more than a kernel can (" << MK_MAX_TENSOR_MAPS
                          << ", MK_MAX_TENSOR_MAPS)";

  std::string fields;
  llvm::raw_string_ostream os(fields);
  auto field = [&](StringRef name, const Twine &value) {
    os << (fields.empty() ? "" : ",\n") << "    /* " << name << " */ " << value;
  };
  field("abi_version", "MK_ABI_VERSION");
  field("grid", Twine(layout.grid));
  field("dynamic_smem_bytes", smem);
  field("flag_words", Twine(layout.flagWords));
  field("arguments", Twine(layout.arguments));
  field("tensors", Twine(layout.tensorBytes.size()));
  field("symmetric_tensors", Twine(layout.symmetricTensors) + "u");
  field("roles", Twine(roles.size()));
  field("tensor_map_count", Twine(layout.tensorMaps.size()));
  field("engine_copy_count", Twine(layout.engineCopies.size()));
  field("routed_experts", Twine(layout.routedExperts));
  field("reserved", "0");
  field("tensor_bytes", braced(tensorBytes));
  field("argument_types", braced(argumentTypes));
  field("sm_split", braced(roles));
  field("tensor_maps", braced(layout.tensorMaps));

  std::string manifest;
  llvm::raw_string_ostream out(manifest);
  const std::string &name = layout.name;
  if (layout.engineCopies.empty()) {
    out << "extern \"C\" __device__ const mk_kernel_manifest " << name << "_manifest = {\n"
        << fields << "};\n";
  } else {
    // The copies follow the manifest in one global (mk/abi.h).
    out << "struct " << name << "_manifest_with_copies {\n  mk_kernel_manifest manifest;\n"
        << "  mk_engine_copy engine_copies[" << layout.engineCopies.size() << "];\n};\n"
        << "extern \"C\" __device__ const " << name << "_manifest_with_copies " << name
        << "_manifest = {{\n"
        << fields << "},\n    /* engine_copies */ " << braced(layout.engineCopies) << "};\n";
  }
  if (!layout.engineCopies.empty())
    out << "extern \"C\" __global__ void " << name
        << "_advance_epoch(mk_launch_count *launches) { mk::advance_epoch(launches); }";
  return manifest;
}

} // namespace mlir::mk::to_emitc
