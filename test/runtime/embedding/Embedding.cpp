// An application embedding the runtime: it includes the public headers only, and is compiled by
// the embedding-without-mlir test with no MLIR or LLVM include path, so that a public header that
// pulls in MLIR again fails here.

#include "mk/runtime/Runtime.h"
#include "mkc.h"

int main() {
  mkc::RuntimeOptions options = mkc::RuntimeOptions::fromEnvironment(mkc::processEnvironment());
  mkc_runtime_options c;
  return mkc_runtime_options_default(&c) == MKC_SUCCESS && options.symmetricBytes ? 0 : 1;
}
