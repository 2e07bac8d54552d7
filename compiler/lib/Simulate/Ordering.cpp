//===- Ordering.cpp - the order of a tensor's accesses --------------------===//

#include "Machine.h"

using namespace mlir;
using namespace mlir::mk;
using namespace mlir::mk::sim;
using namespace mlir::mk::sim::detail;

//===----------------------------------------------------------------------===//
// Memory and its ordering
//===----------------------------------------------------------------------===//

void Machine::readBox(int64_t r, int64_t id, const Box &box, const Epoch &epoch,
                      const Clock &clock) {
  Tensor &tensor = ranks[r].tensors[id];
  if (!tensor.tracked)
    return;
  const Layout &layout = tensor.data.layout;
  box.forEachRow([&](ArrayRef<int64_t> start, int64_t n) {
    int64_t base = layout.offset(start);
    for (int64_t offset = base; offset < base + n; ++offset)
      readElement(tensor, r, id, offset, epoch, clock);
  });
}

void Machine::readElement(Tensor &tensor, int64_t r, int64_t id, int64_t offset, const Epoch &epoch,
                          const Clock &clock) {
  Shadow &shadow = tensor.shadow[offset];
  Extra *extra = shadow.extra >= 0 ? &tensor.extras[shadow.extra] : nullptr;
  auto check = [&](const Epoch &write) {
    if (before(write, clock) || write.thread == epoch.thread ||
        !reported.insert({int(FindingKind::unguardedRead), opOf(epoch), opOf(write)}).second)
      return;
    report(FindingKind::unguardedRead, opOf(epoch)->getLoc(),
           llvm::formatv("{0} reads {1} before the write by {2} at {3} is ordered before it: no "
                         "wait covers that write",
                         who(epoch.thread, epoch.launch), element(tensor, r, id, offset),
                         who(write.thread, write.launch), location(opOf(write))));
  };
  check(shadow.write);
  if (extra)
    for (const Epoch &write : extra->combines)
      check(write);
  // Record the read: one epoch while reads are ordered, all of them once they are not.
  if (!extra &&
      (!shadow.read.op || shadow.read.thread == epoch.thread || before(shadow.read, clock))) {
    shadow.read = epoch;
    return;
  }
  if (!extra) {
    shadow.extra = tensor.extras.size();
    extra = &tensor.extras.emplace_back();
    extra->reads.push_back(shadow.read);
  }
  auto same = llvm::find_if(extra->reads, [&](const Epoch &e) { return e.thread == epoch.thread; });
  if (same != extra->reads.end())
    *same = epoch;
  else
    extra->reads.push_back(epoch);
}

void Machine::writeBox(int64_t r, int64_t id, const Box &box, const Epoch &epoch,
                       const Clock &clock, bool combine) {
  Tensor &tensor = ranks[r].tensors[id];
  if (!tensor.tracked)
    return;
  // A copy reads its source as it lands: writing there first changes what it carries.
  if (tensor.sourcesInFlight)
    for (const auto &[pendingId, transfer] : pending) {
      if (transfer.kind != Transfer::Kind::copy || transfer.from != r ||
          transfer.sourceTensor != id)
        continue;
      bool overlaps = true;
      for (size_t d = 0; d < box.lo.size(); ++d)
        overlaps &= box.lo[d] < transfer.sourceBox.hi[d] && transfer.sourceBox.lo[d] < box.hi[d];
      if (overlaps &&
          reported.insert({int(FindingKind::unguardedRead), opOf(epoch), transfer.op}).second)
        report(FindingKind::unguardedRead, opOf(epoch)->getLoc(),
               llvm::formatv("{0} writes {1} on rank {2} over the source of the copy at {3} by "
                             "{4}, still in flight",
                             who(epoch.thread, epoch.launch), tensorName(id), r,
                             location(transfer.op), who(transfer.thread, transfer.launch)));
    }
  const Layout &layout = tensor.data.layout;
  box.forEachRow([&](ArrayRef<int64_t> start, int64_t n) {
    int64_t base = layout.offset(start);
    for (int64_t offset = base; offset < base + n; ++offset)
      writeElement(tensor, r, id, offset, epoch, clock, combine);
  });
}

void Machine::writeElement(Tensor &tensor, int64_t r, int64_t id, int64_t offset,
                           const Epoch &epoch, const Clock &clock, bool combine) {
  Shadow &shadow = tensor.shadow[offset];
  Extra *extra = shadow.extra >= 0 ? &tensor.extras[shadow.extra] : nullptr;
  auto check = [&](const Epoch &other, bool isRead) {
    if (before(other, clock) || other.thread == epoch.thread)
      return;
    Operation *where = opOf(isRead ? other : epoch);
    if (!reported.insert({int(FindingKind::unguardedRead), where, opOf(isRead ? epoch : other)})
             .second)
      return;
    report(FindingKind::unguardedRead, where->getLoc(),
           isRead ? llvm::formatv("{0} reads {1}, which the write by {2} at {3} then changes: no "
                                  "wait orders the two",
                                  who(other.thread, other.launch), element(tensor, r, id, offset),
                                  who(epoch.thread, epoch.launch), location(opOf(epoch)))
                        .str()
                  : llvm::formatv("{0} writes {1}, which the write by {2} at {3} also writes: no "
                                  "wait orders the two",
                                  who(epoch.thread, epoch.launch), element(tensor, r, id, offset),
                                  who(other.thread, other.launch), location(opOf(other)))
                        .str());
  };
  check(shadow.write, false);
  check(shadow.read, true);
  if (extra) {
    // Adds into the same element commute; a plain write must be ordered with them.
    if (!combine)
      for (const Epoch &other : extra->combines)
        check(other, false);
    for (const Epoch &other : extra->reads)
      check(other, true);
  }
  shadow.read = Epoch();
  if (combine) {
    if (!extra) {
      shadow.extra = tensor.extras.size();
      extra = &tensor.extras.emplace_back();
    }
    extra->reads.clear();
    extra->combines.push_back(epoch);
  } else {
    shadow.write = epoch;
    if (extra) {
      extra->reads.clear();
      extra->combines.clear();
    }
  }
  tensor.writtenIn[offset] = epoch.launch;
}
