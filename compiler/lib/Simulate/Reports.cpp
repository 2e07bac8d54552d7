//===- Reports.cpp - what a machine found ---------------------------------===//

#include "Machine.h"

#include <cmath>

using namespace mlir;
using namespace mlir::mk;
using namespace mlir::mk::sim;
using namespace mlir::mk::sim::detail;

//===----------------------------------------------------------------------===//
// Reports
//===----------------------------------------------------------------------===//

void Machine::report(FindingKind kind, Location loc, std::string message) {
  if (static_cast<int64_t>(result.findings.size()) >= options.maxFindings) {
    stopped = true;
    return;
  }
  result.findings.push_back(Finding{kind, loc, std::move(message), seed});
}

std::string Machine::who(int64_t id, int64_t launch) const {
  const Thread &t = threads[id];
  if (!launch)
    launch = ranks[t.rank].launch;
  if (t.cta < 0)
    return llvm::formatv("the copy engines of rank {0} (launch {1})", t.rank, launch);
  RoleOp role = t.role;
  return llvm::formatv("rank {0} (CTA {1}, {2} {3} of {4}, launch {5})", t.rank, t.cta,
                       stringifyRoleKind(role.getKind()), t.roleCta, t.roleCtas, launch);
}

std::string Machine::element(const Tensor &tensor, int64_t r, int64_t id, int64_t offset) const {
  return llvm::formatv("element [{0}] of {1} on rank {2}",
                       coordinates(tensor.data.layout.coordsOf(offset)), tensorName(id), r);
}

std::string Machine::tensorName(int64_t id) const {
  if (id < static_cast<int64_t>(outputs.size()))
    return llvm::formatv("argument #{0}", id);
  return llvm::formatv("the buffer made at {0}", location(tensorValues[id].getDefiningOp()));
}

void Machine::checkOutputs(int64_t r) {
  Rank &rank = ranks[r];
  const ReferenceResult &expected = launches[rank.launch - 1].expected;
  for (size_t a = 0; a < outputs.size(); ++a) {
    if (!outputs[a])
      continue;
    const Tensor &tensor = rank.tensors[a];
    const TensorData &want = expected.arguments[r][a];
    const std::vector<bool> &written = expected.written[r][a];
    const std::vector<float> &slack = expected.slack[r][a];
    // Rounding: relative to the element and to the tensor's size, and of partial sums.
    double squares = 0;
    int64_t count = 0;
    for (size_t k = 0; k < want.data.size(); ++k)
      if (written[k] && std::isfinite(want.data[k])) {
        squares += double(want.data[k]) * want.data[k];
        ++count;
      }
    double rms = count ? std::sqrt(squares / count) : 0;
    int64_t unwritten = 0, wrong = 0, firstUnwritten = -1, firstWrong = -1;
    for (size_t k = 0; k < want.data.size(); ++k) {
      bool mine = tensor.writtenIn[k] == rank.launch;
      if (written[k] && !mine) {
        if (!unwritten++)
          firstUnwritten = k;
        continue;
      }
      float got = tensor.data.data[k], ref = want.data[k];
      double tolerance = std::fabs(ref) * 0x1p-7 + rms / 64 + slack[k];
      bool close = written[k] ? std::isnan(ref) || std::fabs(got - ref) <= tolerance : !mine;
      if (!close && !wrong++)
        firstWrong = k;
    }
    auto at = [&](int64_t k) { return coordinates(tensor.data.layout.coordsOf(k)); };
    Location loc = program.getBodyBlock().getArgument(a).getLoc();
    if (unwritten)
      report(FindingKind::unwritten, loc,
             llvm::formatv("launch {0} left {1} elements of argument #{2} unwritten on rank {3} "
                           "(the first at [{4}])",
                           rank.launch, unwritten, a, r, at(firstUnwritten)));
    if (wrong)
      report(FindingKind::wrongResult, loc,
             llvm::formatv("launch {0} got {1} elements of argument #{2} wrong on rank {3}: the "
                           "first at [{4}] is {5:e3}, the program means {6:e3}",
                           rank.launch, wrong, a, r, at(firstWrong), tensor.data.data[firstWrong],
                           want.data[firstWrong]));
  }
}

void Machine::reportDeadlock() {
  // One line per blocked wait op and rank, in the program's order of ops, then of ranks.
  std::map<std::pair<uint32_t, int64_t>, std::vector<const Thread *>> blocked;
  for (const Thread &t : threads)
    if (t.status == Status::blocked)
      blocked[{opIndex.lookup(t.waitOp), t.rank}].push_back(&t);
  std::string message = "no thread can go on and nothing is in flight;";
  if (blocked.empty())
    message += " no thread waits, but launches were left to run";
  for (const auto &[key, list] : blocked) {
    const Thread &t = *list.front();
    std::string flag;
    for (const auto &entry : flagArrays)
      if (t.waitFlag >= entry.second.first) {
        int64_t words = 1;
        for (int64_t e : entry.second.second)
          words *= e;
        if (t.waitFlag < entry.second.first + words)
          flag = llvm::formatv("@{0} word {1}", entry.first(), t.waitFlag - entry.second.first);
      }
    message += llvm::formatv(
        " {0}{1} waits at {2} for {3} of {4}, which holds {5};", who(t.id),
        list.size() > 1 ? llvm::formatv(" and {0} more", list.size() - 1).str() : std::string(),
        location(ops[key.first]), t.waitCount, flag, ranks[t.rank].flags[t.waitFlag].count);
  }
  Operation *first = blocked.empty() ? program.getOperation() : ops[blocked.begin()->first.first];
  report(FindingKind::deadlock, first->getLoc(), std::move(message));
}
