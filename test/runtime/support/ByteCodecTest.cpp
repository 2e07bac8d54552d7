// mk/Support/ByteCodec.h: what the writer puts the reader gets back, little-endian whatever the
// host, and a read past the end or trailing bytes throw the caller's error, naming the message.

#include "mk/Support/ByteCodec.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

using Catch::Matchers::Contains;
using mkc::ByteReader;
using mkc::ByteWriter;

namespace {

struct TestError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

} // namespace

TEST_CASE("support: the byte codec reads back what it wrote, little-endian") {
  const std::vector<std::byte> bytes = ByteWriter()
                                           .put<std::uint8_t>(0xab)
                                           .put<std::uint16_t>(0x1234)
                                           .put<std::uint32_t>(0xdeadbeef)
                                           .put<std::int64_t>(-2)
                                           .sized("hello")
                                           .text("tail")
                                           .take();
  REQUIRE(bytes.size() == 1 + 2 + 4 + 8 + 8 + 5 + 4);
  CHECK(bytes[1] == std::byte{0x34}); // the low byte first
  CHECK(bytes[2] == std::byte{0x12});

  ByteReader<TestError> reader(bytes, "a test message");
  CHECK(reader.get<std::uint8_t>() == 0xab);
  CHECK(reader.get<std::uint16_t>() == 0x1234);
  CHECK(reader.get<std::uint32_t>() == 0xdeadbeef);
  CHECK(reader.get<std::int64_t>() == -2);
  CHECK(reader.sized() == "hello");
  CHECK(reader.remaining() == 4);
  CHECK(reader.text(4) == "tail");
  CHECK_NOTHROW(reader.expectEnd());
}

TEST_CASE("support: the byte codec's reads past the end throw the caller's error") {
  const std::vector<std::byte> bytes = ByteWriter().put<std::uint16_t>(7).take();
  ByteReader<TestError> reader(bytes, "node 3's endpoint");
  CHECK_THROWS_AS(reader.get<std::uint32_t>(), TestError);
  ByteReader<TestError> again(bytes, "node 3's endpoint");
  CHECK_THROWS_WITH(again.get<std::uint64_t>(),
                    Contains("node 3's endpoint") && Contains("6 bytes short"));

  // A length that claims more than there is fails without reading (or allocating) it.
  const std::vector<std::byte> lying = ByteWriter().put<std::uint64_t>(1ull << 40).take();
  ByteReader<TestError> sized(lying, "a reply");
  CHECK_THROWS_WITH(sized.sized(), Contains("a reply is truncated"));
}

TEST_CASE("support: the byte codec reports trailing bytes, and rest() takes them") {
  const std::vector<std::byte> bytes = ByteWriter().put<std::uint32_t>(1).text("xyz").take();
  ByteReader<TestError> reader(bytes, "a frame");
  CHECK(reader.get<std::uint32_t>() == 1);
  CHECK_THROWS_WITH(reader.expectEnd(), Contains("a frame has 3 trailing bytes"));
  CHECK(reader.rest().size() == 3);
  CHECK_NOTHROW(reader.expectEnd());
  CHECK(reader.rest().empty());
}

TEST_CASE("support: the byte codec reads strings of bytes") {
  const std::string text("\0\1two", 5);
  ByteReader<TestError> reader(std::string_view(text), "a pipe");
  CHECK(reader.get<std::uint16_t>() == 0x0100);
  CHECK(reader.text(3) == "two");
}
