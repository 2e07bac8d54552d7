// Compiles a tile program through the JIT as a separate process would, with the cache in
// $MKC_CACHE_DIR, and prints what it did on one line for the tests that run it:
//
//   mk-jit-compile PROGRAM.mlir TOPOLOGY SHAPES
//   result: key=<hex> cubin-sha256=<hex> nvrtc=<n> disk=<n> memory=<n> corrupt=<n>
//
// Exits 1 with the JIT's error when the program does not compile.

#include "mk/runtime/jit/Jit.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/SHA256.h"

#include <cstdio>

int main(int argc, char **argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s PROGRAM.mlir TOPOLOGY SHAPES\n", argv[0]);
    return 2;
  }
  mkc::JitOptions options;
  options.pipeline.topology = argv[2];
  llvm::SmallVector<llvm::StringRef> shapes;
  llvm::StringRef(argv[3]).split(shapes, ',');
  for (llvm::StringRef shape : shapes)
    options.pipeline.shapes.push_back(shape.str());
  try {
    mkc::Jit jit;
    std::shared_ptr<const mkc::CompiledKernel> kernel =
        jit.compile(mkc::TileProgram::fromFile(argv[1]), options);
    mkc::JitStats stats = jit.stats();
    std::printf("result: key=%s cubin-sha256=%s nvrtc=%llu disk=%llu memory=%llu corrupt=%llu\n",
                kernel->source.key.c_str(),
                llvm::toHex(llvm::SHA256::hash(llvm::arrayRefFromStringRef(kernel->cubin)),
                            /*LowerCase=*/true)
                    .c_str(),
                static_cast<unsigned long long>(stats.nvrtcCompiles),
                static_cast<unsigned long long>(stats.diskHits),
                static_cast<unsigned long long>(stats.memoryHits),
                static_cast<unsigned long long>(stats.corruptEntries));
    return 0;
  } catch (const std::exception &error) {
    std::fprintf(stderr, "mk-jit-compile: %s\n", error.what());
    return 1;
  }
}
