//===- Transport.cpp - network backends by name ---------------------------------===//

#include "mk/runtime/net/Transport.h"

namespace mkc::net {

std::unique_ptr<Transport> makeTransport(const std::string &name, const TransportConfig &config,
                                         const GpuPlace *gpu) {
  if (name == "fabric")
    return makeFabricTransport(config);
  if (name == "verbs")
    return makeVerbsTransport(config);
  if (name == "emulated") {
    if (!gpu)
      throw NetworkError("emulated: the emulated NIC moves data between GPUs and needs one");
    return makeEmulatedTransport(config, *gpu);
  }
  throw NetworkError("network backend \"" + name +
                     "\" does not exist: use fabric, verbs or emulated");
}

} // namespace mkc::net
