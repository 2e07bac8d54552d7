//===- bench/net/Options.h - the proxy benchmarks' command lines ----------===//
//
// Both take "--name N" pairs of whole numbers; each says which names and values it accepts.
//
//===----------------------------------------------------------------------===//

#ifndef MKC_BENCH_NET_OPTIONS_H
#define MKC_BENCH_NET_OPTIONS_H

#include "mk/Support/BoundedNumber.h"

#include <climits>
#include <cstdint>
#include <optional>
#include <string_view>

namespace mkc::bench {

/// Whether every argument is a "--name N" pair that `accept(name, N)` takes.
template <typename Accept> bool parseOptions(int argc, char **argv, Accept accept) {
  if (argc % 2 == 0)
    return false; // a name without its value
  for (int i = 1; i < argc; i += 2) {
    const std::optional<std::int64_t> value = parseBoundedInt(argv[i + 1], LONG_MIN, LONG_MAX);
    if (!value || !accept(std::string_view(argv[i]), static_cast<long>(*value)))
      return false;
  }
  return true;
}

} // namespace mkc::bench

#endif // MKC_BENCH_NET_OPTIONS_H
