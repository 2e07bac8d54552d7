//===- ToolFiles.cpp - the input and output files of mkc and mk-opt -------===//

#include "ToolFiles.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

namespace fs = llvm::sys::fs;
using llvm::StringRef;
using llvm::Twine;

namespace mkc::tools {

namespace {

StringRef describe(fs::file_type type) {
  switch (type) {
  case fs::file_type::directory_file:
    return "a directory";
  case fs::file_type::character_file:
    return "a character device";
  case fs::file_type::block_file:
    return "a block device";
  case fs::file_type::fifo_file:
    return "a FIFO";
  case fs::file_type::socket_file:
    return "a socket";
  default:
    return "of an unknown type";
  }
}

} // namespace

std::unique_ptr<llvm::MemoryBuffer> readInput(StringRef tool, StringRef path) {
  auto fail = [&](const Twine &why) -> std::unique_ptr<llvm::MemoryBuffer> {
    llvm::errs() << tool << ": error: " << why << "\n";
    return nullptr;
  };
  const std::string bound =
      (tool + " reads tile programs of at most " + Twine(kMaxInputBytes >> 20) + " MiB").str();
  bool standardInput = path == "-";
  const std::string name = standardInput ? "standard input" : path.str();
  fs::file_t file = fs::getStdinHandle();
  if (!standardInput) {
    // stat, not open: opening a FIFO waits for a writer.
    fs::file_status status;
    if (std::error_code error = fs::status(path, status))
      return fail("cannot open input file '" + path + "': " + error.message());
    if (status.type() != fs::file_type::regular_file)
      return fail(path + " is " + describe(status.type()) + ", not a regular file; " + tool +
                  " reads tile programs from files, or from standard input as -");
    if (status.getSize() > kMaxInputBytes)
      return fail(path + " is " + Twine(status.getSize()) + " bytes; " + bound);
    llvm::Expected<fs::file_t> opened = fs::openNativeFileForRead(path);
    if (!opened)
      return fail("cannot open input file '" + path + "': " + llvm::toString(opened.takeError()));
    file = *opened;
  }
  llvm::scope_exit close([&] {
    if (!standardInput)
      fs::closeFile(file);
  });

  // One byte past the bound tells a program of the bound from a longer one (a file may grow).
  llvm::SmallString<0> text;
  while (text.size() <= kMaxInputBytes) {
    size_t size = text.size();
    size_t chunk = std::min<uint64_t>(size_t(1) << 16, kMaxInputBytes + 1 - size);
    text.resize_for_overwrite(size + chunk);
    llvm::Expected<size_t> read =
        fs::readNativeFile(file, llvm::MutableArrayRef<char>(text.data() + size, chunk));
    if (!read)
      return fail("cannot read " + name + ": " + llvm::toString(read.takeError()));
    text.truncate(size + *read);
    if (*read == 0)
      return llvm::MemoryBuffer::getMemBufferCopy(text, standardInput ? "<stdin>" : path);
  }
  return fail(name + " is longer than " + Twine(kMaxInputBytes >> 20) + " MiB; " + bound);
}

llvm::LogicalResult closeOutput(StringRef tool, StringRef path, llvm::ToolOutputFile &output,
                                bool complete) {
  llvm::raw_fd_ostream &os = output.os();
  os.flush();
  if (os.has_error()) {
    llvm::errs() << tool << ": error: cannot write " << (path == "-" ? "standard output" : path)
                 << ": " << os.error().message() << "\n";
    os.clear_error();
    return llvm::failure();
  }
  if (!complete)
    return llvm::failure();
  output.keep();
  return llvm::success();
}

} // namespace mkc::tools
