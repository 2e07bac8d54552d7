// mk/Support/BoundedInt.h: decimal integers within bounds, and everything else refused.

#include "mk/Support/BoundedInt.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>

using mkc::parseBoundedInt;

TEST_CASE("support: bounded integers within their bounds are read") {
  CHECK(parseBoundedInt("0", 0, 10) == 0);
  CHECK(parseBoundedInt("10", 0, 10) == 10);
  CHECK(parseBoundedInt("-5", -10, 10) == -5);
  CHECK(parseBoundedInt("007", 0, 10) == 7);
  constexpr auto kMin = std::numeric_limits<std::int64_t>::min();
  constexpr auto kMax = std::numeric_limits<std::int64_t>::max();
  CHECK(parseBoundedInt("9223372036854775807", kMin, kMax) == kMax);
  CHECK(parseBoundedInt("-9223372036854775808", kMin, kMax) == kMin);
}

TEST_CASE("support: bounded integers out of bounds or overflowing are refused") {
  CHECK_FALSE(parseBoundedInt("11", 0, 10));
  CHECK_FALSE(parseBoundedInt("-1", 0, 10));
  CHECK_FALSE(parseBoundedInt("65536", 1, 65535));
  constexpr auto kMin = std::numeric_limits<std::int64_t>::min();
  constexpr auto kMax = std::numeric_limits<std::int64_t>::max();
  CHECK_FALSE(parseBoundedInt("9223372036854775808", kMin, kMax));
  CHECK_FALSE(parseBoundedInt("-9223372036854775809", kMin, kMax));
  CHECK_FALSE(parseBoundedInt("99999999999999999999999", 0, kMax));
}

TEST_CASE("support: bounded integers refuse signs, junk and empty text") {
  CHECK_FALSE(parseBoundedInt("", 0, 10));
  CHECK_FALSE(parseBoundedInt("+5", 0, 10));
  CHECK_FALSE(parseBoundedInt("-", -10, 10));
  CHECK_FALSE(parseBoundedInt(" 5", 0, 10));
  CHECK_FALSE(parseBoundedInt("5 ", 0, 10));
  CHECK_FALSE(parseBoundedInt("5x", 0, 10));
  CHECK_FALSE(parseBoundedInt("0x5", 0, 10));
  CHECK_FALSE(parseBoundedInt("5.0", 0, 10));
  CHECK_FALSE(parseBoundedInt("five", 0, 10));
}
