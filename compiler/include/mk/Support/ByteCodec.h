//===- mk/Support/ByteCodec.h - integers and bytes in messages, little-endian ---*- C++ -*-===//
//
// The one encoder and decoder of what mkc sends between processes: the store's wire protocol
// (Bootstrap), the endpoints ranks exchange (the proxy, the verbs transport, the runtime's rail)
// and what NVRTC's forked child returns through its pipe. Integers are fixed-width and
// little-endian whatever the host's order; a reader's reads are bounds-checked and throw the
// caller's error type, naming what was being read, instead of reading past the end.
//
//   std::vector<std::byte> bytes = mkc::ByteWriter().put<std::uint32_t>(7).text("hi").take();
//   mkc::ByteReader<NetworkError> reader(bytes, "node 3's endpoint");
//   auto seven = reader.get<std::uint32_t>();
//   std::string hi = reader.text(2);
//   reader.expectEnd();
//
// Header-only (MkSupport, an INTERFACE library): the compiler and the runtime both use it.
//
//===----------------------------------------------------------------------===//

#ifndef MK_SUPPORT_BYTECODEC_H
#define MK_SUPPORT_BYTECODEC_H

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mkc {

/// Appends fields; put() and friends chain.
class ByteWriter {
public:
  template <std::integral Integer> ByteWriter &put(Integer value) {
    for (std::size_t byte = 0; byte < sizeof value; ++byte)
      bytes_.push_back(static_cast<std::byte>(static_cast<std::uint64_t>(value) >> (8 * byte)));
    return *this;
  }
  ByteWriter &bytes(std::span<const std::byte> data) {
    bytes_.insert(bytes_.end(), data.begin(), data.end());
    return *this;
  }
  ByteWriter &text(std::string_view text) { return bytes(std::as_bytes(std::span(text))); }
  /// A 64-bit length, then the bytes: what sized() reads back.
  ByteWriter &sized(std::string_view text) { return put<std::uint64_t>(text.size()).text(text); }

  std::vector<std::byte> take() { return std::move(bytes_); }
  /// The bytes as a string, for what carries strings (a child's pipe).
  std::string takeString() {
    return std::string(reinterpret_cast<const char *>(bytes_.data()), bytes_.size());
  }

private:
  std::vector<std::byte> bytes_;
};

/// Reads fields in order from a view of bytes (which must outlive it); a read past the end
/// throws `Error` (constructible from a std::string), and expectEnd() one of trailing bytes.
template <typename Error> class ByteReader {
public:
  /// `what` names the bytes in errors: "node 3's endpoint".
  explicit ByteReader(std::span<const std::byte> data, std::string_view what = "a message")
      : data_(data), what_(what) {}
  explicit ByteReader(std::string_view data, std::string_view what = "a message")
      : ByteReader(std::as_bytes(std::span(data)), what) {}

  template <std::integral Integer> Integer get() {
    std::uint64_t value = 0;
    std::span<const std::byte> taken = bytes(sizeof(Integer));
    for (std::size_t byte = 0; byte < sizeof(Integer); ++byte)
      value |= std::to_integer<std::uint64_t>(taken[byte]) << (8 * byte);
    return static_cast<Integer>(value);
  }
  std::span<const std::byte> bytes(std::size_t count) {
    if (count > data_.size())
      throw Error(std::string(what_) + " is truncated (" + std::to_string(count - data_.size()) +
                  " bytes short)");
    std::span<const std::byte> taken = data_.first(count);
    data_ = data_.subspan(count);
    return taken;
  }
  std::string text(std::size_t count) {
    std::span<const std::byte> taken = bytes(count);
    return std::string(reinterpret_cast<const char *>(taken.data()), taken.size());
  }
  /// What ByteWriter::sized() wrote.
  std::string sized() { return text(get<std::uint64_t>()); }
  /// The bytes not read yet, which are consumed.
  std::span<const std::byte> rest() { return bytes(data_.size()); }

  std::size_t remaining() const { return data_.size(); }
  void expectEnd() const {
    if (!data_.empty())
      throw Error(std::string(what_) + " has " + std::to_string(data_.size()) + " trailing bytes");
  }

private:
  std::span<const std::byte> data_;
  std::string_view what_;
};

} // namespace mkc

#endif // MK_SUPPORT_BYTECODEC_H
