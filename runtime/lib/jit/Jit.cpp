//===- Jit.cpp - tile programs compiled and loaded at run time ------------===//

#include "mk/runtime/jit/Jit.h"

#include "mk/IR/MkOps.h"
#include "mk/Pipeline.h"
#include "mk/Target/DeviceHeaders.h"
#include "mk/runtime/support/Log.h"
#include "mk/runtime/support/UniqueFd.h"

#include "mk/abi.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/SourceMgr.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <nvrtc.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <span>
#include <system_error>
#include <utility>

namespace mkc {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double millisecondsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

std::string hex(std::span<const uint8_t> bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string text;
  text.reserve(2 * bytes.size());
  for (uint8_t byte : bytes) {
    text += digits[byte >> 4];
    text += digits[byte & 15];
  }
  return text;
}

std::array<uint8_t, 32> sha256(std::string_view bytes) {
  return llvm::SHA256::hash(
      llvm::ArrayRef(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size()));
}

//===----------------------------------------------------------------------===//
// The key
//===----------------------------------------------------------------------===//

/// Bumped whenever the entry layout or what the key covers changes: old entries are then
/// never looked up again.
constexpr uint64_t cacheFormat = 1;

/// NVRTC's version and its library's file name, which carries the patch release
/// (libnvrtc.so.13.0.88): code generation changes between patch releases too.
const std::string &nvrtcIdentity() {
  static const std::string identity = [] {
    std::string text = nvrtc::version();
    Dl_info library;
    if (dladdr(reinterpret_cast<void *>(&nvrtcVersion), &library) && library.dli_fname) {
      std::error_code error;
      fs::path file = fs::canonical(library.dli_fname, error);
      text += " " + (error ? fs::path(library.dli_fname) : file).filename().string();
    }
    return text;
  }();
  return identity;
}

/// CUDA_VERSION as `dir`/cuda.h defines it, or "" where there is none: a toolkit upgraded in
/// place keeps its include path but changes the headers kernels include.
std::string cudaHeadersVersion(const std::string &dir) {
  std::ifstream header(fs::path(dir) / "cuda.h");
  constexpr std::string_view define = "#define CUDA_VERSION ";
  for (std::string line; std::getline(header, line);)
    if (line.starts_with(define))
      return line.substr(define.size());
  return "";
}

std::string cacheKey(std::string_view cuda, const nvrtc::Options &options) {
  llvm::SHA256 hash;
  // Each field length-prefixed, so that no two different field lists hash the same bytes.
  auto field = [&](std::string_view name, std::string_view value) {
    hash.update(fmt::format("{}:{}:", name, value.size()));
    hash.update(llvm::StringRef(value.data(), value.size()));
  };
  field("format", std::to_string(cacheFormat));
  field("abi", std::to_string(MK_ABI_VERSION));
  field("nvrtc", nvrtcIdentity());
  // The flags name the architecture and the include directories.
  for (const std::string &flag : nvrtc::flags(options))
    field("flag", flag);
  for (const std::string &dir : options.includeDirs)
    field("cuda-headers", cudaHeadersVersion(dir));
  for (const nvrtc::Header &header : deviceHeaders()) {
    field("header", header.name);
    field("contents", header.contents);
  }
  field("source", cuda);
  return hex(hash.final());
}

//===----------------------------------------------------------------------===//
// Files
//===----------------------------------------------------------------------===//

std::system_error systemError(const std::string &what) {
  return std::system_error(errno, std::generic_category(), what);
}

/// The contents of `path`, or nothing if it does not exist.
std::optional<std::string> readFile(const fs::path &path) {
  UniqueFd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!file) {
    if (errno == ENOENT)
      return std::nullopt;
    throw systemError("open " + path.string());
  }
  struct stat status;
  if (::fstat(file.get(), &status) != 0)
    throw systemError("fstat " + path.string());
  std::string contents(static_cast<size_t>(status.st_size), '\0');
  size_t done = 0;
  while (done < contents.size()) {
    ssize_t n = ::read(file.get(), contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      throw systemError("read " + path.string());
    if (n == 0)
      break;
    done += static_cast<size_t>(n);
  }
  contents.resize(done);
  return contents;
}

/// Creates `path` with `contents` and flushes both to the disk.
void writeFileDurably(const fs::path &path, std::string_view contents) {
  UniqueFd file(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!file)
    throw systemError("create " + path.string());
  while (!contents.empty()) {
    ssize_t n = ::write(file.get(), contents.data(), contents.size());
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      throw systemError("write " + path.string());
    contents.remove_prefix(static_cast<size_t>(n));
  }
  if (::fsync(file.get()) != 0)
    throw systemError("fsync " + path.string());
  if (::close(file.release()) != 0)
    throw systemError("close " + path.string());
}

/// Flushes `directory`'s entries (files created or renamed in it) to the disk.
void syncDirectory(const fs::path &directory) {
  UniqueFd dir(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir || ::fsync(dir.get()) != 0)
    throw systemError("fsync " + directory.string());
}

/// A new, empty directory with a unique name inside `parent` (on its file system, so that
/// renames between them are atomic).
fs::path makeTemporaryDirectory(const fs::path &parent) {
  std::string path = (parent / ".tmp-XXXXXX").string();
  if (!::mkdtemp(path.data()))
    throw systemError("mkdtemp " + path);
  return path;
}

//===----------------------------------------------------------------------===//
// The on-disk cache
//===----------------------------------------------------------------------===//

/// The start of an entry's cubin file; the cubin follows it.
struct EntryHeader {
  std::array<char, 8> magic;
  uint64_t format;
  std::array<char, 64> key;
  uint64_t payloadBytes;
  std::array<uint8_t, 32> payloadSha256;
};
static_assert(sizeof(EntryHeader) == 120 && std::is_trivially_copyable_v<EntryHeader>,
              "EntryHeader has no padding");
static_assert(std::endian::native == std::endian::little, "entries are little-endian");

constexpr std::array<char, 8> entryMagic = {'m', 'k', 'c', 'c', 'u', 'b', 'i', 'n'};

std::string encodeEntry(const std::string &key, std::string_view cubin) {
  EntryHeader header{entryMagic, cacheFormat, {}, cubin.size(), sha256(cubin)};
  std::memcpy(header.key.data(), key.data(), header.key.size());
  std::string bytes(reinterpret_cast<const char *>(&header), sizeof header);
  bytes += cubin;
  return bytes;
}

/// Why `bytes` is not a valid entry for `key`, or "" if it is.
std::string entryProblem(std::string_view bytes, const std::string &key) {
  EntryHeader header;
  if (bytes.size() < sizeof header)
    return "truncated header: " + std::to_string(bytes.size()) + " bytes";
  std::memcpy(&header, bytes.data(), sizeof header);
  if (header.magic != entryMagic)
    return "bad magic";
  if (header.format != cacheFormat)
    return "format " + std::to_string(header.format) + ", expected " + std::to_string(cacheFormat);
  if (std::string_view(header.key.data(), header.key.size()) != key)
    return "header names another key";
  std::string_view payload = bytes.substr(sizeof header);
  if (payload.size() != header.payloadBytes)
    return "payload of " + std::to_string(payload.size()) + " bytes, header says " +
           std::to_string(header.payloadBytes);
  if (sha256(payload) != header.payloadSha256)
    return "payload checksum mismatch";
  return "";
}

enum class Lookup { hit, absent, corrupt };

class DiskCache {
public:
  explicit DiskCache(const fs::path &directory) : directory_(directory) {}

  /// Reads `key`'s cubin into `cubin`; a corrupt entry is logged and removed.
  Lookup lookup(const std::string &key, std::string &cubin) const {
    fs::path entry = directory_ / key;
    std::optional<std::string> bytes = readFile(entry / "cubin");
    std::string problem;
    if (!bytes) {
      // Entries appear whole: a directory without a cubin was damaged by hand.
      if (!fs::exists(entry))
        return Lookup::absent;
      problem = "no cubin file";
    } else {
      problem = entryProblem(*bytes, key);
    }
    if (!problem.empty()) {
      log::warning("jit: cache entry {} is corrupt ({}); removing and rebuilding it",
                   entry.string(), problem);
      discard(entry);
      return Lookup::corrupt;
    }
    cubin = bytes->substr(sizeof(EntryHeader));
    return Lookup::hit;
  }

  /// Stores `cubin` under `key`, with the source and NVRTC's log; returns the cubin the cache
  /// holds for `key` afterwards: that of whichever process stored it first.
  std::string store(const std::string &key, const std::string &cubin, std::string_view source,
                    std::string_view log) const {
    fs::create_directories(directory_);
    fs::path temporary = makeTemporaryDirectory(directory_);
    try {
      writeFileDurably(temporary / "cubin", encodeEntry(key, cubin));
      writeFileDurably(temporary / "kernel.cu", source);
      writeFileDurably(temporary / "nvrtc.log", log);
      syncDirectory(temporary);
      fs::path entry = directory_ / key;
      if (::rename(temporary.c_str(), entry.c_str()) == 0) {
        syncDirectory(directory_);
        return cubin;
      }
      if (errno != EEXIST && errno != ENOTEMPTY)
        throw systemError("rename " + temporary.string() + " to " + entry.string());
    } catch (...) {
      std::error_code ignored;
      fs::remove_all(temporary, ignored);
      throw;
    }
    // Another process stored this key first.
    fs::remove_all(temporary);
    std::string winner;
    return lookup(key, winner) == Lookup::hit ? winner : cubin;
  }

private:
  /// Removes `entry` by first renaming it onto an empty temporary directory (which rename
  /// replaces), so that no process ever sees it half removed.
  void discard(const fs::path &entry) const {
    fs::path trash = makeTemporaryDirectory(directory_);
    if (::rename(entry.c_str(), trash.c_str()) != 0 && errno != ENOENT)
      log::warning("jit: cannot remove {}: {}", entry.string(), std::strerror(errno));
    fs::remove_all(trash);
  }

  fs::path directory_;
};

} // namespace

//===----------------------------------------------------------------------===//
// From a tile program to CUDA C++
//===----------------------------------------------------------------------===//

TileProgram TileProgram::fromFile(const fs::path &path) {
  try {
    if (std::optional<std::string> text = readFile(path))
      return {std::move(*text), path.string()};
    throw JitError("cannot read tile program " + path.string() + ": no such file");
  } catch (const std::system_error &error) {
    throw JitError("cannot read tile program " + path.string() + ": " + error.what());
  }
}

void setCompilerOptions(JitOptions &options, const std::string &text) {
  if (std::optional<std::string> error = mlir::mk::parsePipelineOptions(text, options.pipeline))
    throw JitError("compiler options: " + *error);
}

KernelSource generateKernel(const TileProgram &program, const JitOptions &options) {
  Clock::time_point start = Clock::now();
  mlir::DialectRegistry registry;
  mlir::mk::registerPipelineDialects(registry);
  // One program per module: the pass manager would have nothing to run in parallel.
  mlir::MLIRContext context(registry, mlir::MLIRContext::Threading::DISABLED);
  context.printOpOnDiagnostic(false);
  llvm::SourceMgr sourceMgr;
  std::string diagnostics;
  llvm::raw_string_ostream diagnosticStream(diagnostics);
  mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &context, diagnosticStream);
  sourceMgr.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBuffer(program.text, program.name),
                               llvm::SMLoc());

  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(sourceMgr, &context);
  if (!module)
    throw JitError("cannot parse " + program.name + ":\n" + diagnostics);
  auto programs = llvm::to_vector(module->getOps<mlir::mk::ProgramOp>());
  if (programs.size() != 1)
    throw JitError(program.name + " holds " + std::to_string(programs.size()) +
                   " mk.program ops; the JIT compiles one per module");
  KernelSource source;
  source.kernel = programs.front().getSymName().str();

  mlir::PassManager pm(&context);
  mlir::mk::buildSchedulePipeline(pm, options.pipeline);
  mlir::mk::buildEmitCPipeline(pm, options.pipeline);
  llvm::raw_string_ostream cuda(source.cuda);
  if (mlir::failed(pm.run(*module)) || mlir::failed(mlir::mk::printCuda(*module, cuda)))
    throw JitError("cannot compile " + program.name + ":\n" + diagnostics);
  if (!diagnostics.empty()) // remarks, e.g. the SM split explained
    log::info("jit: {}:\n{}", source.kernel, diagnostics);

  source.key = cacheKey(source.cuda, options.nvrtc);
  log::debug("jit: {}: passes and C++ in {:.1f} ms, key {}", source.kernel,
             millisecondsSince(start), source.key);
  return source;
}

//===----------------------------------------------------------------------===//
// Loading
//===----------------------------------------------------------------------===//

namespace {
/// The calling thread's current context; throws JitError when there is none.
CUcontext currentContext(const cuda::Driver &driver, const std::string &kernel) {
  CUcontext context = nullptr;
  MK_CU_CHECK(driver, cuCtxGetCurrent(&context));
  if (!context)
    throw JitError("cannot load " + kernel +
                   ": no current CUDA context (make one current, e.g. mkc::cuda::PrimaryContext)");
  return context;
}
} // namespace

LoadedKernel::LoadedKernel(const cuda::Driver &driver, const std::string &cubin,
                           const std::string &kernel)
    : driver_(driver), name_(kernel), context_(currentContext(driver, kernel)) {
  Clock::time_point start = Clock::now();
  driver_.check(driver_.cuModuleLoadData(&module_, cubin.data()),
                ("cuModuleLoadData(" + kernel + ")").c_str());
  try {
    driver_.check(driver_.cuModuleGetFunction(&function_, module_, kernel.c_str()),
                  ("cuModuleGetFunction(" + kernel + ")").c_str());
    std::string manifest = kernel + "_manifest";
    CUdeviceptr address;
    size_t size = 0;
    CUresult found = driver_.cuModuleGetGlobal(&address, &size, module_, manifest.c_str());
    if (found == CUDA_ERROR_NOT_FOUND)
      throw JitError(kernel + " has no " + manifest +
                     ": it was generated for an ABI version before " + "this runtime's " +
                     std::to_string(MK_ABI_VERSION) +
                     " (mk/abi.h): recompile it with this runtime's mkc");
    driver_.check(found, ("cuModuleGetGlobal(" + manifest + ")").c_str());
    std::string bytes(size, '\0');
    MK_CU_CHECK(driver_, cuMemcpyDtoH(bytes.data(), address, size));
    launch_ = decodeManifest(kernel, bytes);
    if (!launch_.engineCopies.empty()) {
      std::string advance = kernel + "_advance_epoch";
      driver_.check(driver_.cuModuleGetFunction(&advanceEpoch_, module_, advance.c_str()),
                    ("cuModuleGetFunction(" + advance + ")").c_str());
    }

    CUdevice device;
    int optin = 0, staticSmem = 0;
    MK_CU_CHECK(driver_, cuCtxGetDevice(&device));
    MK_CU_CHECK(driver_,
                cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                     device));
    // The device library's static shared memory (mk::kStaticSmemBytes) counts against the same.
    MK_CU_CHECK(driver_,
                cuFuncGetAttribute(&staticSmem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function_));
    if (launch_.dynamicSmemBytes + staticSmem > optin)
      throw JitError(kernel + " needs " + std::to_string(launch_.dynamicSmemBytes + staticSmem) +
                     " bytes of shared memory per CTA; this GPU allows " + std::to_string(optin));
    MK_CU_CHECK(driver_,
                cuFuncSetAttribute(function_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                   launch_.dynamicSmemBytes));
  } catch (...) {
    driver_.cuModuleUnload(module_);
    throw;
  }
  log::debug("jit: {}: loaded in {:.1f} ms: grid {}, {} flag words, {} bytes of shared memory",
             kernel, millisecondsSince(start), launch_.grid, launch_.flagWords,
             launch_.dynamicSmemBytes);
}

LoadedKernel::~LoadedKernel() {
  // A module is unloaded from the current context; this thread may have another one current.
  if (driver_.cuCtxPushCurrent(context_) != CUDA_SUCCESS)
    return; // the context is gone, and its modules with it
  driver_.cuModuleUnload(module_);
  CUcontext popped;
  driver_.cuCtxPopCurrent(&popped);
}

namespace {
/// The NUL-padded name in `field`; empty if it has no NUL.
template <std::size_t N> std::string paddedName(const char (&field)[N]) {
  std::size_t length = ::strnlen(field, N);
  return length < N ? std::string(field, length) : std::string();
}
} // namespace

LaunchParameters decodeManifest(const std::string &kernel, std::string_view bytes) {
  auto malformed = [&](const std::string &what) {
    return JitError(kernel + "_manifest " + what + " (mk/abi.h's mk_kernel_manifest)");
  };
  mk_u32 abi = 0;
  if (bytes.size() >= sizeof abi)
    std::memcpy(&abi, bytes.data(), sizeof abi);
  if (abi != MK_ABI_VERSION)
    throw JitError(kernel + " was generated for ABI version " + std::to_string(abi) +
                   ", this runtime implements version " + std::to_string(MK_ABI_VERSION) +
                   " (mk/abi.h): recompile it with this runtime's mkc");
  mk_kernel_manifest m;
  if (bytes.size() < sizeof m)
    throw malformed("has " + std::to_string(bytes.size()) + " bytes, fewer than its " +
                    std::to_string(sizeof m));
  std::memcpy(&m, bytes.data(), sizeof m);
  if (m.tensors > MK_MAX_TENSORS || m.arguments > m.tensors || m.roles > MK_MAX_ROLES ||
      m.tensor_map_count > MK_MAX_TENSOR_MAPS)
    throw malformed("counts more tensors, arguments, roles or tensor maps than a kernel has");
  if (bytes.size() != sizeof m + std::size_t{m.engine_copy_count} * sizeof(mk_engine_copy))
    throw malformed("does not hold its " + std::to_string(m.engine_copy_count) + " engine copies");

  LaunchParameters launch;
  launch.grid = static_cast<int>(m.grid);
  launch.flagWords = static_cast<int>(m.flag_words);
  launch.dynamicSmemBytes = static_cast<int>(m.dynamic_smem_bytes);
  launch.arguments = static_cast<int>(m.arguments);
  launch.tensorBytes.assign(m.tensor_bytes, m.tensor_bytes + m.tensors);
  launch.symmetricTensors = m.symmetric_tensors;
  launch.routedExperts = static_cast<int>(m.routed_experts);
  for (const mk_argument_type &argument : std::span(m.argument_types, m.arguments)) {
    TensorType type{paddedName(argument.element), {}};
    if (type.element.empty() || argument.rank < 1 || argument.rank > MK_MAX_TENSOR_RANK)
      throw malformed("describes an argument without an element type or with no or too many dims");
    // A dim may be empty: a rank's shard of an extent smaller than the ranks.
    for (mk_u64 extent : std::span(argument.extents, argument.rank)) {
      if (extent > static_cast<mk_u64>(std::numeric_limits<long long>::max()))
        throw malformed("describes an argument with a dim too large");
      type.extents.push_back(static_cast<long long>(extent));
    }
    launch.argumentTypes.push_back(std::move(type));
  }
  for (const mk_role_ctas &role : std::span(m.sm_split, m.roles)) {
    if (role.flags & MK_ROLE_POOL)
      launch.poolRole = launch.smSplit.roles.size();
    launch.smSplit.roles.push_back({paddedName(role.kind), role.ctas});
  }
  if (std::optional<std::string> error = launch.smSplit.checkRoles())
    throw malformed("has an SM split mkc would not make: " + *error);
  launch.tensorMaps.assign(m.tensor_maps, m.tensor_maps + m.tensor_map_count);
  for (const mk_tensor_map_spec &spec : launch.tensorMaps)
    if (spec.tensor >= launch.tensorBytes.size() ||
        (spec.gpu != MK_MAP_LOCAL && spec.gpu >= MK_MAX_GPUS_PER_NODE))
      throw malformed("has a tensor map of a tensor or GPU the kernel does not have");
  launch.engineCopies.resize(m.engine_copy_count);
  if (m.engine_copy_count)
    std::memcpy(launch.engineCopies.data(), bytes.data() + sizeof m,
                launch.engineCopies.size() * sizeof(mk_engine_copy));
  for (const mk_engine_copy &copy : launch.engineCopies)
    if (copy.tensor >= launch.tensorBytes.size() || copy.from_gpu >= MK_MAX_GPUS_PER_NODE ||
        copy.to_gpu >= MK_MAX_GPUS_PER_NODE || copy.from_gpu == copy.to_gpu ||
        copy.wait_flag >= static_cast<unsigned>(launch.flagWords) ||
        copy.signal_flag >= static_cast<unsigned>(launch.flagWords) || copy.width == 0 ||
        copy.height == 0 || copy.width > copy.pitch ||
        copy.offset + (copy.height - 1) * copy.pitch + copy.width >
            static_cast<unsigned long long>(launch.tensorBytes[copy.tensor]))
      throw malformed("has an engine copy of a tensor, GPU, flag or range the kernel does not "
                      "have");
  return launch;
}

//===----------------------------------------------------------------------===//
// The JIT
//===----------------------------------------------------------------------===//

Jit::Jit(fs::path cacheDirectory) : cacheDirectory_(std::move(cacheDirectory)) {}

fs::path Jit::defaultCacheDirectory() {
  auto variable = [](const char *name) -> std::string {
    const char *value = std::getenv(name);
    return value ? value : "";
  };
  if (std::string dir = variable("MKC_CACHE_DIR"); !dir.empty())
    return dir;
  // The XDG base directory specification says to ignore relative paths.
  if (fs::path xdg = variable("XDG_CACHE_HOME"); xdg.is_absolute())
    return xdg / "mkc";
  std::string home = variable("HOME");
  if (home.empty())
    if (const passwd *user = ::getpwuid(::getuid()); user && user->pw_dir)
      home = user->pw_dir;
  return fs::path(home) / ".cache" / "mkc";
}

std::shared_ptr<const CompiledKernel> Jit::compile(const TileProgram &program,
                                                   const JitOptions &options) {
  if (!options.nvrtc.arch.starts_with("sm_"))
    throw JitError("the JIT needs a cubin: --arch=" + options.nvrtc.arch +
                   " gives only PTX; use an sm_XX");
  KernelSource source = generateKernel(program, options);
  std::string key = source.key;
  std::promise<std::shared_ptr<const CompiledKernel>> promise;
  std::shared_future<std::shared_ptr<const CompiledKernel>> known;
  {
    std::lock_guard lock(mutex_);
    auto [slot, inserted] = compiled_.try_emplace(key, promise.get_future().share());
    if (!inserted)
      known = slot->second;
  }
  if (known.valid()) {
    ++memoryHits_;
    log::debug("jit: {}: in memory", source.kernel);
    return known.get(); // waits while another thread builds it
  }
  try {
    std::shared_ptr<const CompiledKernel> kernel = build(std::move(source), options.nvrtc);
    promise.set_value(kernel);
    return kernel;
  } catch (...) {
    // Waiting threads get the error; a later call tries again.
    promise.set_exception(std::current_exception());
    std::lock_guard lock(mutex_);
    compiled_.erase(key);
    throw;
  }
}

std::shared_ptr<const CompiledKernel> Jit::build(KernelSource source,
                                                 const nvrtc::Options &options) {
  Clock::time_point start = Clock::now();
  auto kernel = std::make_shared<CompiledKernel>();
  DiskCache disk(cacheDirectory_);
  try {
    switch (disk.lookup(source.key, kernel->cubin)) {
    case Lookup::hit:
      ++diskHits_;
      log::debug("jit: {}: read from {} in {:.1f} ms", source.kernel,
                 (cacheDirectory_ / source.key).string(), millisecondsSince(start));
      kernel->source = std::move(source);
      return kernel;
    case Lookup::corrupt:
      ++corruptEntries_;
      break;
    case Lookup::absent:
      break;
    }
  } catch (const std::exception &error) {
    log::warning("jit: cannot read the cache in {}: {}", cacheDirectory_.string(), error.what());
  }

  nvrtc::Result result =
      nvrtc::compile(source.cuda, source.kernel + ".cu", options, deviceHeaders());
  ++nvrtcCompiles_;
  if (!result.ok)
    throw JitError("NVRTC cannot compile the CUDA C++ generated for " + source.kernel + ":\n" +
                   result.log);
  if (log::enabled(log::Level::debug)) {
    std::string resources;
    for (const nvrtc::KernelResources &kernel : result.kernels)
      resources += fmt::format("; {}: {} registers, {} bytes spilled", kernel.name,
                               kernel.registers, kernel.spillStoreBytes + kernel.spillLoadBytes);
    log::debug("jit: {}: NVRTC in {:.2f} s{}", source.kernel, result.seconds, resources);
  }

  Clock::time_point storing = Clock::now();
  try {
    kernel->cubin = disk.store(source.key, result.cubin, source.cuda, result.log);
    log::debug("jit: {}: stored in {} in {:.1f} ms", source.kernel,
               (cacheDirectory_ / source.key).string(), millisecondsSince(storing));
  } catch (const std::exception &error) {
    log::warning("jit: cannot store {} in the cache in {}: {}", source.kernel,
                 cacheDirectory_.string(), error.what());
    kernel->cubin = std::move(result.cubin);
  }
  kernel->source = std::move(source);
  return kernel;
}

std::shared_ptr<const LoadedKernel> Jit::load(const CompiledKernel &kernel) {
  const cuda::Driver &driver = cuda::Driver::get();
  if (!driver.available())
    throw JitError("cannot load " + kernel.source.kernel + ": " + driver.unavailableReason());
  unsigned long long contextId = 0;
  MK_CU_CHECK(driver, cuCtxGetId(currentContext(driver, kernel.source.kernel), &contextId));

  std::lock_guard lock(mutex_);
  std::pair<std::string, unsigned long long> where{kernel.source.key, contextId};
  if (auto found = loaded_.find(where); found != loaded_.end())
    return found->second;
  auto loaded = std::make_shared<const LoadedKernel>(driver, kernel.cubin, kernel.source.kernel);
  ++modulesLoaded_;
  loaded_.emplace(std::move(where), loaded);
  return loaded;
}

JitStats Jit::stats() const {
  return {nvrtcCompiles_.load(), diskHits_.load(), memoryHits_.load(), corruptEntries_.load(),
          modulesLoaded_.load()};
}

} // namespace mkc
