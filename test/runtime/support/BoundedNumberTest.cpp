// mk/Support/BoundedNumber.h: integers and reals within bounds, and everything else refused.

#include "mk/Support/BoundedNumber.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>

using mkc::parseBoundedInt;
using mkc::parseBoundedReal;

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

TEST_CASE("support: bounded reals within their bounds are read") {
  CHECK(parseBoundedReal("0", 0, 10) == 0.0);
  CHECK(parseBoundedReal("2.5", 0, 10) == 2.5);
  CHECK(parseBoundedReal("1e3", 0, 1e6) == 1000.0);
  CHECK(parseBoundedReal("-0.5", -1, 1) == -0.5);
  CHECK(parseBoundedReal("10", 0, 10) == 10.0);
}

TEST_CASE("support: bounded reals out of bounds, not finite or malformed are refused") {
  CHECK_FALSE(parseBoundedReal("10.5", 0, 10));
  CHECK_FALSE(parseBoundedReal("-0.1", 0, 10));
  CHECK_FALSE(parseBoundedReal("inf", 0, 1e300));
  CHECK_FALSE(parseBoundedReal("nan", 0, 10));
  CHECK_FALSE(parseBoundedReal("1e400", 0, 1e300));
  CHECK_FALSE(parseBoundedReal("", 0, 10));
  CHECK_FALSE(parseBoundedReal("+1", 0, 10));
  CHECK_FALSE(parseBoundedReal(" 1", 0, 10));
  CHECK_FALSE(parseBoundedReal("1s", 0, 10));
  CHECK_FALSE(parseBoundedReal("0x1p3", 0, 10));
}
