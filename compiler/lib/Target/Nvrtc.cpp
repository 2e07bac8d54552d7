//===- Nvrtc.cpp - CUDA C++ compilation with NVRTC, in a child process -----===//

#include "mk/Target/Nvrtc.h"
#include "mk/Support/ByteCodec.h"
#include "mk/Target/ChildProcess.h"

#include <nvrtc.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <stdexcept>

namespace mkc::nvrtc {

std::vector<std::string> Options::cudaIncludeDirs() {
  std::vector<std::string> dirs;
  if (const char *list = std::getenv("MKC_CUDA_INCLUDE"); list && *list) {
    std::stringstream stream(list);
    for (std::string dir; std::getline(stream, dir, ':');)
      if (!dir.empty())
        dirs.push_back(dir);
    return dirs;
  }
  const char *home = std::getenv("CUDA_HOME");
  std::string root = home && *home ? home : "/usr/local/cuda";
  // CUDA 13 keeps cuda/std, cub and thrust only under include/cccl.
  return {root + "/include", root + "/include/cccl"};
}

std::string version() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS)
    return "unknown";
  return std::to_string(major) + "." + std::to_string(minor);
}

std::vector<KernelResources> parsePtxasReport(std::string_view log) {
  static const std::regex entry(R"(Compiling entry function '([^']+)')");
  static const std::regex frame(
      R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex used(R"(Used (\d+) registers)");
  std::vector<KernelResources> kernels;
  std::istringstream lines{std::string(log)};
  std::smatch match;
  for (std::string line; std::getline(lines, line);) {
    if (std::regex_search(line, match, entry)) {
      kernels.push_back({match[1].str()});
    } else if (kernels.empty()) {
      continue;
    } else if (std::regex_search(line, match, frame)) {
      kernels.back().stackFrameBytes = std::stoi(match[1].str());
      kernels.back().spillStoreBytes = std::stoi(match[2].str());
      kernels.back().spillLoadBytes = std::stoi(match[3].str());
    } else if (std::regex_search(line, match, used)) {
      kernels.back().registers = std::stoi(match[1].str());
    }
  }
  return kernels;
}

std::string annotateLog(std::string_view log, std::string_view source, std::string_view fileName) {
  std::vector<std::string_view> sourceLines;
  for (size_t start = 0; start <= source.size();) {
    size_t end = source.find('\n', start);
    if (end == std::string_view::npos)
      end = source.size();
    sourceLines.push_back(source.substr(start, end - start));
    start = end + 1;
  }
  std::string pattern = "^";
  for (char c : fileName) {
    if (std::string_view(".^$|()[]{}*+?\\").find(c) != std::string_view::npos)
      pattern += '\\';
    pattern += c;
  }
  pattern += R"(\((\d+)\): )";
  const std::regex located(pattern);
  std::ostringstream out;
  std::istringstream lines{std::string(log)};
  std::smatch match;
  for (std::string line; std::getline(lines, line);) {
    out << line << '\n';
    if (!std::regex_search(line, match, located))
      continue;
    size_t number = std::stoul(match[1].str());
    if (number >= 1 && number <= sourceLines.size())
      out << "    " << number << " | " << sourceLines[number - 1] << '\n';
  }
  return out.str();
}

std::vector<std::string> flags(const Options &options) {
  std::vector<std::string> flags = {"--gpu-architecture=" + options.arch, "-std=c++17"};
  for (const std::string &dir : options.includeDirs)
    flags.push_back("-I" + dir);
  if (options.ptxasReport)
    flags.push_back("-Xptxas=-v");
  flags.insert(flags.end(), options.extraOptions.begin(), options.extraOptions.end());
  return flags;
}

namespace {
/// Destroys the program however compileHere() returns.
struct Program {
  nvrtcProgram handle = nullptr;
  ~Program() {
    if (handle)
      nvrtcDestroyProgram(&handle);
  }
};

std::string failure(nvrtcResult status, std::string_view during) {
  return std::string(during) + " failed: " + nvrtcGetErrorString(status) + "\n";
}

/// What NVRTC gives for one compile, as it gives it.
struct Output {
  bool ok = false;
  std::string log, ptx, cubin;
};

/// One compile by NVRTC, in this process.
Output compileHere(std::string_view source, std::string_view fileName, const Options &options,
                   std::span<const Header> headers) {
  Output output;
  std::vector<const char *> headerContents, headerNames;
  std::vector<std::string> contents; // NUL-terminated copies
  contents.reserve(headers.size());
  for (const Header &header : headers) {
    contents.emplace_back(header.contents);
    headerContents.push_back(contents.back().c_str());
    headerNames.push_back(header.name.c_str());
  }

  Program program;
  std::string sourceCopy(source), nameCopy(fileName);
  if (nvrtcResult status = nvrtcCreateProgram(&program.handle, sourceCopy.c_str(), nameCopy.c_str(),
                                              static_cast<int>(headers.size()),
                                              headerContents.data(), headerNames.data());
      status != NVRTC_SUCCESS) {
    output.log = failure(status, "nvrtcCreateProgram");
    return output;
  }

  std::vector<std::string> commandLine = flags(options);
  std::vector<const char *> flagPointers;
  for (const std::string &flag : commandLine)
    flagPointers.push_back(flag.c_str());

  nvrtcResult compiled = nvrtcCompileProgram(program.handle, static_cast<int>(flagPointers.size()),
                                             flagPointers.data());
  size_t logSize = 0;
  nvrtcGetProgramLogSize(program.handle, &logSize);
  output.log.assign(logSize, '\0');
  nvrtcGetProgramLog(program.handle, output.log.data());
  while (!output.log.empty() && output.log.back() == '\0')
    output.log.pop_back();
  output.ok = compiled == NVRTC_SUCCESS;
  if (!output.ok)
    return output;
  size_t ptxSize = 0;
  if (nvrtcGetPTXSize(program.handle, &ptxSize) == NVRTC_SUCCESS && ptxSize > 1) {
    output.ptx.resize(ptxSize);
    nvrtcGetPTX(program.handle, output.ptx.data());
    output.ptx.pop_back(); // NUL
  }
  size_t cubinSize = 0;
  if (options.arch.starts_with("sm_") &&
      nvrtcGetCUBINSize(program.handle, &cubinSize) == NVRTC_SUCCESS && cubinSize > 0) {
    output.cubin.resize(cubinSize);
    nvrtcGetCUBIN(program.handle, output.cubin.data());
  }
  return output;
}

/// An Output as bytes, for the pipe from the child that compiled it, and back.
std::string encode(const Output &output) {
  return ByteWriter()
      .put<std::uint8_t>(output.ok)
      .sized(output.log)
      .sized(output.ptx)
      .sized(output.cubin)
      .takeString();
}

Output decode(std::string_view bytes) {
  ByteReader<std::runtime_error> reader(bytes, "nvrtc: the compiling child's output");
  Output output;
  output.ok = reader.get<std::uint8_t>() == 1;
  for (std::string *field : {&output.log, &output.ptx, &output.cubin})
    *field = reader.sized();
  reader.expectEnd();
  return output;
}

/// Moves where this process's next allocations land by a random amount, with a heap block and
/// a mapping of random sizes that live until it exits: whether NVRTC 13.0 crashes depends on
/// where its allocations land (a kernel that crashed it in 16 of 96 forked children did so in 3
/// of 96 after this).
void shiftAllocations() {
  std::random_device random;
  volatile char *block = static_cast<char *>(std::malloc(16 + random() % 65536));
  if (block)
    block[0] = 1;
  ::mmap(nullptr, 4096 * (1 + random() % 4096), PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

/// Children tried before a crashing compile is reported as a failure.
constexpr int kAttempts = 3;
} // namespace

Result compile(std::string_view source, std::string_view fileName, const Options &options,
               std::span<const Header> headers) {
  auto start = std::chrono::steady_clock::now();
  std::optional<Output> output;
  std::string crashes;
  for (int attempt = 1; attempt <= kAttempts && !output; ++attempt) {
    const ChildOutcome child = runInChild([&] {
      shiftAllocations();
      return encode(compileHere(source, fileName, options, headers));
    });
    if (child.status == ChildOutcome::Status::Returned)
      output = decode(child.output);
    else if (child.status == ChildOutcome::Status::Unavailable)
      output = compileHere(source, fileName, options, headers); // here, unprotected
    else
      crashes += "\n  attempt " + std::to_string(attempt) + ": " + child.reason;
  }
  Result result;
  if (output) {
    result.ok = output->ok;
    result.log = annotateLog(output->log, source, fileName);
    result.kernels = parsePtxasReport(output->log);
    result.ptx = std::move(output->ptx);
    result.cubin = std::move(output->cubin);
  } else {
    result.log = "NVRTC crashed compiling " + std::string(fileName) + ", in each of " +
                 std::to_string(kAttempts) + " child processes:" + crashes + "\n";
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

} // namespace mkc::nvrtc
