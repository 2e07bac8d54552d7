//===- PassOptions.cpp - checks of the passes' options; the SM split ------===//

#include "mk/Transforms/PassOptions.h"

#include "mk/IR/MkOps.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/Twine.h"

namespace mlir::mk {

/// "NAME=VALUE: RULE" where `value` lies outside [min, max], else nothing: the check of every
/// bounded integer option, which the passes report on the program and checkPipelineOptions
/// (mk/PipelineOptions.h) as a flag error.
static std::optional<std::string> checkOptionRange(StringRef name, int64_t value, int64_t min,
                                                   int64_t max, const Twine &rule) {
  if (value >= min && value <= max)
    return std::nullopt;
  return (name + "=" + Twine(value) + ": " + rule).str();
}

std::optional<std::string> checkSmCount(int64_t smCount) {
  return checkOptionRange("sm-count", smCount, 1, kMaxSmCount,
                          "the persistent grid has 1 to " + Twine(kMaxSmCount) +
                              " CTAs, one per SM (an H200 has 132)");
}

std::optional<std::string> checkGemmOptions(int64_t stages, int64_t cluster) {
  if (stages != 0)
    if (std::optional<std::string> error = checkOptionRange(
            "gemm-stages", stages, 2, kMaxGemmStages,
            "the GEMM engine's ring has 2 to " + Twine(kMaxGemmStages) +
                " stages (the deepest fits shared memory only beside 128 x 64 tiles)"))
      return error;
  return checkOptionRange("gemm-cluster", cluster, 0, 2,
                          "the GEMM engine runs in clusters of 1 or 2 CTAs");
}

std::optional<int64_t> SmSplit::ctasOf(std::string_view kind) const {
  for (const Role &role : roles)
    if (role.kind == kind)
      return role.ctas;
  return std::nullopt;
}

/// The message of an entry that is not a known role with CTAs, as `entry` was written.
static std::string malformedEntry(const Twine &entry) {
  return ("sm split entry '" + entry + "' is not ROLE=CTAS with a known role and CTAS >= 1").str();
}

std::optional<std::string> SmSplit::checkRoles() const {
  for (const Role &role : roles)
    if (!symbolizeRoleKind(role.kind) || role.ctas < 1)
      return malformedEntry(role.kind + "=" + Twine(role.ctas));
  return std::nullopt;
}

std::optional<std::string> SmSplit::check() const {
  if (std::optional<std::string> error = checkRoles())
    return error;
  for (auto [index, role] : llvm::enumerate(roles)) {
    auto earlier = roles.begin() + index;
    if (std::find_if(roles.begin(), earlier,
                     [&](const Role &other) { return other.kind == role.kind; }) != earlier)
      return "the sm split names role " + role.kind + " twice";
  }
  return std::nullopt;
}

std::optional<std::string> SmSplit::checkLaunch(const SmSplit &compiled, int64_t cluster) const {
  const auto kinds = [](const SmSplit &split) {
    return llvm::join(llvm::map_range(split.roles, [](const Role &role) { return role.kind; }),
                      ",");
  };
  if (kinds(*this) != kinds(compiled))
    return "the kernel's roles are " + kinds(compiled) + ", in that order; the split names " +
           kinds(*this);
  int64_t grid = 0, asked = 0;
  for (auto [mine, theirs] : llvm::zip_equal(roles, compiled.roles)) {
    if (mine.ctas < 1)
      return "role " + mine.kind + " has " + std::to_string(mine.ctas) +
             " CTAs: every role needs one or more";
    if (cluster > 1 && mine.ctas % cluster)
      return "role " + mine.kind + " has " + std::to_string(mine.ctas) +
             " CTAs: the kernel runs in clusters of " + std::to_string(cluster) +
             ", whose CTAs are one role's, so every role's count is a multiple of it";
    grid += theirs.ctas;
    asked += mine.ctas;
  }
  if (asked != grid)
    return "the split gives " + std::to_string(asked) + " CTAs; the kernel's grid is " +
           std::to_string(grid) + " (the compiler's split: " + compiled.str() + ")";
  return std::nullopt;
}

std::string SmSplit::str() const {
  return llvm::join(
      llvm::map_range(roles,
                      [](const Role &role) { return role.kind + "=" + std::to_string(role.ctas); }),
      ",");
}

std::optional<std::string> SmSplit::parse(std::string_view text, SmSplit &split) {
  SmallVector<StringRef> entries;
  StringRef(text.data(), text.size()).split(entries, ',', /*MaxSplit=*/-1, /*KeepEmpty=*/false);
  SmSplit parsed;
  for (StringRef entry : entries) {
    auto [kind, value] = entry.split('=');
    int64_t ctas;
    if (value.trim().getAsInteger(10, ctas))
      return malformedEntry(entry);
    parsed.roles.push_back({kind.trim().str(), ctas});
  }
  if (std::optional<std::string> error = parsed.check())
    return error;
  split = std::move(parsed);
  return std::nullopt;
}

} // namespace mlir::mk
