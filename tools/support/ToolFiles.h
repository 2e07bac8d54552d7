//===- ToolFiles.h - the input and output files of mkc and mk-opt -*- C++ -*-===//

#ifndef MK_TOOLS_TOOLFILES_H
#define MK_TOOLS_TOOLFILES_H

#include "llvm/Support/LogicalResult.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ToolOutputFile.h"

#include <cstdint>
#include <memory>

namespace mkc::tools {

/// The most bytes of a tile program the tools read: far above any program (the library's are a
/// few KiB), so that an endless input fails at once rather than when memory runs out.
constexpr uint64_t kMaxInputBytes = uint64_t(64) << 20;

/// Reads the tile program at `path` ("-": standard input), at most kMaxInputBytes of it, from a
/// regular file only: a device or a FIFO is refused before it is opened (/dev/zero never ends, a
/// FIFO without a writer blocks the open). Prints "TOOL: error: ..." and returns null on failure.
std::unique_ptr<llvm::MemoryBuffer> readInput(llvm::StringRef tool, llvm::StringRef path);

/// Flushes `output`, opened on `path`, and keeps it if it is `complete` and written whole; else
/// ToolOutputFile removes it. A failed write is reported as "TOOL: error: cannot write PATH:
/// REASON" and its error cleared, so that closing the stream does not abort the tool (LLVM ERROR:
/// IO failure on output stream). Succeeds where the file is kept.
llvm::LogicalResult closeOutput(llvm::StringRef tool, llvm::StringRef path,
                                llvm::ToolOutputFile &output, bool complete = true);

} // namespace mkc::tools

#endif // MK_TOOLS_TOOLFILES_H
