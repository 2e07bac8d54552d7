//===- runtime/Agreement.cpp - whether every rank made the same collective call ---===//
//
// Each rank gathers every rank's request (the fields naming what it asks for) and failure
// through the store; all of them then reach the same verdict, so that every rank throws the
// same error, naming the rank that failed or asked for something else than rank 0.
//
//===----------------------------------------------------------------------===//

#include "runtime/RuntimeState.h"

#include "mk/Support/ByteCodec.h"

#include <fmt/format.h>

namespace mkc {

std::vector<std::byte> blobOf(const std::vector<std::string> &fields) {
  ByteWriter writer;
  writer.put(static_cast<std::uint32_t>(fields.size()));
  for (const std::string &field : fields)
    writer.sized(field);
  return writer.take();
}

std::vector<std::string> fields(std::span<const std::byte> blob) {
  ByteReader<RuntimeError> reader(blob, "a rank's fields");
  std::vector<std::string> result;
  for (auto count = reader.get<std::uint32_t>(); count > 0; --count)
    result.push_back(reader.sized());
  reader.expectEnd();
  return result;
}

std::optional<std::string> agree(ProcessGroup &group, const std::string &what,
                                 const std::vector<std::string> &names,
                                 std::vector<std::string> request, const std::string &failure) {
  request.push_back(failure);
  std::vector<std::vector<std::byte>> blobs = group.store().allGather(blobOf(request));
  std::vector<std::vector<std::string>> answers;
  for (const auto &blob : blobs)
    answers.push_back(fields(blob));
  for (int rank = 0; rank < group.worldSize(); ++rank) {
    if (answers[rank].size() != request.size())
      return fmt::format("{}: rank {} sent a malformed answer", what, rank);
    if (const std::string &error = answers[rank].back(); !error.empty())
      return rank == group.rank() ? fmt::format("{}: {}", what, error)
                                  : fmt::format("{} failed on rank {}: {}", what, rank, error);
  }
  for (int rank = 1; rank < group.worldSize(); ++rank)
    for (std::size_t field = 0; field < names.size(); ++field)
      if (answers[rank][field] != answers[0][field])
        return fmt::format("{}: rank {} asks for {} \"{}\", rank 0 for \"{}\": every rank must "
                           "make the same collective calls",
                           what, rank, names[field], answers[rank][field], answers[0][field]);
  return std::nullopt;
}

} // namespace mkc
