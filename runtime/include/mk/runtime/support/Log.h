//===- mk/runtime/support/Log.h - leveled messages on standard error -------*- C++ -*-===//
//
// One line per message, "mkc[PID] LEVEL: message", written to standard error with a single
// write(2) so that the lines of ranks sharing a terminal do not interleave. MKC_LOG_LEVEL (error,
// warning, info, debug; default warning) says which levels are written; below it a message costs
// one comparison and its arguments are not formatted.
//
//   mkc::log::debug("jit: {}: NVRTC {:.2f} s", kernel, seconds);
//
//===----------------------------------------------------------------------===//

#ifndef MK_RUNTIME_SUPPORT_LOG_H
#define MK_RUNTIME_SUPPORT_LOG_H

#include <fmt/format.h>

#include <string_view>

namespace mkc::log {

enum class Level { error, warning, info, debug };

/// The most detailed level written: MKC_LOG_LEVEL, read once per process.
Level threshold();

inline bool enabled(Level level) { return level <= threshold(); }

/// Writes `message` as one line at `level`, whatever the threshold.
void write(Level level, std::string_view message);

template <typename... Args>
void message(Level level, fmt::format_string<Args...> format, Args &&...args) {
  if (enabled(level))
    write(level, fmt::format(format, std::forward<Args>(args)...));
}

template <typename... Args> void error(fmt::format_string<Args...> format, Args &&...args) {
  message(Level::error, format, std::forward<Args>(args)...);
}
template <typename... Args> void warning(fmt::format_string<Args...> format, Args &&...args) {
  message(Level::warning, format, std::forward<Args>(args)...);
}
template <typename... Args> void info(fmt::format_string<Args...> format, Args &&...args) {
  message(Level::info, format, std::forward<Args>(args)...);
}
template <typename... Args> void debug(fmt::format_string<Args...> format, Args &&...args) {
  message(Level::debug, format, std::forward<Args>(args)...);
}

} // namespace mkc::log

#endif // MK_RUNTIME_SUPPORT_LOG_H
