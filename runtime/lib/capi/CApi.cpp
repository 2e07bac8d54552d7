//===- CApi.cpp - the C ABI of the mkc runtime (mkc.h) ----------------------===//
//
// Each entry point runs its C++ counterpart and turns exceptions into a status and this thread's
// last error; nothing is thrown across the ABI.
//
//===----------------------------------------------------------------------===//

#include "mkc.h"

#include "capi/Guarded.h"
#include "mk/runtime/Runtime.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <string_view>

struct mkc_runtime {
  std::unique_ptr<mkc::Runtime> runtime;
  std::atomic<int> liveOps = 0;
};

struct mkc_op {
  mkc_runtime *owner;
  mkc::FusedOp op;
};

namespace {

using mkc::capi::guarded;
using mkc::capi::lastError;

template <typename T> T &required(T *pointer, const char *name) {
  if (!pointer)
    throw mkc::RuntimeError(fmt::format("{} is null", name));
  return *pointer;
}

const char *orEmpty(const char *text) { return text ? text : ""; }

/// "M=1,N=2" as the pipeline's bindings.
std::vector<std::string> splitShapes(const char *shapes) {
  std::vector<std::string> bindings;
  std::string_view rest = orEmpty(shapes);
  while (!rest.empty()) {
    std::size_t comma = rest.find(',');
    if (std::string_view binding = rest.substr(0, comma); !binding.empty())
      bindings.emplace_back(binding);
    rest = comma == std::string_view::npos ? "" : rest.substr(comma + 1);
  }
  return bindings;
}

mkc_op *adopt(mkc_runtime &runtime, mkc::FusedOp op) {
  auto adopted = std::make_unique<mkc_op>(mkc_op{&runtime, std::move(op)});
  ++runtime.liveOps;
  return adopted.release();
}

} // namespace

extern "C" {

int mkc_api_version(void) { return MKC_API_VERSION; }

const char *mkc_status_name(mkc_status status) {
  switch (status) {
  case MKC_SUCCESS:
    return "MKC_SUCCESS";
  case MKC_ERROR_INVALID_ARGUMENT:
    return "MKC_ERROR_INVALID_ARGUMENT";
  case MKC_ERROR_NO_DEVICE:
    return "MKC_ERROR_NO_DEVICE";
  case MKC_ERROR_BOOTSTRAP:
    return "MKC_ERROR_BOOTSTRAP";
  case MKC_ERROR_COMPILE:
    return "MKC_ERROR_COMPILE";
  case MKC_ERROR_CUDA:
    return "MKC_ERROR_CUDA";
  case MKC_ERROR_INTERNAL:
    return "MKC_ERROR_INTERNAL";
  case MKC_ERROR_JOB_FAILED:
    return "MKC_ERROR_JOB_FAILED";
  }
  return "MKC_ERROR_UNKNOWN";
}

const char *mkc_last_error(void) { return lastError.c_str(); }

mkc_status mkc_runtime_options_default(mkc_runtime_options *options) {
  return guarded(__func__, [&] {
    mkc_runtime_options &out = required(options, "options");
    // The cache directory's string must outlive the call: it lives as long as the process.
    static const std::string cacheDirectory = mkc::Jit::defaultCacheDirectory().string();
    mkc::RuntimeOptions defaults = mkc::RuntimeOptions::fromEnvironment();
    out.symmetric_bytes = defaults.symmetricBytes;
    out.flag_words = defaults.flagWords;
    out.device = defaults.device.value_or(-1);
    out.cache_dir = cacheDirectory.c_str();
  });
}

mkc_status mkc_runtime_create(const mkc_runtime_options *options, mkc_runtime **runtime) {
  return guarded(__func__, [&] {
    mkc_runtime *&out = required(runtime, "runtime");
    out = nullptr;
    mkc::RuntimeOptions chosen = mkc::RuntimeOptions::fromEnvironment();
    if (options) {
      chosen.symmetricBytes = options->symmetric_bytes;
      chosen.flagWords = options->flag_words;
      if (options->device >= 0)
        chosen.device = options->device;
      if (options->cache_dir)
        chosen.cacheDirectory = options->cache_dir;
    }
    auto created = std::make_unique<mkc_runtime>();
    created->runtime = std::make_unique<mkc::Runtime>(chosen);
    out = created.release();
  });
}

mkc_status mkc_runtime_destroy(mkc_runtime *runtime) {
  return guarded(__func__, [&] {
    if (!runtime)
      return;
    if (int ops = runtime->liveOps; ops)
      throw mkc::RuntimeError(fmt::format("{} op(s) of this runtime are still alive: destroy "
                                          "them first",
                                          ops));
    delete runtime;
  });
}

mkc_status mkc_runtime_get_info(const mkc_runtime *runtime, mkc_runtime_info *info) {
  return guarded(__func__, [&] {
    mkc::Runtime &rt = *required(runtime, "runtime").runtime;
    mkc_runtime_info &out = required(info, "info");
    mkc::ProcessGroup &group = rt.communicator();
    out = {group.rank(),      group.worldSize(),      group.nodeIndex(), group.nodeCount(),
           group.localRank(), group.localWorldSize(), rt.device()};
  });
}

mkc_status mkc_runtime_network_statistics(const mkc_runtime *runtime,
                                          mkc_network_statistics *statistics) {
  return guarded(__func__, [&] {
    const mkc::net::ProxyStatistics counted =
        required(runtime, "runtime").runtime->networkStatistics();
    required(statistics, "statistics") = {counted.commands, counted.writes, counted.bytes};
  });
}

mkc_status mkc_barrier(mkc_runtime *runtime) {
  return guarded(__func__, [&] { required(runtime, "runtime").runtime->barrier(); });
}

mkc_status mkc_runtime_check(const mkc_runtime *runtime) {
  return guarded(__func__, [&] { required(runtime, "runtime").runtime->check(); });
}

mkc_status mkc_symmetric_alloc(mkc_runtime *runtime, size_t bytes, void **local) {
  return guarded(__func__, [&] {
    void *&out = required(local, "local");
    out = nullptr;
    out = required(runtime, "runtime").runtime->allocate(bytes).local;
  });
}

mkc_status mkc_op_compile(mkc_runtime *runtime, const char *text, const char *name,
                          const char *shapes, const char *options, mkc_op **op) {
  return guarded(__func__, [&] {
    mkc_op *&out = required(op, "op");
    out = nullptr;
    mkc_runtime &rt = required(runtime, "runtime");
    mkc::TileProgram program{&required(text, "text"), name ? name : "<program>"};
    out = adopt(rt, rt.runtime->compile(program, splitShapes(shapes), orEmpty(options)));
  });
}

mkc_status mkc_op_compile_file(mkc_runtime *runtime, const char *path, const char *shapes,
                               const char *options, mkc_op **op) {
  return guarded(__func__, [&] {
    mkc_op *&out = required(op, "op");
    out = nullptr;
    mkc_runtime &rt = required(runtime, "runtime");
    out = adopt(rt, rt.runtime->compileFile(&required(path, "path"), splitShapes(shapes),
                                            orEmpty(options)));
  });
}

mkc_status mkc_op_destroy(mkc_op *op) {
  return guarded(__func__, [&] {
    if (!op)
      return;
    --op->owner->liveOps;
    delete op;
  });
}

mkc_status mkc_op_name(const mkc_op *op, const char **name) {
  return guarded(__func__, [&] { required(name, "name") = required(op, "op").op.name().c_str(); });
}

mkc_status mkc_op_num_roles(const mkc_op *op, int *count) {
  return guarded(__func__, [&] {
    required(count, "count") =
        static_cast<int>(required(op, "op").op.kernel().launch().smSplit.roles.size());
  });
}

mkc_status mkc_op_get_role(const mkc_op *op, int index, const char **kind, int *ctas) {
  return guarded(__func__, [&] {
    const auto &roles = required(op, "op").op.kernel().launch().smSplit.roles;
    const char *&kindOut = required(kind, "kind");
    int &ctasOut = required(ctas, "ctas");
    if (index < 0 || index >= static_cast<int>(roles.size()))
      throw mkc::RuntimeError(
          fmt::format("{} has {} roles; there is no role {}", op->op.name(), roles.size(), index));
    kindOut = roles[index].kind.c_str();
    ctasOut = static_cast<int>(op->op.smSplit().roles[index].ctas);
  });
}

mkc_status mkc_op_set_sm_split(mkc_op *op, const int *ctas, int count) {
  return guarded(__func__, [&] {
    mkc::FusedOp &fused = required(op, "op").op;
    // The kernel's roles with the counts given; too few or too many fail the collective check.
    const auto &roles = fused.kernel().launch().smSplit.roles;
    mlir::mk::SmSplit split;
    for (int i = 0; ctas && i < count; ++i)
      split.roles.push_back({i < static_cast<int>(roles.size()) ? roles[i].kind : "?", ctas[i]});
    fused.setSmSplit(split);
  });
}

mkc_status mkc_op_num_arguments(const mkc_op *op, int *count) {
  return guarded(__func__, [&] {
    required(count, "count") = static_cast<int>(required(op, "op").op.arguments().size());
  });
}

mkc_status mkc_op_get_argument(const mkc_op *op, int index, mkc_argument *argument) {
  return guarded(__func__, [&] {
    const std::vector<mkc::Argument> &arguments = required(op, "op").op.arguments();
    mkc_argument &out = required(argument, "argument");
    if (index < 0 || index >= static_cast<int>(arguments.size()))
      throw mkc::RuntimeError(fmt::format("{} has {} arguments; there is no argument {}",
                                          op->op.name(), arguments.size(), index));
    const mkc::Argument &in = arguments[index];
    if (in.type.element.size() >= sizeof out.element || in.type.extents.size() > MKC_MAX_RANK)
      throw mkc::RuntimeError(fmt::format("argument {} of {} ({}, rank {}) does not fit "
                                          "mkc_argument",
                                          index, op->op.name(), in.type.element,
                                          in.type.extents.size()));
    out = {};
    std::memcpy(out.element, in.type.element.c_str(), in.type.element.size() + 1);
    out.rank = static_cast<int>(in.type.extents.size());
    std::copy(in.type.extents.begin(), in.type.extents.end(), out.extents);
    out.bytes = in.bytes;
    out.symmetric = in.symmetric;
  });
}

mkc_status mkc_op_launch(const mkc_op *op, void *stream, void *const *arguments, int count) {
  return guarded(__func__, [&] {
    if (count < 0)
      throw mkc::RuntimeError(fmt::format("count is {}", count));
    if (count > 0 && !arguments)
      throw mkc::RuntimeError("arguments is null");
    required(op, "op").op.launch(static_cast<CUstream>(stream),
                                 std::span<void *const>(arguments, count));
  });
}

mkc_status mkc_op_routing(const mkc_op *op, unsigned *launch, unsigned *dropped,
                          unsigned long long *nvlink_bytes) {
  return guarded(__func__, [&] {
    unsigned &launchOut = required(launch, "launch");
    unsigned &droppedOut = required(dropped, "dropped");
    unsigned long long &bytesOut = required(nvlink_bytes, "nvlink_bytes");
    const mkc::RoutingReport report = required(op, "op").op.routing();
    launchOut = report.launch;
    droppedOut = report.dropped;
    bytesOut = report.nvlinkBytes;
  });
}

mkc_status mkc_generate_cuda(const char *text, const char *name, const char *topology, int rank,
                             const char *shapes, const char *compiler_options, char **cuda) {
  return guarded(__func__, [&] {
    char *&out = required(cuda, "cuda");
    out = nullptr;
    mkc::JitOptions options;
    options.pipeline.topology = orEmpty(topology);
    options.pipeline.rank = rank;
    options.pipeline.shapes = splitShapes(shapes);
    mkc::setCompilerOptions(options, orEmpty(compiler_options));
    std::string source =
        mkc::generateKernel({&required(text, "text"), name ? name : "<program>"}, options).cuda;
    out = static_cast<char *>(std::malloc(source.size() + 1));
    if (!out)
      throw std::bad_alloc();
    std::memcpy(out, source.c_str(), source.size() + 1);
  });
}

void mkc_free(void *pointer) { std::free(pointer); }

} // extern "C"
