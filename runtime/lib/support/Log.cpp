//===- Log.cpp - leveled messages on standard error -----------------------===//

#include "mk/runtime/support/Log.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <string>

namespace mkc::log {

namespace {
constexpr std::array<std::string_view, 4> levelNames = {"error", "warning", "info", "debug"};
constexpr Level defaultLevel = Level::warning;

Level readThreshold() {
  const char *setting = std::getenv("MKC_LOG_LEVEL");
  if (!setting || !*setting)
    return defaultLevel;
  std::string name(setting);
  std::ranges::transform(name, name.begin(), [](unsigned char c) { return std::tolower(c); });
  for (size_t level = 0; level < levelNames.size(); ++level)
    if (name == levelNames[level])
      return static_cast<Level>(level);
  write(Level::warning,
        fmt::format("MKC_LOG_LEVEL={} is not one of error, warning, info, debug; using {}", setting,
                    levelNames[static_cast<size_t>(defaultLevel)]));
  return defaultLevel;
}
} // namespace

Level threshold() {
  static const Level level = readThreshold();
  return level;
}

void write(Level level, std::string_view message) {
  std::string line =
      fmt::format("mkc[{}] {}: {}\n", getpid(), levelNames[static_cast<size_t>(level)], message);
  // One write(2) per line; a short write (a full pipe, a signal) continues where it stopped.
  for (std::string_view rest = line; !rest.empty();) {
    ssize_t written = ::write(STDERR_FILENO, rest.data(), rest.size());
    if (written < 0 && errno == EINTR)
      continue;
    if (written <= 0)
      return;
    rest.remove_prefix(static_cast<size_t>(written));
  }
}

} // namespace mkc::log
