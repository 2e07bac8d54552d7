// The JIT without a GPU: keys, the on-disk cache across processes (a warm process gets the cubin
// without NVRTC; racing processes leave one entry), damaged entries rebuilt, the cache's place.
// Other processes are mk-jit-compile (JitCompile.cpp) run with the cache in MKC_CACHE_DIR.

#include "mk/runtime/jit/Jit.h"

#include <catch2/catch.hpp>

#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

namespace fs = std::filesystem;

namespace {

constexpr const char *smallShapes = "M=256,N=512,K=256";
/// An entry's cubin file starts with a header of this size (magic, format, key, size, SHA-256).
constexpr size_t entryHeaderBytes = 120;

/// A fresh directory under the build tree, removed with its contents when the test ends.
class Scratch {
public:
  Scratch() {
    fs::create_directories(MKC_JIT_SCRATCH);
    std::string path = std::string(MKC_JIT_SCRATCH) + "/test-XXXXXX";
    REQUIRE(::mkdtemp(path.data()));
    path_ = path;
  }
  ~Scratch() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  fs::path cache() const { return path_ / "cache"; }

private:
  fs::path path_;
};

mkc::TileProgram gemmAllReduce() {
  return mkc::TileProgram::fromFile(MKC_LIB_DIR "/gemm_allreduce.mlir");
}

mkc::JitOptions options(const std::string &topology = "1x2",
                        const std::string &shapes = smallShapes) {
  mkc::JitOptions options;
  options.pipeline.topology = topology;
  std::istringstream list(shapes);
  for (std::string shape; std::getline(list, shape, ',');)
    options.pipeline.shapes.push_back(shape);
  return options;
}

/// The names in `directory`, sorted.
std::vector<std::string> namesIn(const fs::path &directory) {
  std::vector<std::string> names;
  for (const fs::directory_entry &entry : fs::directory_iterator(directory))
    names.push_back(entry.path().filename().string());
  std::ranges::sort(names);
  return names;
}

std::string readFile(const fs::path &path) {
  std::ifstream file(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(file), {}};
}

/// An mk-jit-compile process compiling lib/gemm_allreduce.mlir for 1x2 with its cache in `cache`
/// and debug logging; started by the constructor, so that several run at once.
class CompileProcess {
public:
  explicit CompileProcess(const fs::path &cache) {
    std::string command = "MKC_CACHE_DIR='" + cache.string() + "' MKC_LOG_LEVEL=debug '" +
                          MKC_JIT_COMPILE + "' '" MKC_LIB_DIR "/gemm_allreduce.mlir' 1x2 " +
                          smallShapes + " 2>&1";
    pipe_ = ::popen(command.c_str(), "r");
    REQUIRE(pipe_);
  }

  struct Result {
    int exitCode = -1;
    /// Standard output and error.
    std::string output;
    /// The fields of its `result:` line (key, cubin-sha256, nvrtc, disk, memory, corrupt).
    std::map<std::string, std::string> fields;
    uint64_t count(const std::string &name) const { return std::stoull(fields.at(name)); }
  };

  Result finish() {
    Result result;
    char buffer[4096];
    for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe_)) > 0;)
      result.output.append(buffer, n);
    int status = ::pclose(std::exchange(pipe_, nullptr));
    result.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::istringstream lines(result.output);
    for (std::string line; std::getline(lines, line);) {
      if (!line.starts_with("result: "))
        continue;
      std::istringstream words(line.substr(8));
      for (std::string word; words >> word;)
        if (size_t equals = word.find('='); equals != std::string::npos)
          result.fields[word.substr(0, equals)] = word.substr(equals + 1);
    }
    INFO(result.output);
    REQUIRE(result.exitCode == 0);
    REQUIRE(result.fields.size() == 6);
    return result;
  }

  ~CompileProcess() {
    if (pipe_)
      ::pclose(pipe_);
  }

private:
  FILE *pipe_ = nullptr;
};

/// Sets or unsets an environment variable for the scope, then restores it.
class ScopedVariable {
public:
  ScopedVariable(const char *name, const char *value) : name_(name) {
    if (const char *old = std::getenv(name))
      old_ = old;
    set(value);
  }
  ~ScopedVariable() { set(old_ ? old_->c_str() : nullptr); }

private:
  void set(const char *value) {
    if (value)
      ::setenv(name_, value, 1);
    else
      ::unsetenv(name_);
  }

  const char *name_;
  std::optional<std::string> old_;
};

} // namespace

TEST_CASE("jit: a cold compile fills the cache, which a warm process reads without NVRTC") {
  Scratch scratch;
  mkc::Jit jit(scratch.cache());
  std::shared_ptr<const mkc::CompiledKernel> kernel = jit.compile(gemmAllReduce(), options());
  CHECK(jit.stats().nvrtcCompiles == 1);
  CHECK(jit.stats().diskHits == 0);
  CHECK(kernel->source.kernel == "gemm_allreduce");
  REQUIRE(kernel->cubin.size() > 0);

  // One entry named by the key: the cubin behind its header, the source and the log beside it.
  REQUIRE(namesIn(scratch.cache()) == std::vector<std::string>{kernel->source.key});
  fs::path entry = scratch.cache() / kernel->source.key;
  CHECK(namesIn(entry) == std::vector<std::string>{"cubin", "kernel.cu", "nvrtc.log"});
  CHECK(readFile(entry / "cubin").substr(entryHeaderBytes) == kernel->cubin);
  CHECK(readFile(entry / "kernel.cu") == kernel->source.cuda);

  // The same process asks again: memory.
  CHECK(jit.compile(gemmAllReduce(), options()) == kernel);
  CHECK(jit.stats().memoryHits == 1);
  CHECK(jit.stats().nvrtcCompiles == 1);

  // Another process: the disk.
  CompileProcess::Result warm = CompileProcess(scratch.cache()).finish();
  CHECK(warm.count("nvrtc") == 0);
  CHECK(warm.count("disk") == 1);
  CHECK(warm.fields.at("key") == kernel->source.key);
  CompileProcess::Result again = CompileProcess(scratch.cache()).finish();
  CHECK(again.fields.at("cubin-sha256") == warm.fields.at("cubin-sha256"));
  // Its compile and cache times are logged at debug level.
  CHECK(warm.output.find("debug: jit: gemm_allreduce: passes and C++ in") != std::string::npos);
  CHECK(warm.output.find("debug: jit: gemm_allreduce: read from") != std::string::npos);

  // Loading needs a driver and a current context: none here (the GPU test loads it).
  CHECK_THROWS_WITH(jit.load(*kernel), Catch::Contains("cannot load gemm_allreduce: "));
}

TEST_CASE("jit: whatever changes the cubin changes the key") {
  mkc::TileProgram program = gemmAllReduce();
  std::string base = mkc::generateKernel(program, options()).key;
  CHECK(base.size() == 64);
  CHECK(base.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(mkc::generateKernel(program, options()).key == base);

  std::vector<mkc::JitOptions> variants(5, options());
  variants[0] = options("2x1");
  variants[1] = options("1x2", "M=256,N=512,K=512");
  variants[2].nvrtc.arch = "sm_100a";
  variants[3].nvrtc.extraOptions = {"-lineinfo"};
  variants[4].nvrtc.includeDirs = {"/nonexistent/cuda/include"};
  std::vector<std::string> keys = {base};
  for (const mkc::JitOptions &variant : variants)
    keys.push_back(mkc::generateKernel(program, variant).key);
  std::ranges::sort(keys);
  CHECK(std::ranges::adjacent_find(keys) == keys.end());
}

TEST_CASE("jit: the debugging options (MKC_NVRTC_OPTIONS) compile: line info, watched barriers") {
  Scratch scratch;
  mkc::Jit jit(scratch.cache());
  mkc::JitOptions debugging = options();
  debugging.nvrtc.extraOptions = {"-lineinfo", "-DMK_WATCH_BARRIERS=5"};
  std::shared_ptr<const mkc::CompiledKernel> plain = jit.compile(gemmAllReduce(), options());
  std::shared_ptr<const mkc::CompiledKernel> watched = jit.compile(gemmAllReduce(), debugging);
  REQUIRE(watched->cubin.size() > 0);
  CHECK(watched->source.key != plain->source.key);
  CHECK(watched->cubin != plain->cubin);
  // The watch's message is in the cubin; the plain kernel has none.
  CHECK(watched->cubin.find("MK_WATCH_BARRIERS") != std::string::npos);
  CHECK(plain->cubin.find("MK_WATCH_BARRIERS") == std::string::npos);
}

TEST_CASE("jit: a truncated or corrupted entry is detected, removed and rebuilt") {
  Scratch scratch;
  std::shared_ptr<const mkc::CompiledKernel> original =
      mkc::Jit(scratch.cache()).compile(gemmAllReduce(), options());
  fs::path cubin = scratch.cache() / original->source.key / "cubin";
  const size_t entryBytes = entryHeaderBytes + original->cubin.size();

  auto flipByte = [&](size_t offset) {
    std::string bytes = readFile(cubin);
    bytes[offset] ^= 0x20;
    std::ofstream(cubin, std::ios::binary | std::ios::trunc) << bytes;
  };
  struct Damage {
    const char *what;
    std::function<void()> apply;
  };
  const Damage damages[] = {
      {"payload truncated", [&] { fs::resize_file(cubin, entryBytes - 1000); }},
      {"header truncated", [&] { fs::resize_file(cubin, entryHeaderBytes / 2); }},
      {"payload byte flipped", [&] { flipByte(entryHeaderBytes + original->cubin.size() / 2); }},
      {"header byte flipped", [&] { flipByte(3); }},
      {"cubin file removed", [&] { fs::remove(cubin); }},
  };
  for (const Damage &damage : damages) {
    INFO(damage.what);
    damage.apply();
    mkc::Jit jit(scratch.cache());
    std::shared_ptr<const mkc::CompiledKernel> rebuilt = jit.compile(gemmAllReduce(), options());
    CHECK(jit.stats().corruptEntries == 1);
    CHECK(jit.stats().nvrtcCompiles == 1);
    CHECK(rebuilt->cubin == original->cubin);
    // Rebuilt in place: the next process reads it, and nothing else is left behind.
    CHECK(fs::file_size(cubin) == entryBytes);
    CHECK(namesIn(scratch.cache()) == std::vector<std::string>{original->source.key});
    mkc::Jit next(scratch.cache());
    CHECK(next.compile(gemmAllReduce(), options())->cubin == original->cubin);
    CHECK(next.stats().diskHits == 1);
  }
}

TEST_CASE("jit: processes racing on one key end with one entry and the same cubin") {
  Scratch scratch;
  std::vector<std::unique_ptr<CompileProcess>> racers;
  for (int i = 0; i < 8; ++i)
    racers.push_back(std::make_unique<CompileProcess>(scratch.cache()));
  std::vector<CompileProcess::Result> results;
  for (std::unique_ptr<CompileProcess> &racer : racers)
    results.push_back(racer->finish());

  uint64_t compiles = 0;
  for (const CompileProcess::Result &result : results) {
    CHECK(result.fields.at("key") == results.front().fields.at("key"));
    CHECK(result.fields.at("cubin-sha256") == results.front().fields.at("cubin-sha256"));
    CHECK(result.count("corrupt") == 0);
    compiles += result.count("nvrtc");
  }
  CHECK(compiles >= 1);
  // One entry, no temporary directory left behind, and it holds what every racer got.
  REQUIRE(namesIn(scratch.cache()) == std::vector<std::string>{results.front().fields.at("key")});
  CompileProcess::Result after = CompileProcess(scratch.cache()).finish();
  CHECK(after.count("disk") == 1);
  CHECK(after.fields.at("cubin-sha256") == results.front().fields.at("cubin-sha256"));
}

TEST_CASE("jit: threads asking for one key share one compilation") {
  Scratch scratch;
  mkc::Jit jit(scratch.cache());
  mkc::TileProgram program = gemmAllReduce();
  std::vector<std::shared_ptr<const mkc::CompiledKernel>> kernels(4);
  std::vector<std::thread> threads;
  for (size_t i = 1; i < kernels.size(); ++i)
    threads.emplace_back([&, i] { kernels[i] = jit.compile(program, options()); });
  kernels[0] = jit.compile(program, options());
  for (std::thread &thread : threads)
    thread.join();
  CHECK(jit.stats().nvrtcCompiles == 1);
  CHECK(jit.stats().memoryHits == 3);
  for (const std::shared_ptr<const mkc::CompiledKernel> &kernel : kernels)
    CHECK(kernel == kernels[0]);
}

TEST_CASE("jit: the cache is in MKC_CACHE_DIR, else $XDG_CACHE_HOME/mkc, else ~/.cache/mkc") {
  ScopedVariable home("HOME", "/home/someone");
  {
    ScopedVariable cache("MKC_CACHE_DIR", "/scratch/kernels");
    ScopedVariable xdg("XDG_CACHE_HOME", "/xdg");
    CHECK(mkc::Jit::defaultCacheDirectory() == "/scratch/kernels");
    CHECK(mkc::Jit().cacheDirectory() == "/scratch/kernels");
  }
  ScopedVariable cache("MKC_CACHE_DIR", nullptr);
  {
    ScopedVariable xdg("XDG_CACHE_HOME", "/xdg");
    CHECK(mkc::Jit::defaultCacheDirectory() == "/xdg/mkc");
  }
  {
    // The XDG specification: a relative path is ignored.
    ScopedVariable xdg("XDG_CACHE_HOME", "relative");
    CHECK(mkc::Jit::defaultCacheDirectory() == "/home/someone/.cache/mkc");
  }
  ScopedVariable xdg("XDG_CACHE_HOME", nullptr);
  CHECK(mkc::Jit::defaultCacheDirectory() == "/home/someone/.cache/mkc");
}

TEST_CASE("jit: programs and options that cannot compile say why, and nothing is cached") {
  Scratch scratch;
  mkc::Jit jit(scratch.cache());
  auto errorOf = [&](const mkc::TileProgram &program, const mkc::JitOptions &options) {
    try {
      jit.compile(program, options);
    } catch (const mkc::JitError &error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(errorOf({"mk.program @broken [", "broken.mlir"}, options()),
             Catch::Contains("cannot parse broken.mlir") && Catch::Contains("broken.mlir:1:"));
  // M = 0: extents are positive.
  CHECK_THAT(errorOf(gemmAllReduce(), options("1x4", "M=0,N=512,K=256")),
             Catch::Contains("cannot compile") && Catch::Contains("gemm_allreduce.mlir:"));
  mkc::JitOptions ptxOnly = options();
  ptxOnly.nvrtc.arch = "compute_90a";
  CHECK_THAT(errorOf(gemmAllReduce(), ptxOnly), Catch::Contains("needs a cubin"));
  CHECK_THAT(errorOf(mkc::TileProgram{"module {}", "empty.mlir"}, options()),
             Catch::Contains("empty.mlir holds 0 mk.program ops"));
  CHECK_THROWS_WITH(mkc::TileProgram::fromFile(scratch.cache() / "missing.mlir"),
                    Catch::Contains("missing.mlir: no such file"));
  CHECK(jit.stats().nvrtcCompiles == 0);
  CHECK_FALSE(fs::exists(scratch.cache()));
}

namespace {
/// A manifest of two arguments (bf16[3000,2304], f32[7]), one buffer and two roles, followed by
/// `copies` engine copies, as a kernel's module holds it.
std::string manifestBytes(const mk_kernel_manifest &manifest, int copies = 0) {
  std::string bytes(reinterpret_cast<const char *>(&manifest), sizeof manifest);
  mk_engine_copy copy{0, 1, 2, 0, 1, 1, 0, 64, 2, 128};
  for (int i = 0; i < copies; ++i)
    bytes.append(reinterpret_cast<const char *>(&copy), sizeof copy);
  return bytes;
}

mk_kernel_manifest sampleManifest() {
  mk_kernel_manifest m{};
  m.abi_version = MK_ABI_VERSION;
  m.grid = 132;
  m.dynamic_smem_bytes = 4096;
  m.flag_words = 8;
  m.arguments = 2;
  m.tensors = 3;
  m.symmetric_tensors = 4;
  m.roles = 2;
  m.tensor_bytes[0] = 3000 * 2304 * 2;
  m.tensor_bytes[1] = 28;
  m.tensor_bytes[2] = 4096;
  m.argument_types[0] = {"bf16", 2, 0, {3000, 2304}};
  m.argument_types[1] = {"f32", 1, 0, {7}};
  m.sm_split[0] = {"compute", 120, 0};
  m.sm_split[1] = {"intra_reduce", 12, 0};
  return m;
}
} // namespace

TEST_CASE("jit: a kernel's manifest is read back, and malformed ones are refused") {
  mkc::LaunchParameters launch = mkc::decodeManifest("k", manifestBytes(sampleManifest()));
  CHECK(launch.grid == 132);
  CHECK(launch.dynamicSmemBytes == 4096);
  CHECK(launch.flagWords == 8);
  CHECK(launch.arguments == 2);
  CHECK(launch.tensorBytes == std::vector<long long>{3000 * 2304 * 2, 28, 4096});
  CHECK(launch.symmetricTensors == 4);
  REQUIRE(launch.argumentTypes.size() == 2);
  CHECK(launch.argumentTypes[0].element == "bf16");
  CHECK(launch.argumentTypes[0].extents == std::vector<long long>{3000, 2304});
  CHECK(launch.argumentTypes[1].element == "f32");
  CHECK(launch.argumentTypes[1].extents == std::vector<long long>{7});
  CHECK(launch.smSplit.str() == "compute=120,intra_reduce=12");
  CHECK(launch.engineCopies.size() == 0);
  CHECK(launch.routedExperts == 0);

  mk_kernel_manifest routing = sampleManifest();
  routing.routed_experts = 64;
  CHECK(mkc::decodeManifest("k", manifestBytes(routing)).routedExperts == 64);

  // A kernel may have several roles of a kind (ring attention's transfers of K and of V).
  mk_kernel_manifest twoOfAKind = sampleManifest();
  twoOfAKind.sm_split[1] = {"compute", 12, 0};
  CHECK(mkc::decodeManifest("k", manifestBytes(twoOfAKind)).smSplit.str() ==
        "compute=120,compute=12");

  mk_kernel_manifest withCopy = sampleManifest();
  withCopy.engine_copy_count = 1;
  CHECK(mkc::decodeManifest("k", manifestBytes(withCopy, 1)).engineCopies.size() == 1);

  auto refusedBytes = [](const std::string &bytes) {
    try {
      mkc::decodeManifest("k", bytes);
    } catch (const mkc::JitError &error) {
      return std::string(error.what());
    }
    return std::string();
  };
  auto refused = [&](const mk_kernel_manifest &m, int copies = 0) {
    return refusedBytes(manifestBytes(m, copies));
  };
  mk_kernel_manifest m = sampleManifest();
  m.abi_version = MK_ABI_VERSION - 1;
  CHECK_THAT(refused(m), Catch::Contains("was generated for ABI version"));
  CHECK_THAT(refusedBytes(""), Catch::Contains("generated for ABI version 0"));
  CHECK_THAT(refusedBytes(manifestBytes(sampleManifest()).substr(0, 64)),
             Catch::Contains("has 64 bytes, fewer than"));
  m = sampleManifest();
  m.argument_types[0].rank = 0;
  CHECK_THAT(refused(m), Catch::Contains("k_manifest describes an argument"));
  m = sampleManifest();
  m.argument_types[1].extents[0] = ~mk_u64{0};
  CHECK_THAT(refused(m), Catch::Contains("with a dim too large"));
  m = sampleManifest();
  std::memset(m.argument_types[0].element, 'x', sizeof m.argument_types[0].element);
  CHECK_THAT(refused(m), Catch::Contains("without an element type"));
  m = sampleManifest();
  m.arguments = 4;
  CHECK_THAT(refused(m), Catch::Contains("counts more tensors, arguments"));
  m = sampleManifest();
  m.sm_split[1] = {"prefetch", 4, 0};
  CHECK_THAT(refused(m), Catch::Contains("sm split entry 'prefetch=4'"));
  m = sampleManifest();
  m.engine_copy_count = 2;
  CHECK_THAT(refused(m, 1), Catch::Contains("does not hold its 2 engine copies"));
  m = sampleManifest();
  m.engine_copy_count = 1;
  m.flag_words = 1;
  CHECK_THAT(refused(m, 1), Catch::Contains("engine copy of a tensor, GPU, flag or range"));
}
