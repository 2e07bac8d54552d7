# Debian builds LLVM with LLVM_LINK_LLVM_DYLIB=ON: its static libMLIR*.a targets still name the shared
# libLLVM.so (target `LLVM`) and some name libMLIR.so (target `MLIR`) in their link interface. Rewrite
# those interfaces to the static LLVM archives, so that tools need only libc/libm at run time.
# See ../shared/research/toolchain.md §2.3.

set(MKC_LLVM_COMPONENTS "Support;Demangle;Remarks;Core;BinaryFormat;TargetParser;BitReader;BitWriter;AsmParser"
    CACHE STRING "LLVM components linked statically into the tools")
llvm_map_components_to_libnames(MKC_LLVM_STATIC_LIBS ${MKC_LLVM_COMPONENTS})

foreach(target ${MLIR_EXPORTED_TARGETS})
  if(NOT TARGET ${target})
    continue()
  endif()
  get_target_property(type ${target} TYPE)
  if(NOT type STREQUAL "STATIC_LIBRARY")
    continue()
  endif()
  get_target_property(interface ${target} INTERFACE_LINK_LIBRARIES)
  if(interface)
    list(REMOVE_ITEM interface MLIR)
    list(TRANSFORM interface REPLACE "^LLVM$" "${MKC_LLVM_STATIC_LIBS}")
    list(TRANSFORM interface REPLACE "^\\$<LINK_ONLY:LLVM>$" "${MKC_LLVM_STATIC_LIBS}")
    set_target_properties(${target} PROPERTIES INTERFACE_LINK_LIBRARIES "${interface}")
  endif()
endforeach()

# LLVMSupport names the shared libz3, zlib and zstd; link the static zlib/zstd and no z3.
get_target_property(interface LLVMSupport INTERFACE_LINK_LIBRARIES)
list(FILTER interface EXCLUDE REGEX "libz3|zstd::|ZLIB::")
list(APPEND interface /usr/lib/x86_64-linux-gnu/libzstd.a /usr/lib/x86_64-linux-gnu/libz.a)
set_target_properties(LLVMSupport PROPERTIES INTERFACE_LINK_LIBRARIES "${interface}")

# LLVMExtensions references libPolly.a, which Debian does not ship.
if(TARGET LLVMExtensions)
  set_target_properties(LLVMExtensions PROPERTIES INTERFACE_LINK_LIBRARIES "LLVMSupport")
endif()

# Every executable of the project: no libstdc++/libgcc_s at run time. Not under the sanitizers,
# whose runtime must see libstdc++'s allocations.
if(MKC_SANITIZERS)
  set(MKC_STATIC_RUNTIME_FLAGS -Wl,--as-needed)
else()
  set(MKC_STATIC_RUNTIME_FLAGS -static-libstdc++ -static-libgcc -Wl,--as-needed)
endif()
