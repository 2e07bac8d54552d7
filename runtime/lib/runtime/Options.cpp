//===- runtime/Options.cpp - RuntimeOptions from the environment ---===//
//
// MKC_SYMMETRIC_BYTES and MKC_FLAG_WORDS (counts with K, M or G), MKC_NET and its MKC_NET_*
// settings, MKC_NET_TIMEOUT and MKC_WAIT_TIMEOUT (seconds), MKC_DEVICE, MKC_SHARE_GPU,
// MKC_SM_CONTROLLER and MKC_NVRTC_OPTIONS.
//
//===----------------------------------------------------------------------===//

#include "runtime/RuntimeState.h"

#include "mk/Support/BoundedNumber.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string_view>

namespace mkc {

namespace {

std::size_t parseSize(const std::string &variable, const std::string &text) {
  const std::string_view digits(text.data(),
                                std::min(text.find_first_not_of("0123456789"), text.size()));
  const std::string_view suffix = std::string_view(text).substr(digits.size());
  int shift = suffix.empty()  ? 0
              : suffix == "K" ? 10
              : suffix == "M" ? 20
              : suffix == "G" ? 30
                              : -1;
  const std::optional<std::int64_t> value =
      shift < 0 ? std::nullopt : parseBoundedInt(digits, 1, INT64_MAX >> shift);
  if (!value)
    throw RuntimeError(fmt::format("{}={} is not a positive count (digits, optionally followed by "
                                   "K, M or G)",
                                   variable, text));
  return static_cast<std::size_t>(*value) << shift;
}

} // namespace

RuntimeOptions RuntimeOptions::fromEnvironment(const Environment &environment) {
  RuntimeOptions options;
  auto variable = [&](const char *name) -> const std::string * {
    auto found = environment.find(name);
    return found == environment.end() ? nullptr : &found->second;
  };
  if (const std::string *value = variable("MKC_SYMMETRIC_BYTES"))
    options.symmetricBytes = parseSize("MKC_SYMMETRIC_BYTES", *value);
  if (const std::string *value = variable("MKC_FLAG_WORDS"))
    options.flagWords = parseSize("MKC_FLAG_WORDS", *value);
  if (const std::string *value = variable("MKC_NET"))
    options.network = *value;
  for (auto [name, timeout] : {std::pair{"MKC_NET_TIMEOUT", &options.networkTimeout},
                               std::pair{"MKC_WAIT_TIMEOUT", &options.waitTimeout}})
    if (const std::string *value = variable(name)) {
      const std::optional<std::int64_t> seconds = parseBoundedInt(*value, 1, INT_MAX);
      if (!seconds)
        throw RuntimeError(fmt::format("{}={} is not a positive number of seconds", name, *value));
      *timeout = std::chrono::seconds(*seconds);
    }
  for (auto [name, key] :
       {std::pair{"MKC_NET_PROVIDER", "provider"}, std::pair{"MKC_NET_ADDRESS", "address"},
        std::pair{"MKC_NET_DEVICE", "device"},
        std::pair{"MKC_NET_BANDWIDTH_GBPS", "bandwidth_gbps"},
        std::pair{"MKC_NET_LATENCY_US", "latency_us"}, std::pair{"MKC_NET_REORDER", "reorder"},
        std::pair{"MKC_NET_COPY_STREAMS", "copy_streams"}})
    if (const std::string *value = variable(name))
      options.networkConfig[key] = *value;
  if (const std::string *value = variable("MKC_NVRTC_OPTIONS"))
    for (std::size_t at = value->find_first_not_of(' '); at != std::string::npos;
         at = value->find_first_not_of(' ', at)) {
      const std::size_t end = std::min(value->find(' ', at), value->size());
      options.nvrtcOptions.push_back(value->substr(at, end - at));
      at = end;
    }
  if (const std::string *value = variable("MKC_DEVICE")) {
    const std::optional<std::int64_t> device = parseBoundedInt(*value, 0, INT_MAX);
    if (!device)
      throw RuntimeError("MKC_DEVICE=" + *value + " is not a device ordinal");
    options.device = static_cast<int>(*device);
  }
  if (const std::string *value = variable("MKC_SHARE_GPU")) {
    if (*value != "0" && *value != "1")
      throw RuntimeError("MKC_SHARE_GPU=" + *value + " is not 0 or 1");
    options.shareGpu = *value == "1";
  }
  if (const std::string *value = variable("MKC_SM_CONTROLLER")) {
    if (*value != "on" && *value != "off")
      throw RuntimeError("MKC_SM_CONTROLLER=" + *value + " is not on or off");
    options.smController = *value == "on";
  }
  return options;
}

} // namespace mkc
