//===- mk/Support/BoundedNumber.h - an integer setting read from text, within bounds ---*- C++
//-*-===//
//
// The one parser of the integers that environment variables (MKC_*), transport settings and
// command-line flags carry. It takes decimal digits with an optional leading '-', nothing else:
// no sign '+', no spaces, no trailing characters, no empty text, and no value that overflows or
// falls outside [min, max]. Callers word their own errors: they know the variable's name and what
// the value means.
//
//   if (std::optional<std::int64_t> port = mkc::parseBoundedInt(text, 1, 65535))
//     use(*port);
//   else
//     throw Error(name + "=" + text + " is not a TCP port (1-65535)");
//
// Header-only (MkSupport): the compiler, the runtime and the tools use it.
//
//===----------------------------------------------------------------------===//

#ifndef MK_SUPPORT_BOUNDEDNUMBER_H
#define MK_SUPPORT_BOUNDEDNUMBER_H

#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string_view>
#include <system_error>

namespace mkc {

/// The integer `text` spells, if it spells one from `min` to `max`.
inline std::optional<std::int64_t> parseBoundedInt(std::string_view text, std::int64_t min,
                                                   std::int64_t max) {
  std::int64_t value = 0;
  const char *end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || stop != end || value < min || value > max)
    return std::nullopt;
  return value;
}

/// The finite real number `text` spells, if it spells one from `min` to `max`.
inline std::optional<double> parseBoundedReal(std::string_view text, double min, double max) {
  double value = 0;
  const char *end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || stop != end || !std::isfinite(value) || value < min ||
      value > max)
    return std::nullopt;
  return value;
}

} // namespace mkc

#endif // MK_SUPPORT_BOUNDEDNUMBER_H
